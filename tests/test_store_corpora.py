"""Corpora in the store, on SQLite and a real PostgreSQL (tests/pg_server.py): written in chunks in one
transaction (all or nothing, the first write of an id wins), read back by index range one chunk at a
time with memory that does not grow with the corpus, deleted with their chunks; migration 0004 moves
the corpora of revision 0003 (one compressed body) into chunks, losing nothing."""

from __future__ import annotations

import json
import tracemalloc
import zlib

import pytest
import sqlalchemy as sa
from sqlalchemy import func, select

from backend.config import Settings
from backend.store import Store
from workers.inputs.corpora import corpus_id
from workers.store import migrate
from workers.store.corpora import CHUNK_TEXTS, CorpusGone, chunk_texts
from workers.store.schema import corpus_chunks


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'shared' / 'headscope.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def store(db_url, tmp_path):
    s = Store(Settings(data_dir=tmp_path / "a", database_url=db_url), migrate=True)
    yield s
    s.close()


def texts_of(n: int, *, width: int = 0) -> list[str]:
    return [f"text number {i} " + "é" * (i % 7) + "x" * width for i in range(n)]


def flat(batches) -> list[str]:
    return [t for b in batches for t in b]


def test_a_corpus_is_read_back_by_index_range_in_batches(store):
    texts = texts_of(2 * CHUNK_TEXTS + 345)
    cid = corpus_id(texts)
    assert store.put_corpus(cid, texts, meta={"id": cid, "name": "c"}, owner="alice") is True
    assert store.corpus_length(cid) == len(texts) and store.corpus(cid)["name"] == "c"
    batches = list(store.iter_corpus_texts(cid, batch=7))
    assert all(len(b) == 7 for b in batches[:-1]) and 1 <= len(batches[-1]) <= 7
    assert flat(batches) == texts
    for start, stop in [
        (0, 1),
        (CHUNK_TEXTS - 1, CHUNK_TEXTS + 1),
        (1500, 2200),
        (2000, None),
        (17, 17),
    ]:
        assert flat(store.iter_corpus_texts(cid, start, stop, batch=64)) == texts[start:stop]
    assert flat(store.iter_corpus_texts(cid, 2300, 10**9)) == texts[2300:]  # cut to the end
    assert store.corpus_texts(cid) == texts
    with store.engine.connect() as conn:
        rows = conn.execute(
            select(corpus_chunks.c.first_text, corpus_chunks.c.n_texts)
            .where(corpus_chunks.c.corpus_id == cid)
            .order_by(corpus_chunks.c.first_text)
        ).all()
        stored = conn.execute(select(func.sum(func.length(corpus_chunks.c.data)))).scalar()
    assert [tuple(r) for r in rows] == [(0, 1000), (1000, 1000), (2000, 345)]
    item = next(i for i in store.stored_items() if i["kind"] == "corpus")
    assert item == {
        "kind": "corpus",
        "id": cid,
        "bytes": stored,
        "used_at": item["used_at"],
        "owners": [],
    }
    store.delete_corpus(cid)
    assert store.corpus(cid) is None and store.corpus_texts(cid) is None
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(corpus_chunks)).scalar() == 0
    with pytest.raises(CorpusGone, match="not stored"):
        store.iter_corpus_texts(cid)


