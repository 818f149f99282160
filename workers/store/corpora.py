"""Corpora in the store (docs/corpus.md): one row per distinct list of texts, content-addressed
(``cp-`` + SHA-256), the texts as compressed JSON in the row, one transaction per write. Like
checkpoints, a corpus records the clients that uploaded it (``meta["owners"]``) and its last use,
for the upload quota and expiry (``backend/quota.py``).
"""

from __future__ import annotations

import json
import re
import time
import zlib
from typing import Any

from sqlalchemy import delete, select, update

from workers.protocol import dumps
from workers.store.schema import corpora

CORPUS_ID = re.compile(r"cp-[0-9a-f]{32}")


class CorpusStore:
    """The corpus half of ``Store`` (a mixin: it uses the store's connection helpers)."""

    def put_corpus(self, corpus_id: str, texts: list[str], *, meta: dict[str, Any], owner: str | None = None) -> bool:
        """Store a checked corpus under its content id; True if stored now (the first write wins)."""
        if not CORPUS_ID.fullmatch(corpus_id):
            raise ValueError(f"malformed corpus id {corpus_id!r}")
        raw = json.dumps(texts, ensure_ascii=False, separators=(",", ":")).encode()
        now = time.time()
        row = {"id": corpus_id, "name": str(meta.get("name") or corpus_id)[:255], "n_texts": len(texts),
               "size": len(raw), "body": zlib.compress(raw, 6), "meta": dumps(meta), "owner": owner,
               "created_at": now}
        with self._conn(write=True) as conn:  # type: ignore[attr-defined]
            return self._insert_ignore(conn, corpora, row)  # type: ignore[attr-defined]

    def corpus(self, corpus_id: str) -> dict[str, Any] | None:
        """A stored corpus' meta, or None."""
        if not CORPUS_ID.fullmatch(corpus_id):
            return None
        with self._conn() as conn:  # type: ignore[attr-defined]
            raw = conn.execute(select(corpora.c.meta).where(corpora.c.id == corpus_id)).scalar()
        return json.loads(raw) if raw else None

    def corpus_texts(self, corpus_id: str) -> list[str] | None:
        """A stored corpus' texts, or None."""
        if not CORPUS_ID.fullmatch(corpus_id):
            return None
        with self._conn() as conn:  # type: ignore[attr-defined]
            body = conn.execute(select(corpora.c.body).where(corpora.c.id == corpus_id)).scalar()
        return json.loads(zlib.decompress(body)) if body is not None else None

    def list_corpora(self) -> list[dict[str, Any]]:
        """Every stored corpus' meta, oldest first."""
        with self._conn() as conn:  # type: ignore[attr-defined]
            rows = conn.execute(select(corpora.c.meta).order_by(corpora.c.created_at, corpora.c.id)).scalars()
            return [json.loads(raw) for raw in rows]

    def add_corpus_owner(self, corpus_id: str, owner: str) -> dict[str, Any] | None:
        """Record ``owner`` among a corpus' uploaders and mark it used; its meta, or None."""
        meta = self.corpus(corpus_id)
        if meta is None:
            return None
        owners = list(meta.get("owners", []))
        if owner not in owners:
            owners.append(owner)
        meta = {**meta, "owners": owners}
        with self._conn(write=True) as conn:  # type: ignore[attr-defined]
            conn.execute(update(corpora).where(corpora.c.id == corpus_id).values(meta=dumps(meta), used_at=time.time()))
        return meta

    def touch_corpus(self, corpus_id: str) -> None:
        """Restart a corpus' expiry clock (an analysis uses it)."""
        if CORPUS_ID.fullmatch(corpus_id):
            with self._conn(write=True) as conn:  # type: ignore[attr-defined]
                conn.execute(update(corpora).where(corpora.c.id == corpus_id).values(used_at=time.time()))

    def delete_corpus(self, corpus_id: str) -> None:
        if CORPUS_ID.fullmatch(corpus_id):
            with self._conn(write=True) as conn:  # type: ignore[attr-defined]
                conn.execute(delete(corpora).where(corpora.c.id == corpus_id))
