"""Corpora for the corpus analysis (docs/corpus.md): parse and check an upload or a paste, and the
shipped corpora. No torch: the API checks uploads with it, the worker and the CLI read with it.

A corpus is a list of texts. Formats: pasted text or ``.txt`` (one text per line), ``.jsonl`` (one
JSON object per line, the texts in a named field) and ``.csv`` (a header row, the texts in a named
column). Every check names the problem (and the line), so the API can answer 422 with it as it is.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

from workers.errors import BadFileError

CORPUS_ID_PREFIX = "cp-"
FORMATS = ("txt", "jsonl", "csv")
MAX_CORPUS_BYTES = 16 * 2**20
MAX_TEXTS = 20_000
MAX_CORPUS_TEXT_CHARS = 5_000  # per text (a corpus is of sentences and paragraphs)
DATA = Path(__file__).resolve().parent / "data"

# shipped corpora: id -> (file, format, field, description with its licence)
SHIPPED: dict[str, tuple[Path, str, str | None, str]] = {
    "builtin-english": (
        DATA / "corpora" / "english.txt", "txt", None,
        "147 plain English sentences written for headscope (CC0 1.0: no rights reserved); "
        "many repeat a name or a noun, which gives the induction and duplicate scores queries",
    ),
    "builtin-lasf-heldout": (
        DATA / "lasf_minilm" / "test_sentences.json", "json", None,
        "560 held-out sentences of the shipped LasF layer: Python documentation and standard-library "
        "docstrings (PSF License v2)",
    ),
}


@dataclass(frozen=True)
class Corpus:
    """A checked corpus: its texts, a display name and its content id (``cp-`` + SHA-256)."""

    texts: list[str]
    name: str

    @property
    def id(self) -> str:
        return corpus_id(self.texts)

    @property
    def n_chars(self) -> int:
        return sum(len(t) for t in self.texts)


def corpus_id(texts: list[str]) -> str:
    """``cp-`` + the first 32 hex digits of the SHA-256 of the texts as JSON: same texts, same id."""
    blob = json.dumps(texts, ensure_ascii=False, separators=(",", ":")).encode()
    return CORPUS_ID_PREFIX + hashlib.sha256(blob).hexdigest()[:32]


def format_of(filename: str) -> str | None:
    """``txt``, ``jsonl`` or ``csv`` from a file name; None for anything else."""
    lower = filename.lower()
    for fmt in FORMATS:
        if lower.endswith("." + fmt):
            return fmt
    return None


def decode(raw: bytes, *, name: str, max_bytes: int) -> str:
    """UTF-8 text (a BOM allowed); the size, NUL bytes and bad encodings refused by name."""
    if len(raw) > max_bytes:
        raise BadFileError(f"{name} is larger than the {max_bytes:,}-byte limit for a corpus")
    if not raw.strip():
        raise BadFileError(f"{name} is empty")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise BadFileError(f"{name} is not UTF-8 text (line {line}, byte {exc.start}); save it as UTF-8") from None
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise BadFileError(f"{name} has a NUL character on line {line}: is it a binary file?")
    return text


def _rows(text: str) -> list[str]:
    """Lines of a text, a last empty line (the file's final newline) dropped."""
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def _check(texts: list[tuple[int, str]], *, name: str, max_texts: int) -> list[str]:
    """The texts of (line, text) rows: none empty, none too long, not too many, at least one."""
    empty = [line for line, t in texts if not t.strip()]
    if empty:
        where = ", ".join(map(str, empty[:5])) + (f" and {len(empty) - 5} more" if len(empty) > 5 else "")
        raise BadFileError(f"{name}: empty text on line {where}; remove empty rows")
    long = [line for line, t in texts if len(t) > MAX_CORPUS_TEXT_CHARS]
    if long:
        raise BadFileError(f"{name}: the text on line {long[0]} is longer than {MAX_CORPUS_TEXT_CHARS:,} characters")
    if not texts:
        raise BadFileError(f"{name} holds no text")
    if len(texts) > max_texts:
        raise BadFileError(f"{name} has {len(texts):,} texts; a corpus may have at most {max_texts:,}")
    return [t.strip() for _, t in texts]


def parse_corpus(raw: bytes | str, *, fmt: str, name: str, field: str | None = None,
                 max_bytes: int | None = None, max_texts: int | None = None) -> Corpus:
    """Check and parse a corpus (``fmt``: txt, jsonl or csv; ``field``: the JSONL field or CSV
    column; limits default to ``MAX_CORPUS_BYTES`` and ``MAX_TEXTS``). Raises ``BadFileError``
    naming the problem."""
    max_bytes = MAX_CORPUS_BYTES if max_bytes is None else max_bytes
    max_texts = MAX_TEXTS if max_texts is None else max_texts
    text = raw if isinstance(raw, str) else decode(raw, name=name, max_bytes=max_bytes)
    if isinstance(raw, str):
        if len(text.encode()) > max_bytes:
            raise BadFileError(f"{name} is larger than the {max_bytes:,}-byte limit for a corpus")
        if not text.strip():
            raise BadFileError(f"{name} is empty")
    if fmt == "txt":
        rows = list(enumerate(_rows(text), start=1))
    elif fmt == "jsonl":
        rows = _jsonl(text, name=name, field=field or "text")
    elif fmt == "csv":
        rows = _csv(text, name=name, column=field or "text")
    else:
        raise BadFileError(f"{name}: unsupported corpus format {fmt!r}; use {', '.join(FORMATS)}")
    return Corpus(_check(rows, name=name, max_texts=max_texts), name)


def _jsonl(text: str, *, name: str, field: str) -> list[tuple[int, str]]:
    rows = []
    for line_no, line in enumerate(_rows(text), start=1):
        if not line.strip():
            rows.append((line_no, ""))
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BadFileError(f"{name}: line {line_no} is not JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise BadFileError(f"{name}: line {line_no} is not a JSON object")
        if field not in obj:
            keys = ", ".join(sorted(map(str, obj))[:10]) or "none"
            raise BadFileError(f"{name}: line {line_no} has no field {field!r} (its fields: {keys})")
        if not isinstance(obj[field], str):
            raise BadFileError(f"{name}: field {field!r} on line {line_no} is not a string")
        rows.append((line_no, obj[field]))
    return rows


def _csv(text: str, *, name: str, column: str) -> list[tuple[int, str]]:
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise BadFileError(f"{name} is empty") from None
    except csv.Error as exc:
        raise BadFileError(f"{name}: not CSV ({exc})") from None
    if column not in header:
        raise BadFileError(f"{name} has no column {column!r} (its columns: {', '.join(header[:20]) or 'none'})")
    at = header.index(column)
    rows = []
    try:
        for record in reader:
            line_no = reader.line_num
            if not record or (len(record) == 1 and not record[0].strip()):
                rows.append((line_no, ""))
                continue
            if len(record) <= at:
                raise BadFileError(f"{name}: line {line_no} has no value in column {column!r}")
            rows.append((line_no, record[at]))
    except csv.Error as exc:
        raise BadFileError(f"{name}: bad CSV near line {reader.line_num} ({exc})") from None
    return rows


def shipped_corpus(corpus_id: str) -> Corpus | None:
    """A shipped corpus by id (``builtin-...``), or None."""
    entry = SHIPPED.get(corpus_id)
    if entry is None:
        return None
    path, fmt, field, _ = entry
    if fmt == "json":
        return Corpus([str(t) for t in json.loads(path.read_text())], corpus_id)
    return parse_corpus(path.read_bytes(), fmt=fmt, name=corpus_id, field=field)


def shipped_list() -> list[dict[str, object]]:
    """The shipped corpora: id, description, number of texts."""
    out = []
    for cid, (_, _, _, about) in SHIPPED.items():
        corpus = shipped_corpus(cid)
        out.append({"id": cid, "name": cid, "about": about, "n_texts": len(corpus.texts) if corpus else 0})
    return out
