"""Corpora in the store (docs/corpus.md, docs/scaling.md "Streamed corpora").

One ``corpora`` row per distinct list of texts, content-addressed (``cp-`` + SHA-256), with its meta;
the texts themselves in ``corpus_chunks`` rows of up to ``CHUNK_TEXTS`` texts (a zlib-compressed JSON
list each, keyed by the index of its first text). A corpus is written in one transaction (row and
chunks: all or nothing) from an iterator of chunks, and read back by index range a chunk at a time
(``iter_corpus_texts``), each chunk in its own short query: a process never holds more than one chunk
of a corpus of a million texts, and no read transaction stays open while a job works.

Like checkpoints, a corpus records the clients that uploaded it (``meta["owners"]``) and its last use,
for the upload quota and expiry (``backend/quota.py``).
"""

from __future__ import annotations

import json
import re
import time
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

from sqlalchemy import delete, select, update

from workers.core.jsonable import dumps
from workers.store.schema import corpora, corpus_chunks

CORPUS_ID = re.compile(r"cp-[0-9a-f]{32}")
CHUNK_TEXTS = 1000  # texts per stored chunk (fewer when they pass CHUNK_BYTES)
CHUNK_BYTES = 2**20  # uncompressed JSON bytes after which a chunk is closed early
# level 6 compresses a little better, for much more time (docs/scaling.md, "Streamed corpora")
COMPRESSION_LEVEL = 1


class CorpusGone(KeyError):
    """The corpus is not (or no longer) stored; the message says which."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "no such corpus"


def encode_chunk(texts: list[str]) -> bytes:
    """A chunk as stored: the texts as a compact JSON list, zlib-compressed."""
    return zlib.compress(
        json.dumps(texts, ensure_ascii=False, separators=(",", ":")).encode(), COMPRESSION_LEVEL
    )


def encode_items(items: list[bytes]) -> bytes:
    """``encode_chunk`` of texts already JSON-encoded one by one (``json.dumps(text, ensure_ascii=False)``)."""
    return zlib.compress(b"[" + b",".join(items) + b"]", COMPRESSION_LEVEL)


def decode_chunk(data: bytes) -> list[str]:
    return json.loads(zlib.decompress(data))


def chunk_texts(texts: Iterable[str]) -> Iterator[tuple[int, bytes]]:
    """(number of texts, encoded chunk) for ``texts`` in order: ``CHUNK_TEXTS`` a chunk, or fewer
    once a chunk's JSON passes ``CHUNK_BYTES``."""
    cur: list[str] = []
    size = 0
    for t in texts:
        cur.append(t)
        size += len(t) + 3
        if len(cur) >= CHUNK_TEXTS or size >= CHUNK_BYTES:
            yield len(cur), encode_chunk(cur)
            cur, size = [], 0
    if cur:
        yield len(cur), encode_chunk(cur)


