"""Corpora for the corpus analysis (docs/corpus.md): check an upload, a paste or a file as it streams
past, and the shipped corpora. No torch: the API checks uploads with it, the worker and the CLI read
with it.

A corpus is a list of texts. Formats (``workers.inputs.files``): pasted text or ``.txt`` (one text
per line), ``.jsonl`` (one JSON object per line, the text in a named field), ``.csv`` (a header row,
the text in a named column), ``.parquet`` (a named column) and Hugging Face ``datasets`` directories
saved with ``save_to_disk`` (a named column; uploaded packed in a ``.zip`` or ``.tar[.gz]``). Every
check names the problem (and the line or row), so the API can answer 422 with it as it is.

``stage_corpus`` checks a file of up to ``corpus_max_texts`` (1,000,000) texts in one pass, holding
one chunk of texts at a time: it hashes the texts (the content id) and writes them as the store's
chunks into a spool file, which ``Store.put_corpus_chunks`` then stores in one transaction.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from workers.core.errors import BadFileError
from workers.inputs.files import TABLE_FORMATS, rows, unit
from workers.store.corpora import CHUNK_BYTES, CHUNK_TEXTS, decode_chunk, encode_items

CORPUS_ID_PREFIX = "cp-"
ARCHIVES = (
    ".zip",
    ".tar",
    ".tar.gz",
    ".tgz",
    ".tar.bz2",
    ".tar.xz",
)  # a datasets directory, packed
EXTENSIONS = {
    ".txt": "txt",
    ".jsonl": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    **dict.fromkeys(ARCHIVES, "datasets"),
}
DATA = Path(__file__).resolve().parents[1] / "data"
PREVIEW = 5
_RECORD = struct.Struct("<II")  # a spooled chunk: number of texts, bytes

# shipped corpora: id -> (file, format, field, description with its licence)
SHIPPED: dict[str, tuple[Path, str, str | None, str]] = {
    "builtin-english": (
        DATA / "corpora" / "english.txt",
        "txt",
        None,
        "147 plain English sentences written for headscope (CC0 1.0: no rights reserved); "
        "many repeat a name or a noun, which gives the induction and duplicate scores queries",
    ),
    "builtin-lasf-heldout": (
        DATA / "lasf_minilm" / "test_sentences.json",
        "json",
        None,
        "560 held-out sentences of the shipped LasF layer: Python documentation and standard-library "
        "docstrings (PSF License v2)",
    ),
}


@dataclass(frozen=True)
class Limits:
    """What one corpus may hold (settings ``corpus_max_bytes``, ``corpus_max_texts``,
    ``corpus_max_text_chars``): ``max_bytes`` bounds the upload and the texts' UTF-8 bytes in all."""

    max_bytes: int = 256 * 2**20
    max_texts: int = 1_000_000
    max_text_chars: int = 5_000

    @classmethod
    def from_settings(cls, settings: Any = None, *, max_bytes: int | None = None) -> Limits:
        """The limits of ``settings`` (default: this process'), ``max_bytes`` capping the size."""
        if settings is None:
            from workers.core.settings import get_settings

            settings = get_settings()
        size = (
            settings.corpus_max_bytes
            if max_bytes is None
            else min(max_bytes, settings.corpus_max_bytes)
        )
        return cls(size, settings.corpus_max_texts, settings.corpus_max_text_chars)


@dataclass(frozen=True)
class Corpus:
    """A checked corpus held in memory (shipped corpora, small files): its texts and a display name."""

    texts: list[str]
    name: str

    @property
    def id(self) -> str:
        return corpus_id(self.texts)


def _item(text: str) -> bytes:
    return json.dumps(text, ensure_ascii=False).encode()


def corpus_id(texts: list[str]) -> str:
    """``cp-`` + the first 32 hex digits of the SHA-256 of the texts as compact JSON: same texts, same id
    (``ContentId`` computes the same id a text at a time)."""
    h = ContentId()
    for t in texts:
        h.add(t)
    return h.id


class ContentId:
    """The content id and JSON size of texts fed one at a time (the JSON list ``["a","b"]``, hashed)."""

    def __init__(self) -> None:
        self.sha = hashlib.sha256(b"[")
        self.n = 0
        self.size = 2  # the brackets

    def add(self, text: str) -> bytes:
        """Count ``text`` in; its JSON encoding."""
        item = _item(text)
        if self.n:
            self.sha.update(b",")
            self.size += 1
        self.sha.update(item)
        self.size += len(item)
        self.n += 1
        return item

    @property
    def id(self) -> str:
        h = self.sha.copy()
        h.update(b"]")
        return CORPUS_ID_PREFIX + h.hexdigest()[:32]


