"""The store: results (compressed JSON), share links, request fingerprints, checkpoints.

One interface over SQLAlchemy 2, for SQLite (the default, a file under the data dir) and
PostgreSQL (deployments: every API replica and worker uses the same database). Every write is one
transaction, so a process killed mid-write leaves nothing half-written; every "create if absent"
is an INSERT that a unique key decides (``ON CONFLICT DO NOTHING``), never a check then a write.
A database that cannot be reached raises ``StoreUnavailable`` (the API answers 503 with its text).
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, delete, exists, func, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from workers.core.ids import JOB_ID
from workers.core.jsonable import dumps
from workers.store import migrate as migrations
from workers.store.checkpoints import CheckpointStore
from workers.store.corpora import CorpusStore
from workers.store.engine import StoreUnavailable, database_url, describe, make_engine
from workers.store.schema import (
    checkpoints,
    corpora,
    corpus_chunks,
    fingerprints,
    result_parts,
    results,
    shares,
)
from workers.store.sections import COMPRESSION_LEVEL, ResultSections

__all__ = ["COMPRESSION_LEVEL", "SHARE_ID", "Store"]

logger = logging.getLogger(__name__)

SHARE_ID = re.compile(r"[A-Za-z0-9_-]{22,64}")  # at least 128 bits of base64
SHARE_ID_BYTES = 24  # 192 random bits
STALE_UPLOAD_S = 3600  # uploads never committed (their process died) are removed after this


class Store(ResultSections, CheckpointStore, CorpusStore):
    """Results, shares, fingerprints and checkpoints in one database.

    ``settings`` needs ``data_dir`` and ``result_ttl_s``; ``database_url`` (default: SQLite under
    ``data_dir``) and ``blob_dir`` are optional. ``migrate``: apply pending migrations now
    (default: for SQLite only — PostgreSQL is migrated by ``headscope migrate``).
    """

    def __init__(self, settings: Any, *, migrate: bool | None = None):
        self.settings = settings
        self.data_dir = Path(settings.data_dir)
        self.url = database_url(settings)
        self.where = describe(self.url)
        self.engine = make_engine(self.url)
        self._writer = self.engine.execution_options(sqlite_immediate=True)
        self.dialect = self.engine.dialect.name
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        blob_dir = getattr(settings, "blob_dir", None)
        self.blob_dir = Path(blob_dir) if blob_dir else None
        if migrate if migrate is not None else self.dialect == "sqlite":
            self.migrate()

    @property
    def tmp_dir(self) -> Path:
        return self.data_dir / "tmp"

    @property
    def cache_dir(self) -> Path:
        return self.data_dir / "blob-cache"

    # ---------------------------------------------------------------------------- plumbing

    @contextmanager
    def _conn(self, *, write: bool = False) -> Iterator[Connection]:
        """A connection in a transaction (committed on success); unreachable -> StoreUnavailable."""
        try:
            with self._writer.begin() if write else self.engine.connect() as conn:
                yield conn
        except (OperationalError, InterfaceError, PoolTimeout) as exc:
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
            raise StoreUnavailable(
                f"the database ({self.where}) is unavailable: {reason[0] if reason else type(exc).__name__}"
            ) from exc

    def _insert_ignore(self, conn: Connection, table: Any, values: dict[str, Any]) -> bool:
        """INSERT unless the key exists; True if this call inserted the row."""
        insert = postgresql.insert if self.dialect == "postgresql" else sqlite.insert
        stmt = (
            insert(table)
            .values(**values)
            .on_conflict_do_nothing()
            .returning(*table.primary_key.columns)
        )
        return conn.execute(stmt).first() is not None

    def migrate(self) -> tuple[str | None, str]:
        """Apply pending migrations; (revision before, after)."""
        try:
            return migrations.upgrade(self.engine)
        except (OperationalError, InterfaceError) as exc:
            raise StoreUnavailable(
                f"cannot migrate the database ({self.where}): {exc.orig or exc}"
            ) from exc

    def prepare(self) -> None:
        """At service start: SQLite is migrated; PostgreSQL must already be at head."""
        if self.dialect == "sqlite":
            self.migrate()
            return
        try:
            migrations.check(self.engine)
        except (OperationalError, InterfaceError) as exc:
            raise StoreUnavailable(
                f"cannot reach the database ({self.where}): {exc.orig or exc}"
            ) from exc

    def ping(self) -> None:
        """Raise ``StoreUnavailable`` unless the database answers."""
        with self._conn() as conn:
            conn.execute(text("SELECT 1"))

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------------------------ results

    @staticmethod
    def _check_job_id(job_id: str) -> None:
        if not JOB_ID.fullmatch(job_id):
            raise ValueError(f"malformed result id {job_id!r}")

    def has_result(self, job_id: str) -> bool:
        self._check_job_id(job_id)
        with self._conn() as conn:
            return bool(conn.execute(select(exists().where(results.c.id == job_id))).scalar())

    def touch_result(self, job_id: str) -> None:
        """Restart a result's expiry clock (a share now references it)."""
        self._check_job_id(job_id)
        with self._conn(write=True) as conn:
            now = time.time()
            conn.execute(
                update(results)
                .where(results.c.id == job_id)
                .values(expires_at=now + self.settings.result_ttl_s, used_at=now)
            )

    def result_request(self, job_id: str) -> dict[str, Any] | None:
        """The stored request of a persisted result, or None."""
        if not JOB_ID.fullmatch(job_id):
            return None
        with self._conn() as conn:
            raw = conn.execute(select(results.c.request).where(results.c.id == job_id)).scalar()
        return json.loads(raw) if raw else None

    def delete_result(self, job_id: str) -> None:
        """Remove a persisted result."""
        self._check_job_id(job_id)
        with self._conn(write=True) as conn:
            conn.execute(delete(result_parts).where(result_parts.c.result_id == job_id))
            conn.execute(delete(results).where(results.c.id == job_id))

    def stored_items(self) -> list[dict[str, Any]]:
        """Every stored result and committed checkpoint for the storage quota: ``{"kind":
        "result"|"checkpoint"|"corpus", "id", "bytes", "used_at"}``, plus ``owners`` for uploads."""
        res_used = func.coalesce(results.c.used_at, results.c.created_at)
        ck_used = func.coalesce(checkpoints.c.used_at, checkpoints.c.created_at)
        with self._conn() as conn:
            kept = (
                select(
                    result_parts.c.result_id,
                    func.sum(func.length(result_parts.c.data)).label("bytes"),
                )
                .group_by(result_parts.c.result_id)
                .subquery()
            )
            size = func.length(results.c.body) + func.coalesce(kept.c.bytes, 0)
            rows = conn.execute(
                select(results.c.id, size, res_used).outerjoin(
                    kept, kept.c.result_id == results.c.id
                )
            ).all()
            cks = conn.execute(
                select(checkpoints.c.id, checkpoints.c.size, ck_used, checkpoints.c.meta).where(
                    checkpoints.c.state == "ready"
                )
            ).all()
            stored = (
                select(
                    corpus_chunks.c.corpus_id,
                    func.sum(func.length(corpus_chunks.c.data)).label("bytes"),
                )
                .group_by(corpus_chunks.c.corpus_id)
                .subquery()
            )
            cps = conn.execute(
                select(
                    corpora.c.id,
                    stored.c.bytes,
                    func.coalesce(corpora.c.used_at, corpora.c.created_at),
                    corpora.c.meta,
                ).outerjoin(stored, stored.c.corpus_id == corpora.c.id)
            ).all()
        items: list[dict[str, Any]] = [
            {"kind": "result", "id": rid, "bytes": int(size or 0), "used_at": float(used)}
            for rid, size, used in rows
        ]
        for cid, size, used, meta in cks:
            owners = list(json.loads(meta).get("owners", [])) if meta else []
            items.append(
                {
                    "kind": "checkpoint",
                    "id": cid,
                    "bytes": int(size),
                    "used_at": float(used),
                    "owners": owners,
                }
            )
        for cid, size, used, meta in cps:
            items.append(
                {
                    "kind": "corpus",
                    "id": cid,
                    "bytes": int(size or 0),
                    "used_at": float(used),
                    "owners": list(json.loads(meta).get("owners", [])),
                }
            )
        return items

    # ------------------------------------------------------------------------------- shares

    def create_share(
        self,
        *,
        kind: str,
        target: str,
        view: dict[str, Any],
        owner: str | None = None,
        expires_at: float | None = None,
    ) -> dict[str, Any]:
        """A new share of a stored result; the id carries 192 random bits (primary key: unique)."""
        for _ in range(3):
            share = {
                "id": secrets.token_urlsafe(SHARE_ID_BYTES),
                "kind": kind,
                "target": target,
                "view": view,
                "created_at": time.time(),
            }
            row = {**share, "view": dumps(view), "owner": owner, "expires_at": expires_at}
            try:
                with self._conn(write=True) as conn:
                    conn.execute(shares.insert().values(**row))
                return share
            except IntegrityError:  # pragma: no cover - 2^-192
                logger.warning("share id collision; drawing another")
        raise RuntimeError("could not draw a free share id")

    def read_share(self, share_id: str) -> dict[str, Any] | None:
        """The share ``{id, kind, target, view, created_at}``, or None (unknown or expired)."""
        if not SHARE_ID.fullmatch(share_id):
            return None
        cols = (
            shares.c.kind,
            shares.c.target,
            shares.c.view,
            shares.c.created_at,
            shares.c.expires_at,
        )
        with self._conn() as conn:
            row = conn.execute(select(*cols).where(shares.c.id == share_id)).first()
        if row is None or (row.expires_at is not None and row.expires_at < time.time()):
            return None
        return {
            "id": share_id,
            "kind": row.kind,
            "target": row.target,
            "view": json.loads(row.view),
            "created_at": row.created_at,
        }

    def shared_targets(self) -> set[str]:
        with self._conn() as conn:
            return set(conn.execute(select(shares.c.target).distinct()).scalars())

    # ------------------------------------------------------------------------- fingerprints

    def record_request(
        self, job_id: str, *, kind: str, request: dict[str, Any], owner: str | None = None
    ) -> bool:
        """Count one enqueue of request ``job_id``; True if it was never seen before."""
        now = time.time()
        values = {
            "id": job_id,
            "kind": kind,
            "request": dumps(request),
            "owner": owner,
            "created_at": now,
            "submissions": 1,
            "expires_at": now + self.settings.result_ttl_s,
        }
        with self._conn(write=True) as conn:
            if self._insert_ignore(conn, fingerprints, values):
                return True
            conn.execute(
                update(fingerprints)
                .where(fingerprints.c.id == job_id)
                .values(submissions=fingerprints.c.submissions + 1, expires_at=values["expires_at"])
            )
            return False

    def fingerprint(self, job_id: str) -> dict[str, Any] | None:
        """``{id, kind, request, submissions, owner, created_at}`` of a request once enqueued."""
        with self._conn() as conn:
            row = conn.execute(select(fingerprints).where(fingerprints.c.id == job_id)).first()
        if row is None:
            return None
        return {
            "id": row.id,
            "kind": row.kind,
            "request": json.loads(row.request),
            "submissions": row.submissions,
            "owner": row.owner,
            "created_at": row.created_at,
        }

    def usage(self, owner: str) -> dict[str, int]:
        """What ``owner`` holds (for quotas): counts and uncompressed bytes."""
        with self._conn() as conn:
            n_res, res_bytes = conn.execute(
                select(func.count(), func.coalesce(func.sum(results.c.size), 0)).where(
                    results.c.owner == owner
                )
            ).one()
            n_ck, ck_bytes = conn.execute(
                select(func.count(), func.coalesce(func.sum(checkpoints.c.size), 0)).where(
                    checkpoints.c.owner == owner
                )
            ).one()
            n_sh = conn.execute(select(func.count()).where(shares.c.owner == owner)).scalar_one()
        return {
            "results": n_res,
            "result_bytes": int(res_bytes),
            "shares": n_sh,
            "checkpoints": n_ck,
            "checkpoint_bytes": int(ck_bytes),
        }

    # -------------------------------------------------------------------------------- sweep

    def sweep(self, *, now: float | None = None) -> list[str]:
        """Delete expired results no share references, expired shares, fingerprints and
        checkpoints, uploads never committed, stale temporary files; return the result ids."""
        now = time.time() if now is None else now
        shared = select(shares.c.target).where(shares.c.target == results.c.id).exists()
        expired = (results.c.expires_at < now) & ~shared
        with self._conn(write=True) as conn:
            removed = list(conn.execute(select(results.c.id).where(expired)).scalars())
            conn.execute(
                delete(result_parts).where(
                    result_parts.c.result_id.in_(select(results.c.id).where(expired))
                )
            )
            conn.execute(delete(results).where(expired))
            conn.execute(delete(shares).where(shares.c.expires_at < now))
            conn.execute(delete(fingerprints).where(fingerprints.c.expires_at < now))
            gone = (checkpoints.c.expires_at < now) | (
                (checkpoints.c.state == "staged")
                & (checkpoints.c.created_at < now - STALE_UPLOAD_S)
            )
            dropped = list(
                conn.execute(select(checkpoints.c.id, checkpoints.c.blob_path).where(gone))
            )
            conn.execute(delete(checkpoints).where(gone))
            old_corpora = select(corpora.c.id).where(corpora.c.expires_at < now)
            conn.execute(delete(corpus_chunks).where(corpus_chunks.c.corpus_id.in_(old_corpora)))
            conn.execute(delete(corpora).where(corpora.c.expires_at < now))
        for row in dropped:
            self._forget_files(row.id, row.blob_path)
        for tmp in self.tmp_dir.iterdir():
            try:
                if now - tmp.stat().st_mtime > STALE_UPLOAD_S:
                    if (
                        tmp.is_dir()
                    ):  # an upload in flight may be a directory (backend/api/checkpoints.py)
                        shutil.rmtree(tmp, ignore_errors=True)
                    else:
                        tmp.unlink(missing_ok=True)
            except FileNotFoundError:
                pass
        if removed:
            logger.info("expired %d unshared results", len(removed))
        return removed
