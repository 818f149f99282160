"""A Hugging Face ``datasets`` directory uploaded packed (``.zip``, ``.tar``, ``.tar.gz``/``.tgz``,
``.tar.bz2``, ``.tar.xz``), unpacked safely into a temporary directory (docs/corpus.md "Input").

Nothing of the archive decides where a byte lands: no member is extracted by the archive library
(``extractall`` is never called); each kept member is copied to a path built from its checked name.
Refused: absolute names, ``..``, links and devices, a name twice, more than ``MAX_MEMBERS`` members,
more than the byte limit unpacked (counted as bytes are written, whatever the headers claim). Kept:
only what ``save_to_disk`` writes and headscope reads — ``*.arrow`` data files and the JSON files
``state.json``, ``dataset_info.json``, ``dataset_dict.json`` (never a pickle); anything else (a
``README``, ``__MACOSX/``) is skipped. The dataset is the shallowest directory holding ``state.json``
or ``dataset_dict.json``, so the archive may hold the directory itself or its contents.
"""

from __future__ import annotations

import lzma
import shutil
import stat
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import IO

from workers.core.errors import BadFileError
from workers.inputs.files import DATA_FILE

MAX_MEMBERS = 10_000
KEPT_JSON = ("state.json", "dataset_info.json", "dataset_dict.json")
MARKERS = ("state.json", "dataset_dict.json")
BLOCK = 2**20


def _safe_parts(member: str, *, name: str) -> tuple[str, ...]:
    """The path parts of an archive member's name; an absolute name or ``..`` is refused."""
    raw = member.replace("\\", "/")
    path = PurePosixPath(raw)
    if path.is_absolute() or raw.startswith("/") or (len(raw) > 1 and raw[1] == ":"):
        raise BadFileError(f"{name}: the archive member {member!r} has an absolute path")
    parts = tuple(p for p in path.parts if p not in ("", "."))
    if any(p == ".." for p in parts):
        raise BadFileError(f"{name}: the archive member {member!r} points outside the archive (..)")
    return parts


def _kept(parts: tuple[str, ...]) -> bool:
    if not parts or parts[0] == "__MACOSX":
        return False
    base = parts[-1]
    return base in KEPT_JSON or bool(DATA_FILE.fullmatch(base))


class _Writer:
    """Copies members below ``root``, counting members and bytes against the limits."""

    def __init__(self, root: Path, *, name: str, max_bytes: int):
        self.root, self.name, self.max_bytes = root, name, max_bytes
        self.n_bytes = self.n_members = 0

    def count(self) -> None:
        self.n_members += 1
        if self.n_members > MAX_MEMBERS:
            raise BadFileError(f"{self.name}: the archive has more than {MAX_MEMBERS:,} members")

    def copy(self, parts: tuple[str, ...], src: IO[bytes]) -> None:
        target = self.root.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            out = open(target, "xb")  # a name twice is refused, never overwritten
        except FileExistsError:
            raise BadFileError(f"{self.name}: the archive holds {'/'.join(parts)} twice") from None
        with out:
            while block := src.read(BLOCK):
                self.n_bytes += len(block)
                if self.n_bytes > self.max_bytes:
                    raise BadFileError(
                        f"{self.name} unpacks to more than the {self.max_bytes:,}-byte limit "
                        "for a corpus"
                    )
                out.write(block)


def _unzip(path: Path, writer: _Writer) -> None:
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            writer.count()
            parts = _safe_parts(info.filename, name=writer.name)
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise BadFileError(f"{writer.name}: the archive member {info.filename!r} is a link")
            if info.is_dir() or not _kept(parts):
                continue
            with zf.open(info) as src:
                writer.copy(parts, src)


def _untar(path: Path, writer: _Writer) -> None:
    with tarfile.open(path, "r:*") as tf:
        for member in tf:
            writer.count()
            parts = _safe_parts(member.name, name=writer.name)
            if member.isdir():
                continue
            if not member.isfile():
                raise BadFileError(
                    f"{writer.name}: the archive member {member.name!r} is a link or a device, "
                    "not a file"
                )
            if not _kept(parts):
                continue
            src = tf.extractfile(member)
            if src is not None:
                with src:
                    writer.copy(parts, src)


def _dataset_root(root: Path, *, name: str) -> Path:
    found = sorted(
        {p.parent for marker in MARKERS for p in root.rglob(marker)},
        key=lambda p: (len(p.relative_to(root).parts), str(p)),
    )
    if not found:
        raise BadFileError(
            f"{name} holds no dataset saved with save_to_disk (no state.json or dataset_dict.json)"
        )
    depth = len(found[0].relative_to(root).parts)
    top = [p for p in found if len(p.relative_to(root).parts) == depth]
    if len(top) > 1:
        names = ", ".join(str(p.relative_to(root)) + "/" for p in top[:5])
        raise BadFileError(f"{name} holds several datasets ({names}); pack one")
    return top[0]


@contextmanager
def unpacked(
    path: Path, *, name: str, max_bytes: int, work_dir: Path | None = None
) -> Iterator[Path]:
    """The dataset directory inside archive ``path``, unpacked into a temporary directory that is
    removed afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix="corpus-archive-", dir=work_dir))
    try:
        writer = _Writer(tmp, name=name, max_bytes=max_bytes)
        try:
            if zipfile.is_zipfile(path):
                _unzip(path, writer)
            elif tarfile.is_tarfile(path):
                _untar(path, writer)
            else:
                raise BadFileError(f"{name} is not a zip or tar archive")
        except (
            zipfile.BadZipFile,
            tarfile.TarError,
            EOFError,
            OSError,
            zlib.error,
            lzma.LZMAError,
            RuntimeError,
            NotImplementedError,
        ) as exc:  # RuntimeError: an encrypted member; NotImplementedError: a codec
            raise BadFileError(f"{name} is not a readable archive ({exc})") from None
        yield _dataset_root(tmp, name=name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