def format_of(filename: str) -> str | None:
    """The format of a file name (``txt``, ``jsonl``, ``csv``, ``parquet``; ``datasets`` for an
    archive); None for anything else."""
    lower = filename.lower()
    for ext in sorted(EXTENSIONS, key=len, reverse=True):
        if lower.endswith(ext):
            return EXTENSIONS[ext]
    return None


@dataclass
class Checker:
    """The checks of every row, as they stream past: not too many texts or bytes (raised at once), no
    empty text, none too long, at least one. ``add`` returns the stripped text while the corpus can
    still be valid; ``finish`` raises the first remaining problem in that order, naming the rows."""

    name: str
    unit: str
    limits: Limits
    n: int = 0
    n_bytes: int = 0
    empty: list[int] = field(default_factory=list)
    n_empty: int = 0
    long: int | None = None

    @property
    def ok(self) -> bool:
        return not self.n_empty and self.long is None

    def add(self, number: int, text: str | None) -> str | None:
        self.n += 1
        if (
            self.n > self.limits.max_texts
        ):  # at once: a small file may hold a hundred million short rows
            raise BadFileError(
                f"{self.name} has more than {self.limits.max_texts:,} texts; a corpus may have at "
                f"most {self.limits.max_texts:,}"
            )
        if text is None or not text.strip():
            self.n_empty += 1
            if len(self.empty) < 5:
                self.empty.append(number)
            return None
        if len(text) > self.limits.max_text_chars and self.long is None:
            self.long = number
        self.n_bytes += len(text.encode())
        if (
            self.n_bytes > self.limits.max_bytes
        ):  # at once: a small Parquet file may unpack to gigabytes
            raise BadFileError(
                f"{self.name}: its texts take more than the {self.limits.max_bytes:,}-byte limit "
                "for a corpus"
            )
        return text.strip() if self.ok else None

    def finish(self) -> None:
        into = "on" if self.unit == "line" else "in"
        if self.n_empty:
            more = f" and {self.n_empty - 5} more" if self.n_empty > 5 else ""
            where = f"{self.unit} {', '.join(map(str, self.empty))}{more}"
            raise BadFileError(f"{self.name}: empty text {into} {where}; remove empty rows")
        if self.long is not None:
            raise BadFileError(
                f"{self.name}: the text {into} {self.unit} {self.long} is longer than "
                f"{self.limits.max_text_chars:,} characters"
            )
        if not self.n:
            raise BadFileError(f"{self.name} holds no text")


def _trailing_blank_lines_dropped(
    found: Iterator[tuple[int, str | None]],
) -> Iterator[tuple[int, str | None]]:
    """Blank lines (text None) at the end of a text file are its final newline(s), not empty texts."""
    pending: list[tuple[int, str | None]] = []
    for row in found:
        if row[1] is None:
            pending.append(row)
            continue
        yield from pending
        pending = []
        yield row


def checked_rows(
    source: Path | IO[bytes], *, fmt: str, name: str, field: str | None, limits: Limits
) -> Iterator[str]:
    """The checked, stripped texts of ``source`` in order; a problem raises ``BadFileError`` (a
    row that cannot be read at once, the checks of ``Checker`` at the end)."""
    if isinstance(source, Path) and fmt != "datasets" and source.stat().st_size > limits.max_bytes:
        raise BadFileError(
            f"{name} is larger than the {limits.max_bytes:,}-byte limit for a corpus"
        )
    check = Checker(name, unit(fmt), limits)
    for number, text in _trailing_blank_lines_dropped(
        rows(source, fmt=fmt, name=name, field=field)
    ):
        kept = check.add(number, text)
        if kept is not None:
            yield kept
    if not check.n and fmt in ("txt", "jsonl"):
        raise BadFileError(f"{name} is empty")
    check.finish()


def _bytes_source(raw: bytes | str, *, name: str, max_bytes: int) -> IO[bytes]:
    data = raw.encode() if isinstance(raw, str) else raw
    if len(data) > max_bytes:
        raise BadFileError(f"{name} is larger than the {max_bytes:,}-byte limit for a corpus")
    return io.BytesIO(data)


def parse_corpus(
    raw: bytes | str, *, fmt: str, name: str, field: str | None = None, limits: Limits | None = None
) -> Corpus:
    """Check and parse a small corpus held in memory (a paste, a shipped file): txt, jsonl or csv."""
    limits = limits or Limits.from_settings()
    if fmt in TABLE_FORMATS:
        raise BadFileError(f"{name}: a {fmt} corpus is read from a file (stage_corpus)")
    source = _bytes_source(raw, name=name, max_bytes=limits.max_bytes)
    return Corpus(list(checked_rows(source, fmt=fmt, name=name, field=field, limits=limits)), name)


