"""``POST /api/checkpoints`` (multipart upload), ``GET /api/checkpoints[/{id}]``.

The API never opens a checkpoint (``.pt`` needs torch): it stores the bytes in the store,
content-addressed (``ck-`` + SHA-256), and waits for a worker's inspection job to list the candidate tensors. A file
the worker rejects (corrupt, a pickle that would run code, no 2-D tensor) gets a 400 with the
worker's reason, and nothing of it is kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, HTTPException, UploadFile
from redis import Redis

from backend.api.common import not_found
from backend.deps import QueueDep, SettingsDep, StoreDep, WriteAccess
from backend.store import Store
from workers import protocol

logger = logging.getLogger(__name__)
router = APIRouter(tags=["positional encodings"])

CHUNK = 2**20
PUBLIC = ("id", "filename", "size", "candidates", "default", "uploaded_at", "lasf")


def safe_filename(name: str | None) -> str:
    """The base name only, in a small character set (display only: files are stored by hash)."""
    base = Path((name or "").replace("\\", "/")).name
    base = re.sub(r"[^A-Za-z0-9._ -]+", "_", base).strip(" .")[:200]
    return base or "upload"


def extension(filename: str) -> str | None:
    lower = filename.lower()
    return next((ext for ext in protocol.CHECKPOINT_EXTS if lower.endswith(ext)), None)


def demos(conn: Redis) -> list[dict[str, Any]]:
    """The demo checkpoints a worker published (empty until one has started)."""
    raw = conn.get(protocol.DEMOS_KEY)
    return json.loads(raw) if raw else []


def known_checkpoint(checkpoint_id: str, conn: Redis, store: Store) -> dict[str, Any] | None:
    if checkpoint_id.startswith("demo-"):
        return next((d for d in demos(conn) if d.get("id") == checkpoint_id), None)
    return store.checkpoint(checkpoint_id)


def _public(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: meta[k] for k in PUBLIC if k in meta}


@router.post("/api/checkpoints", status_code=201, dependencies=[WriteAccess])
def upload_checkpoint(
    file: UploadFile, queue: QueueDep, store: StoreDep, settings: SettingsDep, kind: Literal["any", "lasf"] = "any"
) -> dict:
    """Store an uploaded checkpoint and list its candidate PE tensors (best first).

    A LasF checkpoint (docs/lasf.md) is recognised by its metadata and validated in full; its
    reply carries ``lasf`` (base model, sizes, mode) instead of candidates. ``kind=lasf`` accepts
    only LasF checkpoints (422 otherwise).
    """
    filename = safe_filename(file.filename)
    ext = extension(filename)
    if ext is None:
        raise HTTPException(
            415, f"{filename}: unsupported file type; upload {', '.join(protocol.CHECKPOINT_EXTS)}"
        )
    tmp = store.new_upload_path()
    digest, size = hashlib.sha256(), 0
    try:
        with open(tmp, "wb") as out:
            while chunk := file.file.read(CHUNK):
                size += len(chunk)
                if size > settings.max_upload_bytes:
                    raise HTTPException(413, f"{filename} is larger than the {settings.max_upload_bytes:,}-byte limit")
                digest.update(chunk)
                out.write(chunk)
        if size == 0:
            raise HTTPException(400, f"{filename} is empty")
        ck_id = f"ck-{digest.hexdigest()[:32]}"
        existing = store.checkpoint(ck_id)
        if existing is not None:
            if kind == "lasf" and not existing.get("lasf"):
                raise HTTPException(422, _not_lasf(filename))
            return _public(existing)
        store.stage_checkpoint(ck_id, tmp, ext=ext, filename=filename)
    finally:
        tmp.unlink(missing_ok=True)
    conn = queue.conn
    try:  # the worker reads the staged bytes through the store
        queue.submit("inspect", ck_id, {"checkpoint": ck_id, "filename": filename})
        state = queue.wait(ck_id, timeout_s=settings.inspect_timeout_s)
        if state is None or state.status != "finished" or state.result_raw is None:
            raise _rejection(state, filename, ck_id, settings.inspect_timeout_s, conn)
        inspected = json.loads(state.result_raw)
        candidates, lasf = inspected["candidates"], inspected.get("lasf")
        if kind == "lasf" and not lasf:
            raise HTTPException(422, _not_lasf(filename))
        if not candidates and not lasf:
            raise HTTPException(400, f"{filename} holds no 2-D tensor that could be a positional encoding")
    except BaseException:
        store.discard_checkpoint(ck_id)
        raise
    meta = {
        "id": ck_id,
        "filename": filename,
        "size": size,
        "candidates": candidates,
        "default": candidates[0]["name"] if candidates else None,
        "uploaded_at": time.time(),
    }
    if lasf:
        meta["lasf"] = lasf
    store.commit_checkpoint(ck_id, meta)
    return _public(meta)


def _not_lasf(filename: str) -> str:
    return f"{filename} is not a LasF checkpoint (a safetensors file with a lasf-ckpt-v1 config in its metadata)"


def _rejection(state: Any, filename: str, ck_id: str, timeout_s: float, conn: Redis) -> HTTPException:
    if state is not None and state.status == "failed":
        if state.user_error and state.error_code == "bad_lasf_checkpoint":
            return HTTPException(422, f"{filename}: {state.error}")
        if state.user_error:
            return HTTPException(400, f"{filename}: {state.error}")
        return HTTPException(500, f"{filename} could not be inspected: {state.error}")
    job = protocol.fetch_job(conn, ck_id)
    if job is not None:  # nobody picked it up in time: withdraw it with the upload
        job.delete(remove_from_queue=True)
    return HTTPException(503, f"no worker read {filename} within {timeout_s:g} s; try again later")


@router.get("/api/checkpoints")
def list_checkpoints(queue: QueueDep, store: StoreDep) -> dict:
    """Uploaded checkpoints and the shipped demos (ids ``demo-...``)."""
    return {"checkpoints": [_public(m) for m in store.list_checkpoints()], "demos": demos(queue.conn)}


@router.get("/api/checkpoints/{checkpoint_id}", responses={404: {"description": "unknown id"}})
def get_checkpoint(checkpoint_id: str, queue: QueueDep, store: StoreDep) -> dict:
    ck = known_checkpoint(checkpoint_id, queue.conn, store)
    if ck is None:
        raise not_found("checkpoint", checkpoint_id)
    return ck if checkpoint_id.startswith("demo-") else _public(ck)
