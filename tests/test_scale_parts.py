"""A corpus job split into parts (workers/queue/parts.py, docs/scaling.md), for real: a real Redis, real RQ
workers (two ``workers.queue.worker`` subprocesses, and an RQ worker in this process), the default SQLite
store and a real PostgreSQL store.

One worker running every part gives the one-job result to 1e-12 in float64, and the same bits on
every run; two and three workers (each proven to have run a part) give exactly those bits; a worker SIGKILLed
in the middle of a part (held there by the test, ``held_jobs.held_corpus_part``) loses nothing and
counts nothing twice; a cancel in the middle leaves no slot, partial or stored row, and a part
failing twice fails the job with its reason. A 300-text corpus in parts of 100 on tiny-bert keeps
this fast.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest
from held_jobs import held_part_key, part_log_key, parts_config_key, release_key
from redis import Redis
from rq import SimpleWorker
from service_helpers import (
    HANG_S,
    ROOT,
    assert_cancelled_and_gone,
    numbered_texts,
    put_numbered_corpus,
    service_env,
    stop_all,
    wait_ready,
    write_catalogue,
)

from backend import queue as queue_module
from backend.config import Settings
from backend.queue import JobQueue
from backend.store import Store
from workers.core.contracts import CorpusRequest
from workers.queue import keys as protocol
from workers.queue import parts

pytestmark = pytest.mark.slow

N_TEXTS, PART = 300, 100  # three parts of two batches each (at most 64 texts a batch)
SPLIT_ENV = {"HEADSCOPE_SPLIT_MIN_ITEMS": "200", "HEADSCOPE_SPLIT_PART_ITEMS": str(PART)}
TIMING = ("seconds", "texts_per_s")
# a loaded machine can starve a heartbeat for seconds: the reaper then retries a part whose worker is
# alive (harmless: its slot is written twice with the same bits), so tests never assume one attempt
WORKER_TTL_S = 5.0


def corpus_texts() -> list[str]:
    return numbered_texts(N_TEXTS)


def put_corpus(store: Store) -> str:
    return put_numbered_corpus(store, N_TEXTS)


def request(corpus: str) -> CorpusRequest:
    return CorpusRequest(
        model="tiny-bert", corpus=corpus, options={"max_tokens": 48, "dtype": "float64"}
    )


def comparable(result: dict) -> dict:
    """The result without its timings (the only keys that may differ between runs)."""
    out = {k: v for k, v in result.items() if k not in TIMING}
    if "split" in out:
        out["split"] = {k: v for k, v in out["split"].items() if k != "part_seconds"}
    return out


def run_in_process(conn: Redis, queue: JobQueue, req: CorpusRequest) -> dict:
    """Submit ``req`` and run every job with one in-process RQ worker; the finished result."""
    queue.store.delete_result(req.job_id())
    conn.flushdb()
    queue.submit("corpus", req.job_id(), req.normalised())
    SimpleWorker(
        [protocol.queue(conn, q) for q in protocol.QUEUES],
        connection=conn,
        serializer=protocol.SERIALIZER,
    ).work(burst=True)
    state = queue.lookup(req.job_id())
    assert state.status == "finished", state.error
    return json.loads(state.result_raw)


@pytest.fixture(scope="module")
def one_worker(redis_server, tmp_path_factory, catalogue):
    """The one-worker results on the default (SQLite) store: one job, the split job, the split job again."""
    import torch

    import workers.queue.reporter

    url = (
        redis_server.rsplit("/", 1)[0] + "/3"
    )  # a database of its own: the cluster's workers never see it
    conn = Redis.from_url(url)
    settings = Settings(data_dir=tmp_path_factory.mktemp("one") / "data", redis_url=url)
    store = Store(settings)
    queue = JobQueue(conn, store, settings)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the subprocess workers (OMP_NUM_THREADS=1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(workers.queue.reporter, "store", lambda: store)
        req = request(put_corpus(store))
        out = SimpleNamespace(conn=conn, queue=queue, req=req, store=store, mp=mp)
        mp.setenv("HEADSCOPE_SPLIT_MIN_ITEMS", str(10**6))
        from workers.core.settings import get_settings

        get_settings.cache_clear()
        out.single = run_in_process(conn, queue, req)
        for name, value in SPLIT_ENV.items():
            mp.setenv(name, value)
        get_settings.cache_clear()
        out.split = run_in_process(conn, queue, req)
        out.again = run_in_process(conn, queue, req)
        yield out
        get_settings.cache_clear()
    torch.set_num_threads(threads)
    conn.flushdb()


def test_one_worker_parts_equal_one_job_and_the_same_bits_every_run(one_worker):
    one, split = one_worker.single, one_worker.split
    assert "split" not in one and split["split"]["parts"] == N_TEXTS // PART
    assert comparable(split) == comparable(one_worker.again)  # bit-identical across runs
    for key in (
        "n_texts",
        "n_tokens",
        "n_kept_tokens",
        "truncated",
        "skipped",
        "counts",
        "model",
        "options",
    ):
        assert split[key] == one[key], key
    assert split["n_texts"] == N_TEXTS
    for stat, grid in one["statistics"].items():
        a, b = np.array(grid, dtype=float), np.array(split["statistics"][stat], dtype=float)
        assert np.array_equal(np.isnan(a), np.isnan(b)) and np.nanmax(np.abs(a - b)) <= 1e-12, stat
    for stat, hist in one["histograms"].items():
        assert hist == split["histograms"][stat], stat
    for row_a, row_b in zip(one["top_pairs"], split["top_pairs"], strict=True):
        for pa, pb in zip(row_a, row_b, strict=True):
            assert [(p["text"], p["query"], p["key"], p["tokens"]) for p in pa] == [
                (p["text"], p["query"], p["key"], p["tokens"]) for p in pb
            ]
            assert np.allclose(
                [p["weight"] for p in pa], [p["weight"] for p in pb], rtol=0, atol=1e-12
            )
    assert np.allclose(one["head_map"]["xy"], split["head_map"]["xy"], rtol=0, atol=1e-9)
    assert not one_worker.conn.keys("hs:parts*")  # the merge cleared every slot


def test_a_part_failing_twice_fails_the_job_with_its_reason(one_worker, monkeypatch):
    w = one_worker
    monkeypatch.setitem(queue_module.FUNCS, "corpus", "held_jobs.held_corpus")
    req = w.req
    w.store.delete_result(req.job_id())
    w.conn.flushdb()
    w.conn.set(parts_config_key(req.job_id()), json.dumps({"fail_part": 1}))
    w.queue.submit("corpus", req.job_id(), req.normalised())
    SimpleWorker(
        [protocol.queue(w.conn, q) for q in protocol.QUEUES],
        connection=w.conn,
        serializer=protocol.SERIALIZER,
    ).work(burst=True)
    state = w.queue.lookup(req.job_id())
    assert state.status == "failed" and not state.user_error
    assert "part 1 failed: part 1 broke on purpose (attempt 2)" in state.error
    attempts = [json.loads(x) for x in w.conn.lrange(part_log_key(req.job_id()), 0, -1)]
    assert [a["attempt"] for a in attempts if a["part"] == 1] == [1, 2]
    assert not w.store.has_result(req.job_id()) and not w.conn.keys("hs:parts*")


# ---------------------------------------------------------------------- worker processes


@pytest.fixture(scope="module")
def cluster(redis_server, tmp_path_factory, tiny_model_dirs, postgres):
    """Two ``workers.queue.worker`` processes on a real Redis and a real PostgreSQL store (a third worker,
    when a test wants one, runs in this process: ``worker_here``)."""
    base = tmp_path_factory.mktemp("cluster")
    conn = Redis.from_url(redis_server)
    conn.flushdb()
    db = postgres.new_database()
    env = service_env(
        base / "data",
        write_catalogue(base / "models.json", tiny_model_dirs),
        REDIS_URL=redis_server,
        PYTHONPATH=f"{ROOT}:{ROOT / 'tests'}",
        HEADSCOPE_DATABASE_URL=db,
        HEADSCOPE_WORKER_TTL_S=str(WORKER_TTL_S),
        HEADSCOPE_WORKER_HEARTBEAT_S="0.5",
        HEADSCOPE_REAPER_INTERVAL_S="1",
        **SPLIT_ENV,
    )
    log = open(base / "workers.log", "ab")
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "workers.queue.worker", "--preload", "tiny-bert"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        for _ in range(2)
    ]
    settings = Settings(data_dir=base / "data", redis_url=redis_server, database_url=db)
    store = Store(settings, migrate=True)  # PostgreSQL: migrated as `headscope migrate` does
    try:
        wait_ready(conn, procs, 2, base / "workers.log")
        yield SimpleNamespace(
            conn=conn,
            store=store,
            queue=JobQueue(conn, store, settings),
            procs=procs,
            req=request(put_corpus(store)),
        )
    finally:
        stop_all(procs)
        log.close()
        store.close()
        conn.flushdb()


@pytest.fixture
def held(monkeypatch):
    monkeypatch.setitem(queue_module.FUNCS, "corpus", "held_jobs.held_corpus")


def submit(c, config: dict) -> str:
    job_id = c.req.job_id()
    for key in (
        parts_config_key(job_id),
        part_log_key(job_id),
        held_part_key(job_id),
        release_key(job_id),
        f"hs-test:part-workers:{job_id}",
    ):
        c.conn.delete(key)
    c.conn.set(parts_config_key(job_id), json.dumps(config))
    c.queue.submit("corpus", job_id, c.req.normalised())
    return job_id


def wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + HANG_S
    while not predicate():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def attempts(c, job_id: str) -> list[dict]:
    return [json.loads(x) for x in c.conn.lrange(part_log_key(job_id), 0, -1)]


def finished(c, job_id: str) -> dict:
    state = c.queue.wait(job_id, timeout_s=HANG_S)
    merge = protocol.fetch_job(c.conn, parts.merge_id(job_id))
    assert state.status == "finished", (
        state.error,
        merge and (merge.get_status(), merge.return_value(), merge.meta),
    )
    assert c.store.has_result(job_id)  # in PostgreSQL, like any result
    return json.loads(state.result_raw)


def worker_here(c, store: Store, monkeypatch) -> None:
    """A third worker: an RQ worker in this process (burst: it stops when the queues are empty), with
    a heartbeat as ``workers.queue.worker`` keeps, on the cluster's store."""
    import workers.queue.reporter

    monkeypatch.setattr(workers.queue.reporter, "store", lambda: store)
    name = protocol.new_worker_name()
    beat = lambda: protocol.beat(  # noqa: E731
        c.conn, name, ttl_s=WORKER_TTL_S, info={"pid": os.getpid(), "ready": True}
    )
    ticker = protocol.Ticker(beat, interval_s=0.5, name="test-heartbeat").start()
    try:
        SimpleWorker(
            [protocol.queue(c.conn, q) for q in protocol.QUEUES],
            connection=c.conn,
            name=name,
            serializer=protocol.SERIALIZER,
        ).work(burst=True)
    finally:
        ticker.stop()
        c.conn.delete(protocol.worker_key(name))


