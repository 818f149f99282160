"""``POST /api/checkpoints`` (multipart upload), ``GET /api/checkpoints[/{id}]``.

The API reads an upload itself, without torch (``workers.models.checkpoints`` parses safetensors,
NumPy and PyTorch zip files with a restricted unpickler; nothing in a file runs), checks it
completely before it is stored, and keeps it content-addressed (``ck-`` + SHA-256). A file it
refuses (corrupt, lying about its sizes, a pickle that would run code, NaN values, no 2-D tensor)
gets a 422 naming the problem, and nothing of it is kept: no row in the store, no file.
A LasF checkpoint (docs/lasf.md) is recognised by its metadata and validated in full the same way.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import time
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, UploadFile
from redis import Redis

from backend import quota
from backend.api.common import not_found
from backend.clients import ClientDep
from backend.deps import QueueDep, SettingsDep, StoreDep, WriteAccess
from backend.errors import error_responses
from backend.store import Store
from workers.core.errors import BadFileError, HeadscopeError, TooLargeError, UnsupportedFileError
from workers.core.ids import CHECKPOINT_EXTS
from workers.core.jsonable import jsonable
from workers.models.checkpoints import inspect_file
from workers.queue import keys as protocol

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
    return next((ext for ext in CHECKPOINT_EXTS if lower.endswith(ext)), None)


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


@router.post(
    "/api/checkpoints",
    status_code=201,
    dependencies=[WriteAccess],
    responses=error_responses(413, 415),
)
def upload_checkpoint(
    file: UploadFile, store: StoreDep, settings: SettingsDep, client: ClientDep,
    kind: Literal["any", "lasf"] = "any",
) -> dict:  # fmt: skip
    """Check an uploaded checkpoint completely, then store it and list its candidate PE tensors.

    Nothing of a refused upload is kept: it is read from a temporary directory and checked
    (``workers.models.checkpoint_checks.inspect_file``: structure, sizes, offsets, values) before
    it is stored. A LasF checkpoint (docs/lasf.md) is recognised by its metadata and validated in
    full; its reply carries ``lasf`` (base model, sizes, mode) instead of candidates. ``kind=lasf``
    accepts only LasF checkpoints (422 otherwise).
    """
    filename = safe_filename(file.filename)
    ext = extension(filename)
    if ext is None:
        raise UnsupportedFileError(
            f"{filename}: unsupported file type; upload {', '.join(CHECKPOINT_EXTS)}"
        )
    work = store.new_upload_path()
    work.mkdir(parents=True)
    tmp = work / filename
    digest, size = hashlib.sha256(), 0
    try:
        with open(tmp, "wb") as out:
            while chunk := file.file.read(CHUNK):
                size += len(chunk)
                if size > settings.max_upload_bytes:
                    raise TooLargeError(
                        f"{filename} is larger than the {settings.max_upload_bytes:,}-byte limit"
                    )
                digest.update(chunk)
                out.write(chunk)
        if size == 0:
            raise BadFileError(f"{filename} is empty")
        ck_id = f"ck-{digest.hexdigest()[:32]}"
        existing = store.add_checkpoint_owner(ck_id, client.owner)
        if existing is not None:
            if kind == "lasf" and not existing.get("lasf"):
                raise BadFileError(_not_lasf(filename))
            return _public(existing)
        quota.check_upload(store, settings, owner=client.owner, size=size, filename=filename)
        candidates, lasf = _inspect(
            tmp, filename=filename, kind=kind, max_bytes=settings.max_upload_bytes
        )
        store.stage_checkpoint(ck_id, tmp, ext=ext, filename=filename, owner=client.owner)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    candidates = sorted(candidates, key=lambda c: -float(c.get("score") or 0.0))
    meta = {
        "id": ck_id,
        "filename": filename,
        "size": size,
        "candidates": candidates,
        "default": candidates[0]["name"] if candidates else None,
        "uploaded_at": time.time(),
        "owners": [client.owner],
    }
    if lasf:
        meta["lasf"] = lasf
    try:
        store.commit_checkpoint(ck_id, meta)
    except BaseException:
        store.delete_checkpoint(ck_id)
        raise
    return _public(meta)


def _not_lasf(filename: str) -> str:
    return f"{filename} is not a LasF checkpoint (a safetensors file with a lasf-ckpt-v1 config in its metadata)"


def _inspect(
    path: Path, *, filename: str, kind: str, max_bytes: int
) -> tuple[list[dict[str, Any]], Any]:
    """(PE candidates, LasF description or None) of an upload; 422 naming the problem."""
    from workers.analyses.lasf.checkpoint import describe, is_lasf_file, read_checkpoint

    try:
        if is_lasf_file(path):
            return [], jsonable(describe(read_checkpoint(path)))
        if kind == "lasf":
            raise BadFileError(_not_lasf(filename))
        candidates = jsonable(inspect_file(path, max_bytes=max_bytes))
    except HeadscopeError as exc:  # the file's name in front of the checker's reason
        if not str(exc).startswith(filename):
            exc.args = (f"{filename}: {exc}",)
        raise
    if not candidates:
        raise BadFileError(f"{filename} holds no 2-D tensor that could be a positional encoding")
    return candidates, None


@router.get("/api/checkpoints")
def list_checkpoints(queue: QueueDep, store: StoreDep, client: ClientDep) -> dict:
    """This client's uploads (no one else's) and the shipped demos (ids ``demo-...``).

    An upload's id still opens it for anyone who has it (a share, a link): ids are content hashes.
    """
    mine = [_public(m) for m in store.list_checkpoints() if client.owner in m.get("owners", [])]
    return {"checkpoints": mine, "demos": demos(queue.conn)}


@router.get("/api/checkpoints/{checkpoint_id}", responses=error_responses(404))
def get_checkpoint(checkpoint_id: str, queue: QueueDep, store: StoreDep) -> dict:
    ck = known_checkpoint(checkpoint_id, queue.conn, store)
    if ck is None:
        raise not_found("checkpoint", checkpoint_id)
    return ck if checkpoint_id.startswith("demo-") else _public(ck)
