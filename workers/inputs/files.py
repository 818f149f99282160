"""Rows of a corpus file, read as a stream (docs/corpus.md "Input"): one generator per format, each
yielding ``(number, text)`` in order and raising ``BadFileError`` at the first row it cannot read.

- ``txt``: one text per line; ``jsonl``: one JSON object per line, the text in ``field``; ``csv``: a
  header row, the text in column ``field``. Numbered by line from 1, as an editor counts; the bytes
  are checked as they are read (UTF-8, a BOM allowed, no NUL), a line at a time.
- ``parquet``: column ``field`` of a Parquet file (pyarrow, a record batch at a time); ``datasets``: a
  Hugging Face ``datasets`` directory written by ``save_to_disk`` (its Arrow files in ``state.json``'s
  order, memory-mapped, a record batch at a time; no pickle is ever read), or such a directory packed
  in a ``.zip`` / ``.tar[.gz|.bz2|.xz]`` (``workers.inputs.archive`` unpacks it safely). Numbered by
  row from 0, as pyarrow and ``datasets`` index them; a null is refused naming its row.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from workers.core.errors import BadFileError

TEXT_FORMATS = ("txt", "jsonl", "csv")
TABLE_FORMATS = ("parquet", "datasets")
ARROW_BATCH = 8192  # rows decoded at a time from Parquet and Arrow files
DATA_FILE = re.compile(r"[A-Za-z0-9_.-]+\.arrow")


def unit(fmt: str) -> str:
    """How a format's rows are named in messages: ``line`` (from 1) or ``row`` (from 0)."""
    return "row" if fmt in TABLE_FORMATS else "line"


def rows(
    source: Path | IO[bytes], *, fmt: str, name: str, field: str | None = None
) -> Iterator[tuple[int, str | None]]:
    """``(number, text)`` of every row of ``source`` (a path, or a binary file for the text formats);
    text None for a blank line of a .txt or .jsonl file (an empty text, unless only blank lines follow)."""
    if fmt in TEXT_FORMATS:
        if isinstance(source, Path):
            with open(source, "rb") as fh:
                yield from _text_rows(fh, fmt=fmt, name=name, field=field)
        else:
            yield from _text_rows(source, fmt=fmt, name=name, field=field)
    elif fmt == "parquet":
        yield from parquet_rows(Path(source), name=name, field=field or "text")  # type: ignore[arg-type]
    elif fmt == "datasets":
        yield from dataset_rows(Path(source), name=name, field=field or "text")  # type: ignore[arg-type]
    else:
        raise BadFileError(f"{name}: unsupported corpus format {fmt!r}")


def _text_rows(
    fh: IO[bytes], *, fmt: str, name: str, field: str | None
) -> Iterator[tuple[int, str | None]]:
    lines = decoded_lines(fh, name=name)
    if fmt == "txt":
        number = 0
        for (
            _,
            line,
        ) in lines:  # as str.splitlines() numbers them (\r, \x0b, \u2028 ... end a line too)
            for piece in line.splitlines():
                number += 1
                yield number, piece if piece.strip() else None
    elif fmt == "jsonl":
        yield from _jsonl(lines, name=name, field=field or "text")
    else:
        yield from _csv(lines, name=name, column=field or "text")


