"""Durable storage under ``HEADSCOPE_DATA_DIR``: finished results, share links, checkpoints.

Redis holds jobs, progress and fresh results; this directory holds what must outlive a restart of
every process (Redis included). Every file is written to a temporary name and renamed, so a crash
never leaves half a file. Layout::

    results/{id}.result.json   the result, exactly as the API returns it
    results/{id}.meta.json     {"id", "kind", "request", "finished_at"} (written last: the commit)
    shares/{share id}.json     {"id", "kind", "target", "view", "created_at"}
    checkpoints/{ck-id}/blob.EXT and meta.json   uploaded checkpoints (content-addressed)
    tmp/                       uploads in flight

Results no share references are deleted ``result_ttl_s`` after they were written (``sweep``).
Opening a share reads two files; nothing is recomputed.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from backend.config import Settings
from workers.protocol import CHECKPOINT_ID, JOB_ID, dumps

logger = logging.getLogger(__name__)

SHARE_ID = re.compile(r"[A-Za-z0-9_-]{22,64}")


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and a rename (never half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class Store:
    """Results, shares and checkpoints on disk."""

    def __init__(self, settings: Settings):
        self.settings = settings
        for d in (settings.results_dir, settings.shares_dir, settings.checkpoints_dir, settings.tmp_dir):
            d.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------------------ results

    def _result_paths(self, job_id: str) -> tuple[Path, Path]:
        if not JOB_ID.fullmatch(job_id):
            raise ValueError(f"malformed result id {job_id!r}")
        base = self.settings.results_dir
        return base / f"{job_id}.meta.json", base / f"{job_id}.result.json"

    def has_result(self, job_id: str) -> bool:
        return self._result_paths(job_id)[0].exists()

    def read_result(self, job_id: str) -> tuple[dict[str, Any], str] | None:
        """(meta, the result's raw JSON) or None."""
        meta_path, result_path = self._result_paths(job_id)
        try:
            meta = json.loads(meta_path.read_text())
            return meta, result_path.read_text()
        except FileNotFoundError:
            return None

    def write_result(self, job_id: str, *, kind: str, request: dict[str, Any], result_raw: str) -> None:
        meta_path, result_path = self._result_paths(job_id)
        atomic_write(result_path, result_raw)
        meta = {"id": job_id, "kind": kind, "request": request, "finished_at": time.time()}
        atomic_write(meta_path, dumps(meta))

    def touch_result(self, job_id: str) -> None:
        """Restart a result's expiry clock (a share now references it)."""
        os.utime(self._result_paths(job_id)[0])

    # ------------------------------------------------------------------------------- shares

    def create_share(self, *, kind: str, target: str, view: dict[str, Any]) -> dict[str, Any]:
        """A new share of a stored result; the id carries 192 random bits."""
        share = {
            "id": secrets.token_urlsafe(24),
            "kind": kind,
            "target": target,
            "view": view,
            "created_at": time.time(),
        }
        atomic_write(self.settings.shares_dir / f"{share['id']}.json", dumps(share))
        return share

    def read_share(self, share_id: str) -> dict[str, Any] | None:
        if not SHARE_ID.fullmatch(share_id):
            return None
        try:
            return json.loads((self.settings.shares_dir / f"{share_id}.json").read_text())
        except FileNotFoundError:
            return None

    def shared_targets(self) -> set[str]:
        targets = set()
        for path in self.settings.shares_dir.glob("*.json"):
            try:
                targets.add(json.loads(path.read_text())["target"])
            except (OSError, ValueError, KeyError):
                logger.warning("unreadable share file %s", path)
        return targets

    def sweep(self, *, now: float | None = None) -> list[str]:
        """Delete results older than ``result_ttl_s`` that no share references; stale temp files."""
        now = time.time() if now is None else now
        keep = self.shared_targets()
        removed = []
        for meta_path in self.settings.results_dir.glob("*.meta.json"):
            job_id = meta_path.name.split(".", 1)[0]
            try:
                age = now - meta_path.stat().st_mtime
            except FileNotFoundError:
                continue
            if job_id in keep or age < self.settings.result_ttl_s:
                continue
            meta_path.unlink(missing_ok=True)
            (self.settings.results_dir / f"{job_id}.result.json").unlink(missing_ok=True)
            removed.append(job_id)
        for tmp in self.settings.tmp_dir.iterdir():
            try:
                if now - tmp.stat().st_mtime > 3600:
                    if tmp.is_dir():  # an upload in flight is a directory (backend/api/checkpoints.py)
                        shutil.rmtree(tmp, ignore_errors=True)
                    else:
                        tmp.unlink(missing_ok=True)
            except FileNotFoundError:
                pass
        if removed:
            logger.info("expired %d unshared results", len(removed))
        return removed

    # -------------------------------------------------------------------------- checkpoints

    def new_upload_path(self) -> Path:
        return self.settings.tmp_dir / f"upload-{secrets.token_hex(8)}"

    def _checkpoint_dir(self, checkpoint_id: str) -> Path:
        if not CHECKPOINT_ID.fullmatch(checkpoint_id):
            raise ValueError(f"malformed checkpoint id {checkpoint_id!r}")
        return self.settings.checkpoints_dir / checkpoint_id

    def checkpoint(self, checkpoint_id: str) -> dict[str, Any] | None:
        if not CHECKPOINT_ID.fullmatch(checkpoint_id):
            return None
        try:
            return json.loads((self._checkpoint_dir(checkpoint_id) / "meta.json").read_text())
        except FileNotFoundError:
            return None

    def checkpoint_blob(self, checkpoint_id: str) -> Path | None:
        d = self._checkpoint_dir(checkpoint_id)
        return next(iter(sorted(d.glob("blob.*"))), None) if d.is_dir() else None

    def stage_checkpoint(self, checkpoint_id: str, upload: Path, *, ext: str) -> Path:
        """Move an upload into place (no meta yet: not listed until ``commit_checkpoint``)."""
        d = self._checkpoint_dir(checkpoint_id)
        d.mkdir(parents=True, exist_ok=True)
        blob = d / f"blob{ext}"
        os.replace(upload, blob)
        return blob

    def commit_checkpoint(self, checkpoint_id: str, meta: dict[str, Any]) -> None:
        atomic_write(self._checkpoint_dir(checkpoint_id) / "meta.json", dumps(meta))

    def discard_checkpoint(self, checkpoint_id: str) -> None:
        """Remove a rejected upload completely (only if it was never committed)."""
        d = self._checkpoint_dir(checkpoint_id)
        if not (d / "meta.json").exists():
            shutil.rmtree(d, ignore_errors=True)

    def list_checkpoints(self) -> list[dict[str, Any]]:
        out = []
        for meta in sorted(self.settings.checkpoints_dir.glob("ck-*/meta.json")):
            try:
                out.append(json.loads(meta.read_text()))
            except (OSError, ValueError):
                logger.warning("unreadable checkpoint meta %s", meta)
        return sorted(out, key=lambda m: m.get("uploaded_at", 0.0))

    # ------------------------------------------------- fair-use bookkeeping (backend/quota.py)
    # Small on purpose: backend/quota.py holds the policy and calls only these.

    def add_checkpoint_owner(self, checkpoint_id: str, owner: str) -> dict[str, Any] | None:
        """Record ``owner`` among the clients that uploaded a committed checkpoint (refreshes its
        last-use time); return the updated meta, or None if there is no such checkpoint."""
        meta = self.checkpoint(checkpoint_id)
        if meta is None:
            return None
        owners = list(meta.get("owners", []))
        if owner not in owners:
            owners.append(owner)
        meta = {**meta, "owners": owners}
        self.commit_checkpoint(checkpoint_id, meta)
        return meta

    def touch_checkpoint(self, checkpoint_id: str) -> None:
        """Restart a committed checkpoint's expiry clock (it was used)."""
        meta = self._checkpoint_dir(checkpoint_id) / "meta.json"
        if meta.exists():
            os.utime(meta)

    def result_request(self, job_id: str) -> dict[str, Any] | None:
        """The stored request of a persisted result (its meta only), or None."""
        try:
            return json.loads(self._result_paths(job_id)[0].read_text()).get("request")
        except (FileNotFoundError, ValueError):
            return None

    def stored_items(self) -> list[dict[str, Any]]:
        """Every stored result and checkpoint: ``{"kind": "result"|"checkpoint", "id", "bytes",
        "used_at"}`` (``used_at``: last write or touch, epoch seconds), plus ``owners`` for
        checkpoints."""
        items: list[dict[str, Any]] = []
        for meta_path in self.settings.results_dir.glob("*.meta.json"):
            job_id = meta_path.name.split(".", 1)[0]
            try:
                size = meta_path.stat().st_size
                used = meta_path.stat().st_mtime
                size += (self.settings.results_dir / f"{job_id}.result.json").stat().st_size
            except FileNotFoundError:
                continue
            items.append({"kind": "result", "id": job_id, "bytes": size, "used_at": used})
        for meta_path in self.settings.checkpoints_dir.glob("ck-*/meta.json"):
            try:
                meta = json.loads(meta_path.read_text())
                size = sum(p.stat().st_size for p in meta_path.parent.iterdir())
                used = meta_path.stat().st_mtime
            except (OSError, ValueError):
                continue
            items.append({"kind": "checkpoint", "id": meta_path.parent.name, "bytes": size, "used_at": used,
                          "owners": list(meta.get("owners", []))})
        return items

    def delete_result(self, job_id: str) -> None:
        """Remove a persisted result (meta first: a half-deleted result reads as absent)."""
        meta_path, result_path = self._result_paths(job_id)
        meta_path.unlink(missing_ok=True)
        result_path.unlink(missing_ok=True)

    def delete_checkpoint(self, checkpoint_id: str) -> None:
        """Remove a checkpoint, committed or not."""
        shutil.rmtree(self._checkpoint_dir(checkpoint_id), ignore_errors=True)