def test_writes_are_all_or_nothing_and_the_first_wins(store):
    texts = texts_of(1500)
    cid = corpus_id(texts)
    chunks = list(chunk_texts(texts))
    with pytest.raises(ValueError, match="1000 texts, not 1500"):
        store.put_corpus_chunks(cid, chunks[:1], n_texts=1500, size=1, meta={"id": cid})
    assert store.corpus(cid) is None and store.list_corpora() == []
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(corpus_chunks)).scalar() == 0

    def failing():
        yield chunks[0]
        raise OSError("the spool file went away")

    with pytest.raises(OSError):
        store.put_corpus_chunks(cid, failing(), n_texts=1500, size=1, meta={"id": cid})
    assert store.corpus(cid) is None
    assert (
        store.put_corpus_chunks(cid, iter(chunks), n_texts=1500, size=1, meta={"id": cid, "n": 1})
        is True
    )
    untouched = iter(chunks)
    assert (
        store.put_corpus_chunks(cid, untouched, n_texts=1500, size=1, meta={"id": cid, "n": 2})
        is False
    )
    assert next(untouched) == chunks[0]  # a corpus already stored reads none of the second upload
    assert store.corpus(cid)["n"] == 1 and store.corpus_texts(cid) == texts


def test_a_corpus_deleted_while_read_is_named(store):
    texts = texts_of(2500)
    cid = corpus_id(texts)
    store.put_corpus(cid, texts, meta={"id": cid})
    reader = store.iter_corpus_texts(cid, batch=1000)
    assert next(reader) == texts[:1000]
    store.delete_corpus(cid)
    with pytest.raises(CorpusGone, match="deleted while it was being read"):
        next(reader)


def _read_peak(store, cid: str) -> tuple[int, int]:
    """(texts read, peak bytes allocated while reading ``cid`` in batches of 256)."""
    tracemalloc.start()
    try:
        n = sum(len(batch) for batch in store.iter_corpus_texts(cid, batch=256))
        return n, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_reading_in_batches_holds_one_chunk_not_the_corpus(store):
    peaks = {}
    for n in (3_000, 30_000):
        texts = texts_of(n, width=120)
        cid = corpus_id(texts)
        store.put_corpus(cid, texts, meta={"id": cid})
        whole = sum(len(t.encode()) + 49 for t in texts)  # what a list of them takes, at least
        del texts
        read, peaks[n] = _read_peak(store, cid)
        assert read == n
    assert peaks[30_000] < 1.5 * peaks[3_000], (
        peaks
    )  # ten times the corpus, the same memory: one chunk
    assert peaks[30_000] < whole / 4, (peaks, whole)


def test_migration_0004_moves_corpora_of_0003_into_chunks(db_url, tmp_path):
    from alembic import command

    store = Store(Settings(data_dir=tmp_path / "m", database_url=db_url), migrate=False)
    with store.engine.execution_options(sqlite_immediate=True).begin() as conn:
        command.upgrade(migrate._config(conn), "0003")
    old = sa.table(
        "corpora",
        *(sa.column(c) for c in ("id", "name", "n_texts", "size", "body", "meta", "created_at")),
    )
    corpora_0003 = {}
    for n in (3, 2 * 1000 + 1):
        texts = texts_of(n)
        cid = corpus_id(texts)
        raw = json.dumps(texts, ensure_ascii=False, separators=(",", ":")).encode()
        corpora_0003[cid] = texts
        with store.engine.begin() as conn:
            conn.execute(
                old.insert().values(
                    id=cid,
                    name="old",
                    n_texts=n,
                    size=len(raw),
                    body=zlib.compress(raw),
                    meta=json.dumps({"id": cid, "owners": ["bob"]}),
                    created_at=1.7e9,
                )
            )
    assert store.migrate() == ("0003", migrate.HEAD)
    for cid, texts in corpora_0003.items():
        assert store.corpus_texts(cid) == texts and store.corpus(cid)["owners"] == ["bob"]
        assert flat(store.iter_corpus_texts(cid, 999, 1002)) == texts[999:1002]
    assert "body" not in {c["name"] for c in sa.inspect(store.engine).get_columns("corpora")}
    with store.engine.begin() as conn:  # and back: the bodies are rebuilt from the chunks
        command.downgrade(migrate._config(conn), "0003")
        bodies = dict(conn.execute(sa.text("SELECT id, body FROM corpora")).all())
    assert {cid: json.loads(zlib.decompress(b)) for cid, b in bodies.items()} == corpora_0003
    store.close()
