"""Uploaded checkpoints in the store: a row per upload plus its bytes.

The bytes go into the database in 4 MiB chunks (one transaction with the row), or, when
``HEADSCOPE_BLOB_DIR`` names a directory every replica and worker mounts, into a file there
(written under a temporary name and renamed before the row exists). Either way a process that
opens a checkpoint gets a local file: a blob-dir file as it is, database chunks copied once into
``<data dir>/blob-cache`` and checked against the content hash.

A checkpoint is ``staged`` while a worker inspects it (readable by id, not listed) and ``ready``
once committed; a rejected upload is removed completely.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select, update

from workers.core.ids import CHECKPOINT_EXTS, CHECKPOINT_ID
from workers.core.jsonable import dumps
from workers.store.files import temp_beside
from workers.store.schema import checkpoint_chunks, checkpoints

logger = logging.getLogger(__name__)

CHUNK = 4 * 2**20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(2**20):
            digest.update(block)
    return digest.hexdigest()


class CheckpointStore:
    """The checkpoint half of ``Store`` (a mixin: it uses the store's connection helpers)."""

    # provided by Store
    blob_dir: Path | None
    tmp_dir: Path
    cache_dir: Path

    def new_upload_path(self) -> Path:
        """A local temporary file name for an upload in flight."""
        return self.tmp_dir / f"upload-{secrets.token_hex(8)}"

    @staticmethod
    def _check_id(checkpoint_id: str) -> None:
        if not CHECKPOINT_ID.fullmatch(checkpoint_id):
            raise ValueError(f"malformed checkpoint id {checkpoint_id!r}")

    def checkpoint(self, checkpoint_id: str) -> dict[str, Any] | None:
        """The committed checkpoint's meta (as given to ``commit_checkpoint``), or None."""
        if not CHECKPOINT_ID.fullmatch(checkpoint_id):
            return None
        with self._conn() as conn:
            raw = conn.execute(
                select(checkpoints.c.meta).where(
                    (checkpoints.c.id == checkpoint_id) & (checkpoints.c.state == "ready")
                )
            ).scalar()
        return json.loads(raw) if raw else None

    def list_checkpoints(self) -> list[dict[str, Any]]:
        """Every committed checkpoint's meta, oldest first."""
        with self._conn() as conn:
            rows = conn.execute(
                select(checkpoints.c.meta)
                .where(checkpoints.c.state == "ready")
                .order_by(checkpoints.c.created_at, checkpoints.c.id)
            ).scalars()
            return [json.loads(raw) for raw in rows]

    def stage_checkpoint(
        self,
        checkpoint_id: str,
        upload: Path,
        *,
        ext: str,
        filename: str | None = None,
        owner: str | None = None,
    ) -> Path:
        """Store an upload's bytes under its (content) id, not listed until ``commit_checkpoint``.

        The upload file is consumed. Staging an id that exists already keeps the first copy (the
        bytes are the same: the id is their hash). Returns a local file with the bytes.
        """
        self._check_id(checkpoint_id)
        if ext not in CHECKPOINT_EXTS:
            raise ValueError(f"unsupported checkpoint type {ext!r}")
        size, digest = upload.stat().st_size, sha256_file(upload)
        row = {
            "id": checkpoint_id,
            "filename": filename or checkpoint_id,
            "ext": ext,
            "size": size,
            "sha256": digest,
            "state": "staged",
            "owner": owner,
            "created_at": time.time(),
        }
        if self.blob_dir is not None:
            name = f"{checkpoint_id}{ext}"
            target = self.blob_dir / name
            tmp = temp_beside(target)
            shutil.copyfile(upload, tmp)
            os.replace(tmp, target)  # the bytes are in place before the row exists
            with self._conn(write=True) as conn:
                self._insert_ignore(conn, checkpoints, {**row, "blob_path": name})
            upload.unlink(missing_ok=True)
            return target
        with self._conn(write=True) as conn:
            if self._insert_ignore(conn, checkpoints, row):
                with open(upload, "rb") as fh:
                    seq = 0
                    while block := fh.read(CHUNK):
                        conn.execute(
                            checkpoint_chunks.insert().values(
                                checkpoint_id=checkpoint_id, seq=seq, data=block
                            )
                        )
                        seq += 1
        local = self.cache_dir / f"{checkpoint_id}{ext}"
        if local.exists():
            upload.unlink(missing_ok=True)
        else:
            local.parent.mkdir(parents=True, exist_ok=True)
            os.replace(upload, local)
        return local

    def commit_checkpoint(self, checkpoint_id: str, meta: dict[str, Any]) -> None:
        """List a staged checkpoint, with ``meta`` (what ``checkpoint`` returns)."""
        self._check_id(checkpoint_id)
        values: dict[str, Any] = {"state": "ready", "meta": dumps(meta)}
        if meta.get("filename"):
            values["filename"] = str(meta["filename"])[:255]
        with self._conn(write=True) as conn:
            done = conn.execute(
                update(checkpoints).where(checkpoints.c.id == checkpoint_id).values(**values)
            )
        if done.rowcount != 1:
            raise KeyError(f"checkpoint {checkpoint_id} was not staged")

    def discard_checkpoint(self, checkpoint_id: str) -> None:
        """Remove a rejected upload completely (only if it was never committed)."""
        self._check_id(checkpoint_id)
        staged = (checkpoints.c.id == checkpoint_id) & (checkpoints.c.state == "staged")
        with self._conn(write=True) as conn:
            row = conn.execute(select(checkpoints.c.blob_path).where(staged)).first()
            if row is None:
                return
            conn.execute(
                delete(checkpoint_chunks).where(checkpoint_chunks.c.checkpoint_id == checkpoint_id)
            )
            conn.execute(delete(checkpoints).where(staged))
        self._forget_files(checkpoint_id, row.blob_path)

    # ------------------------------------------------- fair-use bookkeeping (backend/quota.py)

    def add_checkpoint_owner(self, checkpoint_id: str, owner: str) -> dict[str, Any] | None:
        """Record ``owner`` among the clients that uploaded a committed checkpoint (``meta["owners"]``)
        and mark it used; return the updated meta, or None if there is no such checkpoint."""
        meta = self.checkpoint(checkpoint_id)
        if meta is None:
            return None
        owners = list(meta.get("owners", []))
        if owner not in owners:
            owners.append(owner)
        meta = {**meta, "owners": owners}
        with self._conn(write=True) as conn:
            conn.execute(
                update(checkpoints)
                .where(checkpoints.c.id == checkpoint_id)
                .values(meta=dumps(meta), used_at=time.time())
            )
        return meta

    def touch_checkpoint(self, checkpoint_id: str) -> None:
        """Restart a checkpoint's expiry clock (it was used)."""
        if not CHECKPOINT_ID.fullmatch(checkpoint_id):
            return
        with self._conn(write=True) as conn:
            conn.execute(
                update(checkpoints)
                .where(checkpoints.c.id == checkpoint_id)
                .values(used_at=time.time())
            )

    def delete_checkpoint(self, checkpoint_id: str) -> None:
        """Remove a checkpoint, committed or not, with its bytes."""
        self._check_id(checkpoint_id)
        with self._conn(write=True) as conn:
            row = conn.execute(
                select(checkpoints.c.blob_path).where(checkpoints.c.id == checkpoint_id)
            ).first()
            if row is None:
                return
            conn.execute(
                delete(checkpoint_chunks).where(checkpoint_chunks.c.checkpoint_id == checkpoint_id)
            )
            conn.execute(delete(checkpoints).where(checkpoints.c.id == checkpoint_id))
        self._forget_files(checkpoint_id, row.blob_path)

    def _forget_files(self, checkpoint_id: str, blob_path: str | None) -> None:
        if blob_path and self.blob_dir is not None:
            (self.blob_dir / blob_path).unlink(missing_ok=True)
        for cached in self.cache_dir.glob(f"{checkpoint_id}.*") if self.cache_dir.is_dir() else []:
            cached.unlink(missing_ok=True)

    def checkpoint_file(self, checkpoint_id: str) -> tuple[Path, str] | None:
        """(a local file with the bytes, the display name) of a staged or committed checkpoint."""
        if not CHECKPOINT_ID.fullmatch(checkpoint_id):
            return None
        cols = (
            checkpoints.c.filename,
            checkpoints.c.ext,
            checkpoints.c.sha256,
            checkpoints.c.blob_path,
        )
        with self._conn() as conn:
            row = conn.execute(select(*cols).where(checkpoints.c.id == checkpoint_id)).first()
        if row is None:
            return None
        if row.blob_path:
            if self.blob_dir is None:
                raise FileNotFoundError(
                    f"checkpoint {checkpoint_id} is in HEADSCOPE_BLOB_DIR, which is not set in this process"
                )
            return self.blob_dir / row.blob_path, row.filename
        local = self.cache_dir / f"{checkpoint_id}{row.ext}"
        if not local.exists():
            self._materialise(checkpoint_id, local, sha256=row.sha256)
        return local, row.filename

    def checkpoint_blob(self, checkpoint_id: str) -> Path | None:
        """A local file with the checkpoint's bytes, or None."""
        found = self.checkpoint_file(checkpoint_id)
        return found[0] if found else None

    def _materialise(self, checkpoint_id: str, local: Path, *, sha256: str) -> None:
        """Copy the chunks into ``local`` (one chunk in memory at a time), checking the hash."""
        tmp = temp_beside(local)
        digest = hashlib.sha256()
        query = (
            select(checkpoint_chunks.c.data)
            .where(checkpoint_chunks.c.checkpoint_id == checkpoint_id)
            .order_by(checkpoint_chunks.c.seq)
        )
        try:
            with self._conn() as conn, open(tmp, "wb") as out:
                for block in (
                    conn.execution_options(stream_results=True, yield_per=1)
                    .execute(query)
                    .scalars()
                ):
                    digest.update(block)
                    out.write(block)
            if digest.hexdigest() != sha256:
                raise OSError(
                    f"checkpoint {checkpoint_id}: the stored bytes do not match their hash"
                )
            os.replace(tmp, local)
        finally:
            tmp.unlink(missing_ok=True)