class CorpusStore:
    """The corpus half of ``Store`` (a mixin: it uses the store's connection helpers)."""

    def put_corpus(
        self, corpus_id: str, texts: list[str], *, meta: dict[str, Any], owner: str | None = None
    ) -> bool:
        """Store a checked corpus held in memory (small ones); see ``put_corpus_chunks``."""
        size = len(json.dumps(texts, ensure_ascii=False, separators=(",", ":")).encode())
        return self.put_corpus_chunks(
            corpus_id, chunk_texts(texts), n_texts=len(texts), size=size, meta=meta, owner=owner
        )

    def put_corpus_chunks(
        self,
        corpus_id: str,
        chunks: Iterable[tuple[int, bytes]],
        *,
        n_texts: int,
        size: int,
        meta: dict[str, Any],
        owner: str | None = None,
    ) -> bool:
        """Store a checked corpus from its chunks ``(number of texts, encode_chunk(texts))`` in order,
        one chunk in memory at a time; True if stored now (the first write of an id wins, and a
        corpus already stored consumes no chunk). One transaction: the row and every chunk, or
        nothing (chunks that do not add up to ``n_texts`` raise ``ValueError`` and store nothing).
        ``size``: bytes of the texts as one JSON list (what the quota counts)."""
        if not CORPUS_ID.fullmatch(corpus_id):
            raise ValueError(f"malformed corpus id {corpus_id!r}")
        row = {
            "id": corpus_id,
            "name": str(meta.get("name") or corpus_id)[:255],
            "n_texts": n_texts,
            "size": size,
            "meta": dumps(meta),
            "owner": owner,
            "created_at": time.time(),
        }
        with self._conn(write=True) as conn:  # type: ignore[attr-defined]
            if not self._insert_ignore(conn, corpora, row):  # type: ignore[attr-defined]
                return False
            first = 0
            for n, data in chunks:
                conn.execute(
                    corpus_chunks.insert().values(
                        corpus_id=corpus_id, first_text=first, n_texts=n, data=data
                    )
                )
                first += n
            if first != n_texts:
                raise ValueError(
                    f"corpus {corpus_id}: its chunks hold {first} texts, not {n_texts}"
                )
        return True

    def corpus(self, corpus_id: str) -> dict[str, Any] | None:
        """A stored corpus' meta, or None."""
        if not CORPUS_ID.fullmatch(corpus_id):
            return None
        with self._conn() as conn:  # type: ignore[attr-defined]
            raw = conn.execute(select(corpora.c.meta).where(corpora.c.id == corpus_id)).scalar()
        return json.loads(raw) if raw else None

    def corpus_length(self, corpus_id: str) -> int | None:
        """How many texts a stored corpus holds, or None."""
        if not CORPUS_ID.fullmatch(corpus_id):
            return None
        with self._conn() as conn:  # type: ignore[attr-defined]
            return conn.execute(select(corpora.c.n_texts).where(corpora.c.id == corpus_id)).scalar()

    def iter_corpus_texts(
        self, corpus_id: str, start: int = 0, stop: int | None = None, *, batch: int = CHUNK_TEXTS
    ) -> Iterator[list[str]]:
        """The texts ``[start, stop)`` of a stored corpus in order, as lists of at most ``batch`` texts.

        The streaming reader: at most one stored chunk (``CHUNK_TEXTS`` texts) plus one batch in
        memory, whatever the corpus' size; each chunk is one short query (no transaction stays open
        between batches). ``stop`` None: to the end; a range past the end is cut to it. Raises
        ``CorpusGone`` at once if the corpus is not stored, or while iterating if it is deleted then.

        >>> for texts in store.iter_corpus_texts("cp-...", 2000, 3000, batch=256): ...
        """
        n = self.corpus_length(corpus_id)
        if n is None:
            raise CorpusGone(f"corpus {corpus_id} is not stored")
        if batch < 1 or start < 0:
            raise ValueError("iter_corpus_texts needs start >= 0 and batch >= 1")
        stop = n if stop is None else min(stop, n)
        return self._corpus_batches(corpus_id, start, stop, batch)

    def _corpus_batches(
        self, corpus_id: str, start: int, stop: int, batch: int
    ) -> Iterator[list[str]]:
        c = corpus_chunks.c
        pos = start
        out: list[str] = []
        while pos < stop:
            query = (
                select(c.first_text, c.n_texts, c.data)
                .where(c.corpus_id == corpus_id, c.first_text <= pos)
                .order_by(c.first_text.desc())
                .limit(1)
            )
            with self._conn() as conn:  # type: ignore[attr-defined]
                row = conn.execute(query).first()
            if row is None or row.first_text + row.n_texts <= pos:
                raise CorpusGone(f"corpus {corpus_id} was deleted while it was being read")
            texts = decode_chunk(row.data)
            take = texts[
                pos - row.first_text : min(stop, row.first_text + row.n_texts) - row.first_text
            ]
            del texts
            pos += len(take)
            i = 0
            while i < len(take):
                room = batch - len(out)
                out.extend(take[i : i + room])
                i += room
                if len(out) == batch:
                    yield out
                    out = []
        if out:
            yield out

    def corpus_texts(self, corpus_id: str) -> list[str] | None:
        """Every text of a stored corpus in one list, or None. Small corpora only (a comparison's
        plan); jobs read with ``iter_corpus_texts``."""
        try:
            return [t for b in self.iter_corpus_texts(corpus_id) for t in b]
        except CorpusGone:
            return None

    def list_corpora(self) -> list[dict[str, Any]]:
        """Every stored corpus' meta, oldest first."""
        with self._conn() as conn:  # type: ignore[attr-defined]
            rows = conn.execute(
                select(corpora.c.meta).order_by(corpora.c.created_at, corpora.c.id)
            ).scalars()
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
            conn.execute(
                update(corpora)
                .where(corpora.c.id == corpus_id)
                .values(meta=dumps(meta), used_at=time.time())
            )
        return meta

    def touch_corpus(self, corpus_id: str) -> None:
        """Restart a corpus' expiry clock (an analysis uses it)."""
        if CORPUS_ID.fullmatch(corpus_id):
            with self._conn(write=True) as conn:  # type: ignore[attr-defined]
                conn.execute(
                    update(corpora).where(corpora.c.id == corpus_id).values(used_at=time.time())
                )

    def delete_corpus(self, corpus_id: str) -> None:
        """Remove a corpus and its texts (one transaction)."""
        if CORPUS_ID.fullmatch(corpus_id):
            with self._conn(write=True) as conn:  # type: ignore[attr-defined]
                conn.execute(delete(corpus_chunks).where(corpus_chunks.c.corpus_id == corpus_id))
                conn.execute(delete(corpora).where(corpora.c.id == corpus_id))
