"""Task sets for circuits on a set, stored as corpora are (docs/circuits.md, "Circuits on a task data
set"; docs/api.md).

``POST /api/task-sets`` takes a JSON Lines file (``file``) or pasted JSON Lines (``text``), with the
file's field names for ``clean``, ``corrupted``, ``answer`` and ``wrong`` when they differ; checks it
completely (``workers.inputs.task_sets.read_rows``: the first bad line refuses it, named) under the
limits corpora have (the file at most ``max_upload_bytes`` and ``corpus_max_bytes``, each text at most
``corpus_max_text_chars``, at most 2,000 examples), then stores it content-addressed (``cp-`` +
SHA-256) with its owners, counted in the upload and storage quotas and expired like a corpus. A
refused set gets a 4xx naming the problem and nothing of it is kept. A ``circuits-set`` job names it
by its id in the request's text.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, File, Form, HTTPException, UploadFile

from backend import quota
from backend.api.checkpoints import safe_filename
from backend.clients import ClientDep
from backend.deps import SettingsDep, StoreDep, WriteAccess
from backend.errors import error_responses
from backend.store import Store
from workers.core.errors import HeadscopeError, NotFoundError
from workers.inputs.corpora import Limits
from workers.inputs.task_sets import (
    FIELDS,
    KIND,
    MAX_EXAMPLES,
    read_rows,
    stored_texts,
    task_set_id,
)

router = APIRouter(tags=["circuits"])
PUBLIC = ("id", "name", "n_examples", "size", "fields", "uploaded_at", "preview")
PREVIEW = 3  # examples shown back


def _public(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: meta[k] for k in PUBLIC if k in meta}


def _read(file: UploadFile, *, filename: str, limit: int) -> bytes:
    """The upload's bytes, a block at a time; 413 past ``limit``."""
    data = bytearray()
    while block := file.file.read(2**20):
        data += block
        if len(data) > limit:
            raise HTTPException(
                413, f"{filename} is larger than the {limit:,}-byte limit for a task set"
            )
    return bytes(data)


@router.post(
    "/api/task-sets", status_code=201, dependencies=[WriteAccess], responses=error_responses(413)
)
def upload_task_set(
    store: StoreDep,
    settings: SettingsDep,
    client: ClientDep,
    file: UploadFile | None = File(None, description="a JSON Lines file, one example a line"),  # noqa: B008
    text: str | None = Form(None, description="pasted JSON Lines, one example a line"),
    clean: str | None = Form(None, max_length=200, description="the field of the clean text"),
    corrupted: str | None = Form(
        None, max_length=200, description="the field of the corrupted text"
    ),
    answer: str | None = Form(None, max_length=200, description="the field of the answer token"),
    wrong: str | None = Form(None, max_length=200, description="the field of the wrong token"),
    name: str | None = Form(None, max_length=200, description="a display name"),
) -> dict[str, Any]:
    """Check a task set completely, then store it; ``{"id", "name", "n_examples", ...}``."""
    if (file is None) == (text is None):
        raise HTTPException(422, "give either a file or pasted JSON Lines")
    limits = Limits.from_settings(settings, max_bytes=settings.max_upload_bytes)
    if file is not None:
        filename = safe_filename(file.filename)
        data: bytes = _read(file, filename=filename, limit=limits.max_bytes)
    else:
        filename, data = "pasted set", (text or "").encode("utf-8", "surrogatepass")
        if len(data) > limits.max_bytes:
            raise HTTPException(
                413, f"the pasted set is larger than the {limits.max_bytes:,}-byte limit"
            )
    given = {"clean": clean, "corrupted": corrupted, "answer": answer, "wrong": wrong}
    fields = {k: v for k, v in given.items() if v}
    try:
        rows = read_rows(
            data,
            fields=fields,
            name=filename,
            max_examples=min(MAX_EXAMPLES, limits.max_texts),
            max_text_chars=limits.max_text_chars,
            min_examples=2,
        )
    except HeadscopeError as exc:
        raise HTTPException(422, str(exc)) from None
    del data
    texts = stored_texts(rows)
    set_id = task_set_id(rows)
    existing = store.add_corpus_owner(set_id, client.owner)
    if existing is not None:
        return _public(existing)
    size = len(("[" + ",".join(texts) + "]").encode())
    quota.check_upload(store, settings, owner=client.owner, size=size, filename=filename)
    meta = {
        "id": set_id,
        "kind": KIND,
        "name": (name or filename)[:200],
        "n_examples": len(rows),
        "n_texts": len(rows),
        "size": size,
        "fields": {f: fields.get(f, f) for f in FIELDS},
        "uploaded_at": time.time(),
        "owners": [client.owner],
        "preview": rows[:PREVIEW],
    }
    if not store.put_corpus(set_id, texts, meta=meta, owner=client.owner):
        meta = store.add_corpus_owner(set_id, client.owner) or meta  # stored just now by another
    return _public(meta)


@router.get("/api/task-sets")
def list_task_sets(store: StoreDep, client: ClientDep) -> dict[str, Any]:
    """This client's task sets (no one else's)."""
    mine = [
        _public(m)
        for m in store.list_corpora()
        if m.get("kind") == KIND and client.owner in m.get("owners", [])
    ]
    return {"task_sets": mine}


@router.get("/api/task-sets/{set_id}", responses=error_responses(404))
def get_task_set(set_id: str, store: StoreDep) -> dict[str, Any]:
    meta = store.corpus(set_id)
    if meta is None or meta.get("kind") != KIND:
        raise NotFoundError.of("task set", set_id, "upload it first")
    return _public(meta)


def check_stored_set(set_id: str, store: Store) -> None:
    """A ``circuits-set`` job's stored set exists (its expiry clock restarts); 404 otherwise."""
    set_id = set_id.strip()
    meta = store.corpus(set_id)
    if meta is None or meta.get("kind") != KIND:
        raise NotFoundError.of("task set", set_id, "upload it first (POST /api/task-sets)")
    store.touch_corpus(set_id)