def decoded_lines(fh: IO[bytes], *, name: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a UTF-8 file read a line at a time (line endings kept; a BOM on the
    first line dropped); an encoding error or a NUL names its line (and byte)."""
    offset = 0
    for number, raw in enumerate(fh, start=1):
        if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw, offset = raw[3:], 3
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadFileError(
                f"{name} is not UTF-8 text (line {number}, byte {offset + exc.start}); "
                "save it as UTF-8"
            ) from None
        if "\x00" in line:
            raise BadFileError(f"{name} has a NUL character on line {number}: is it a binary file?")
        offset += len(raw)
        yield number, line


def _jsonl(
    lines: Iterator[tuple[int, str]], *, name: str, field: str
) -> Iterator[tuple[int, str | None]]:
    for number, line in lines:
        if not line.strip():
            yield number, None
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BadFileError(f"{name}: line {number} is not JSON ({exc.msg})") from None
        except RecursionError:
            raise BadFileError(f"{name}: line {number} is JSON nested too deeply") from None
        if not isinstance(obj, dict):
            raise BadFileError(f"{name}: line {number} is not a JSON object")
        if field not in obj:
            keys = ", ".join(sorted(map(str, obj))[:10]) or "none"
            raise BadFileError(f"{name}: line {number} has no field {field!r} (its fields: {keys})")
        if not isinstance(obj[field], str):
            raise BadFileError(f"{name}: field {field!r} on line {number} is not a string")
        yield number, obj[field]


def _csv(lines: Iterator[tuple[int, str]], *, name: str, column: str) -> Iterator[tuple[int, str]]:
    reader = csv.reader(line for _, line in lines)
    try:
        header = next(reader)
    except StopIteration:
        raise BadFileError(f"{name} is empty") from None
    except csv.Error as exc:
        raise BadFileError(f"{name}: not CSV ({exc})") from None
    if column not in header:
        raise BadFileError(
            f"{name} has no column {column!r} (its columns: {', '.join(header[:20]) or 'none'})"
        )
    at = header.index(column)
    try:
        for record in reader:
            number = reader.line_num
            if not record or (len(record) == 1 and not record[0].strip()):
                yield number, ""
                continue
            if len(record) <= at:
                raise BadFileError(f"{name}: line {number} has no value in column {column!r}")
            yield number, record[at]
    except csv.Error as exc:
        raise BadFileError(f"{name}: bad CSV near line {reader.line_num} ({exc})") from None


# ---------------------------------------------------------------------------------- Arrow tables


def _text_column(schema: Any, *, name: str, field: str) -> int:
    """The index of string column ``field`` in an Arrow schema; a missing or non-text one named."""
    import pyarrow as pa

    if field not in schema.names:
        raise BadFileError(
            f"{name} has no column {field!r} (its columns: {', '.join(schema.names[:20]) or 'none'})"
        )
    typ = schema.field(field).type
    is_text = (
        pa.types.is_string(typ)
        or pa.types.is_large_string(typ)
        or getattr(pa.types, "is_string_view", lambda _: False)(typ)
    )
    if not is_text:
        raise BadFileError(
            f"{name}: column {field!r} holds {typ}, not text; choose a text column with field"
        )
    return schema.get_field_index(field)


def _batch_rows(
    batches: Iterator[Any], *, at: int, first: int, name: str, field: str
) -> Iterator[tuple[int, str]]:
    number = first
    for batch in batches:
        for text in batch.column(at).to_pylist():
            if text is None:
                raise BadFileError(f"{name}: row {number} has no value (null) in column {field!r}")
            yield number, text
            number += 1


def parquet_rows(path: Path, *, name: str, field: str) -> Iterator[tuple[int, str]]:
    """Column ``field`` of a Parquet file, ``ARROW_BATCH`` rows decoded at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
        _text_column(pf.schema_arrow, name=name, field=field)
        batches = pf.iter_batches(batch_size=ARROW_BATCH, columns=[field])
        yield from _batch_rows(
            batches, at=0, first=0, name=name, field=field
        )  # the one column read
    except (pa.ArrowException, OSError) as exc:
        raise BadFileError(f"{name} is not a readable Parquet file ({_first_line(exc)})") from None


def dataset_rows(root: Path, *, name: str, field: str) -> Iterator[tuple[int, str]]:
    """Column ``field`` of a ``save_to_disk`` directory: its Arrow files in ``state.json``'s order."""
    import pyarrow as pa

    directory = dataset_dir(root, name=name)
    number = 0
    for path in data_files(directory, name=name):
        try:
            with pa.memory_map(str(path)) as source:
                reader = _open_arrow(source)
                at = _text_column(reader.schema, name=name, field=field)
                for n, text in _batch_rows(
                    iter(reader), at=at, first=number, name=name, field=field
                ):
                    number = n + 1
                    yield n, text
        except (pa.ArrowException, OSError) as exc:
            raise BadFileError(
                f"{name}: {path.name} is not a readable Arrow file ({_first_line(exc)})"
            ) from None


def _open_arrow(source: Any) -> Any:
    """A record-batch reader of an Arrow stream (what ``datasets`` writes) or, failing that, file."""
    import pyarrow as pa

    try:
        return pa.ipc.open_stream(source)
    except pa.ArrowInvalid:
        source.seek(0)
        file = pa.ipc.open_file(source)
        return _FileBatches(file)


class _FileBatches:
    def __init__(self, file: Any):
        self.file, self.schema = file, file.schema

    def __iter__(self) -> Iterator[Any]:
        return (self.file.get_batch(i) for i in range(self.file.num_record_batches))


def dataset_dir(root: Path, *, name: str) -> Path:
    """The dataset directory at ``root``: itself (``state.json``), or the one split of a
    ``DatasetDict`` (``dataset_dict.json``); more splits are refused, naming them."""
    if (root / "state.json").is_file():
        return root
    dict_file = root / "dataset_dict.json"
    if dict_file.is_file():
        splits = _json(dict_file, name=name).get("splits")
        if (
            not isinstance(splits, list)
            or not splits
            or not all(isinstance(s, str) and re.fullmatch(r"[\w-][\w.-]*", s) for s in splits)
        ):
            raise BadFileError(f"{name}: dataset_dict.json has no valid list of splits")
        if len(splits) != 1:
            raise BadFileError(
                f"{name} holds the splits {', '.join(splits)}; give one split's directory "
                f"(for example {splits[0]}/)"
            )
        split = root / splits[0]
        if not (split / "state.json").is_file():
            raise BadFileError(f"{name}: its split {splits[0]} has no state.json")
        return split
    raise BadFileError(
        f"{name} is not a dataset saved with save_to_disk (no state.json or dataset_dict.json)"
    )


def data_files(directory: Path, *, name: str) -> list[Path]:
    """The Arrow files ``state.json`` lists, in order: plain names inside ``directory`` only."""
    state = _json(directory / "state.json", name=name)
    listed = state.get("_data_files")
    if not isinstance(listed, list) or not listed:
        raise BadFileError(f"{name}: state.json lists no data files")
    out = []
    for entry in listed:
        fname = entry.get("filename") if isinstance(entry, dict) else None
        if not isinstance(fname, str) or not DATA_FILE.fullmatch(fname):
            raise BadFileError(
                f"{name}: state.json lists a data file {fname!r} that is not a plain .arrow name"
            )
        path = directory / fname
        if not path.is_file() or path.is_symlink():
            raise BadFileError(f"{name}: the data file {fname} that state.json lists is missing")
        out.append(path)
    return out


def _json(path: Path, *, name: str) -> dict[str, Any]:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadFileError(f"{name}: {path.name} is not readable JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise BadFileError(f"{name}: {path.name} is not a JSON object")
    return obj


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else type(exc).__name__
