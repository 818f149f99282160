"""Task sets stored as corpora are (docs/circuits.md, "Circuits on a task data set"; docs/corpus.md).

A task set is JSON Lines, one example a line: a clean and a corrupted text and two answer tokens, under
settable field names (``clean``, ``corrupted``, ``answer``, ``wrong`` by default; MIB's files name
theirs). ``read_rows`` checks a file's structure as it reads (JSON, an object, the four fields
non-empty strings, the limits): the first bad line refuses the whole file, named. The model's checks
(equal token lengths, single-token answers) come with the job, which knows the model
(``workers.analyses.circuits.tasks``).

Stored in the corpus tables, one stored text per example (its canonical JSON: the four fields under
their own names and the upload's line), content-addressed: ``cp-`` + SHA-256 of the examples (a
domain of their own, so a set and a plain corpus never share an id), ``meta["kind"] == "task-set"``.
A ``circuits-set`` job names the stored set by its id in the request's text::

    rows = read_rows(data, fields={"clean": "prompt"}, name="mib.jsonl")
    set_id = task_set_id(rows)         # cp-...
    texts = stored_texts(rows)         # what the store keeps
    rows == rows_of(texts)
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from typing import Any

from workers.core.errors import BadFileError, HeadscopeError, NotFoundError

FIELDS = ("clean", "corrupted", "answer", "wrong")
MAX_EXAMPLES = 2000  # examples one set may hold (the job's limit)
KIND = "task-set"  # meta["kind"] of a stored task set
_DOMAIN = b"headscope task set\n"


def field_names(fields: dict[str, str] | None) -> dict[str, str]:
    """Our field -> the file's field (each ours at most once; unknown names refused)."""
    names = {f: f for f in FIELDS} | {k: v for k, v in (fields or {}).items() if v}
    if set(names) != set(FIELDS):
        raise HeadscopeError(
            f"fields are {', '.join(FIELDS)}; unknown: {', '.join(sorted(set(names) - set(FIELDS)))}"
        )
    return names


def read_rows(
    data: str | bytes,
    *,
    fields: dict[str, str] | None = None,
    name: str = "the data set",
    max_examples: int = MAX_EXAMPLES,
    max_text_chars: int | None = None,
    min_examples: int = 1,
) -> list[dict[str, Any]]:
    """The examples of a JSON Lines set as ``{"clean", "corrupted", "answer", "wrong", "line"}`` (our
    names; ``line`` the file's, from 1). Blank lines are skipped; the first bad line raises
    ``BadFileError`` naming it."""
    names = field_names(fields)
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise BadFileError(
                f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start})"
            ) from None
    out: list[dict[str, Any]] = []
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # too deep, or an integer of too many digits
            why = (
                exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deep or too long"
            )
            raise BadFileError(f"{name}, line {number}: not JSON ({why})") from None
        if not isinstance(obj, dict):
            raise BadFileError(f"{name}, line {number}: a JSON object is expected")
        missing = [names[f] for f in FIELDS if names[f] not in obj]
        if missing:
            raise BadFileError(f"{name}, line {number}: no field {', '.join(map(repr, missing))}")
        row = {f: obj[names[f]] for f in FIELDS}
        bad = [names[f] for f, v in row.items() if not isinstance(v, str) or not v]
        if bad:
            raise BadFileError(f"{name}, line {number}: {bad[0]!r} must be a non-empty string")
        if max_text_chars is not None:
            long = [names[f] for f, v in row.items() if len(v) > max_text_chars]
            if long:
                raise BadFileError(
                    f"{name}, line {number}: {long[0]!r} is longer than {max_text_chars:,} characters"
                )
        out.append({**row, "line": number})
        if len(out) > max_examples:
            raise BadFileError(f"{name}: more than {max_examples:,} examples (line {number})")
    if len(out) < min_examples:
        raise BadFileError(
            f"{name}: no examples"
            if not out
            else f"{name}: {len(out)} example(s); at least "
            f"{min_examples} are needed (one to find the circuit, one to test it)"
        )
    return out


def stored_texts(rows: list[dict[str, Any]]) -> list[str]:
    """One stored text per example: its canonical compact JSON (our field names, then ``line``)."""
    return [
        json.dumps(
            {k: r[k] for k in (*FIELDS, "line") if k in r},
            ensure_ascii=False,
            separators=(",", ":"),
        )
        for r in rows
    ]


def rows_of(texts: list[str]) -> list[dict[str, Any]]:
    """The examples back from their stored texts."""
    return [json.loads(t) for t in texts]


def task_set_id(rows: list[dict[str, Any]]) -> str:
    """``cp-`` + the first 32 hex digits of the SHA-256 of the stored texts (as one compact JSON list,
    after a domain of their own): the same examples, the same id."""
    body = json.dumps(stored_texts(rows), ensure_ascii=False, separators=(",", ":")).encode()
    return "cp-" + hashlib.sha256(_DOMAIN + body).hexdigest()[:32]


def is_set_id(text: str) -> bool:
    """Whether a request's text names a stored set (``cp-`` and 32 hex digits)."""
    from workers.store.corpora import CORPUS_ID

    return CORPUS_ID.fullmatch(text.strip()) is not None


@lru_cache(maxsize=1)
def default_store() -> Any:
    """This process' store (``Store(get_settings())``): what a worker reads a stored set from."""
    from workers.core.settings import get_settings
    from workers.store import Store

    return Store(get_settings())


def load_rows(set_id: str, *, store: Any = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(meta, examples) of a stored task set; its expiry clock restarts. ``NotFoundError`` when it is
    not (or no longer) stored, or the id is a plain corpus'."""
    store = store if store is not None else default_store()
    set_id = set_id.strip()
    meta = store.corpus(set_id)
    if meta is None or meta.get("kind") != KIND:
        raise NotFoundError(f"no task set with id {set_id!r} is stored; upload it again")
    texts = store.corpus_texts(set_id)
    if texts is None:
        raise NotFoundError(f"task set {set_id} was deleted while it was read; upload it again")
    store.touch_corpus(set_id)
    return meta, rows_of(texts)