def test_two_and_three_workers_give_the_one_worker_bits(cluster, one_worker, held, monkeypatch):
    c = cluster
    from frontend.kit.page import status_view

    for n_workers in (2, 3):
        c.store.delete_result(c.req.job_id())
        # the first parts wait until that many workers hold one each (two workers: until the test,
        # having read the status line, releases them)
        job_id = submit(c, {"barrier": n_workers, "until_release": n_workers == 2})
        workers_key = f"hs-test:part-workers:{job_id}"
        if n_workers == 3:  # once the parts are queued (a burst worker stops at an empty queue)
            wait_for(
                lambda job_id=job_id: parts.plan(c.conn, job_id) is not None, "the parts enqueued"
            )
            worker_here(c, c.store, monkeypatch)
        else:
            wait_for(lambda key=workers_key: c.conn.scard(key) == 2, "both workers hold a part")
            state = c.queue.lookup(job_id, with_partial=False)  # the status while the parts run
            assert state.status == "running" and state.message.startswith(
                "parts 0/3 done, 2 running; 0/300 texts, "
            )
            shown = status_view(
                {"status": state.status, "progress": state.progress, "message": state.message}
            )[1]
            assert (
                shown == f"running — {state.message} (0%)"
            )  # the browser's status line says as much
            c.conn.set(release_key(job_id), 1)
        result = finished(c, job_id)
        assert comparable(result) == comparable(one_worker.split), n_workers
        log = attempts(c, job_id)
        assert {a["part"] for a in log} == set(range(N_TEXTS // PART))
        assert len({a["worker"] for a in log}) == n_workers
        assert not c.conn.keys("hs:parts*")


def test_cancel_in_the_middle_leaves_no_partial_rows(cluster, one_worker, held):
    c = cluster
    c.store.delete_result(c.req.job_id())
    job_id = submit(c, {"hold_part": 2})
    wait_for(lambda: c.conn.exists(held_part_key(job_id)), "part 2 held mid-part")
    wait_for(lambda: c.conn.hlen(protocol.parts_key(job_id)) >= 1, "another part done")
    state = c.queue.lookup(job_id, with_partial=False)
    assert state.status == "running" and 0 < state.progress < 1
    assert c.queue.cancel(job_id).status == "running"
    c.conn.set(
        release_key(job_id), 1
    )  # the held part goes on: it sees the cancel at its next batch
    held_part = protocol.fetch_job(c.conn, parts.part_id(job_id, 2))
    wait_for(lambda: held_part.get_status(refresh=True) == "finished", "the held part ended")
    merge = protocol.fetch_job(c.conn, parts.merge_id(job_id))
    assert merge.get_status(refresh=True) == "canceled"
    assert_cancelled_and_gone(c.conn, c.queue, c.store, job_id)
    again = submit(c, {})  # cancelled is not the input's fault: it runs again, from nothing
    assert comparable(finished(c, again)) == comparable(one_worker.split)


def test_worker_killed_mid_part_loses_nothing_and_counts_nothing_twice(cluster, one_worker, held):
    c = cluster
    c.store.delete_result(c.req.job_id())
    job_id = submit(c, {"hold_part": 1})
    wait_for(lambda: c.conn.exists(held_part_key(job_id)), "part 1 held mid-part")
    victim = protocol.text(c.conn.get(held_part_key(job_id)))
    pid = protocol.live_workers(c.conn)[victim]["pid"]
    os.kill(pid, signal.SIGKILL)
    next(p for p in c.procs if p.pid == pid).wait(30)
    result = finished(c, job_id)
    assert comparable(result) == comparable(one_worker.split)
    assert result["n_texts"] == N_TEXTS
    log = attempts(c, job_id)
    retried = [a for a in log if a["part"] == 1]
    assert (
        retried[0]["worker"] == victim
        and retried[-1]["worker"] != victim
        and retried[-1]["attempt"] == 2
    )
    assert {a["part"] for a in log} == set(range(N_TEXTS // PART))
    assert not c.conn.keys("hs:parts*")