@dataclass
class StagedCorpus:
    """A checked corpus spooled to a file as the store's chunks, not yet stored."""

    id: str
    name: str
    n_texts: int
    size: int  # bytes of the texts as one JSON list
    preview: list[str]
    spool: Path
    stored_bytes: int  # the compressed chunks: what the store will hold (the quotas count it)

    def chunks(self) -> Iterator[tuple[int, bytes]]:
        """(number of texts, encoded chunk) in order, one in memory at a time."""
        with open(self.spool, "rb") as fh:
            while head := fh.read(_RECORD.size):
                n, length = _RECORD.unpack(head)
                yield n, fh.read(length)

    def __len__(self) -> int:
        return self.n_texts

    def batches(
        self, start: int = 0, stop: int | None = None, *, batch: int = 1000
    ) -> Iterator[list[str]]:
        """The texts ``[start, stop)`` in lists of at most ``batch`` (a ``TextSource``: the CLI runs a
        corpus file from its spool, a chunk in memory at a time)."""
        stop = self.n_texts if stop is None else min(stop, self.n_texts)
        pos, out = 0, []
        with open(self.spool, "rb") as fh:
            while pos < stop and (head := fh.read(_RECORD.size)):
                n, length = _RECORD.unpack(head)
                if pos + n <= start:
                    fh.seek(length, os.SEEK_CUR)
                else:
                    for text in decode_chunk(fh.read(length))[max(start - pos, 0) : stop - pos]:
                        out.append(text)
                        if len(out) == batch:
                            yield out
                            out = []
                pos += n
        if out:
            yield out

    def discard(self) -> None:
        self.spool.unlink(missing_ok=True)


def stage_corpus(
    source: Path | bytes | str,
    *,
    fmt: str,
    name: str,
    field: str | None = None,
    limits: Limits | None = None,
    spool_dir: Path | None = None,
) -> StagedCorpus:
    """Check a corpus completely (a file path, or bytes / str of a text format) and spool its texts
    as the store's chunks; one chunk in memory at a time. Raises ``BadFileError`` naming the problem,
    leaving no spool file."""
    limits = limits or Limits.from_settings()
    if fmt == "txt" and field is not None:
        raise BadFileError(
            f"{name}: field applies to .jsonl, .csv, .parquet and datasets corpora, not to .txt"
        )
    if not isinstance(source, Path):
        if fmt in TABLE_FORMATS:
            raise BadFileError(f"{name}: a {fmt} corpus is read from a file")
        source = _bytes_source(source, name=name, max_bytes=limits.max_bytes)  # type: ignore[assignment]
    if fmt == "datasets" and isinstance(source, Path) and source.is_file():
        from workers.inputs.archive import unpacked

        with unpacked(source, name=name, max_bytes=limits.max_bytes, work_dir=spool_dir) as root:
            return stage_corpus(
                root, fmt=fmt, name=name, field=field, limits=limits, spool_dir=spool_dir
            )
    content = ContentId()
    preview: list[str] = []
    fd, tmp = tempfile.mkstemp(prefix="corpus-", suffix=".spool", dir=spool_dir)
    spool = Path(tmp)
    stored = 0
    try:
        with os.fdopen(fd, "wb") as out:
            items: list[bytes] = []
            size = 0
            texts = checked_rows(source, fmt=fmt, name=name, field=field, limits=limits)  # type: ignore[arg-type]
            for text in texts:
                items.append(content.add(text))
                size += len(items[-1])
                if len(preview) < PREVIEW:
                    preview.append(text[:200])
                if len(items) == CHUNK_TEXTS or size >= CHUNK_BYTES:
                    stored += _spool(out, items)
                    items, size = [], 0
            if items:
                stored += _spool(out, items)
    except BaseException:
        spool.unlink(missing_ok=True)
        raise
    return StagedCorpus(content.id, name, content.n, content.size, preview, spool, stored)


def _spool(out: IO[bytes], items: list[bytes]) -> int:
    data = encode_items(items)
    out.write(_RECORD.pack(len(items), len(data)))
    out.write(data)
    return len(data)


def shipped_corpus(corpus_id: str) -> Corpus | None:
    """A shipped corpus by id (``builtin-...``), or None."""
    entry = SHIPPED.get(corpus_id)
    if entry is None:
        return None
    path, fmt, field_, _ = entry
    if fmt == "json":
        return Corpus([str(t) for t in json.loads(path.read_text())], corpus_id)
    return parse_corpus(path.read_bytes(), fmt=fmt, name=corpus_id, field=field_, limits=Limits())


def shipped_list() -> list[dict[str, object]]:
    """The shipped corpora: id, description, number of texts."""
    out = []
    for cid, (_, _, _, about) in SHIPPED.items():
        corpus = shipped_corpus(cid)
        out.append(
            {"id": cid, "name": cid, "about": about, "n_texts": len(corpus.texts) if corpus else 0}
        )
    return out
