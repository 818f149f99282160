"""The comparison of two models split into parts of texts (workers/queue/jobs_compare.py,
workers/analyses/compare/parts.py, docs/scaling.md), for real: a real Redis, real RQ workers (one in
this process; two in processes of their own), a stored corpus, tiny random models from configs.

A split comparison equals the one-job comparison (float64 sums to 1e-12) and shows its parts in the
job's status; two worker processes (each proven to have run a part) give the one worker's bits; a
comparison cancelled in the middle of a part keeps nothing; a part failing twice fails it with its
reason; a small comparison stays one job; the memory plan is a part's. A 30-text corpus in parts of
10 (tiny-bert against tiny-gpt2, which has a head: words' surprisal).
"""

from __future__ import annotations

import json
import os
import signal
import time
from types import SimpleNamespace

import numpy as np
import pytest
from held_jobs import held_part_key, part_log_key, parts_config_key, release_key
from redis import Redis
from rq import SimpleWorker
from service_helpers import HANG_S, assert_cancelled_and_gone, numbered_texts, put_numbered_corpus

from backend import queue as queue_module
from backend.config import Settings
from backend.queue import JobQueue
from backend.store import Store
from workers.core.contracts import CompareRequest
from workers.core.jsonable import dumps
from workers.queue import keys as protocol
from workers.queue import parts

N_TEXTS, PART = 30, 10
SPLIT_ENV = {
    "HEADSCOPE_SPLIT_COMPARE_MIN_TEXTS": "20",
    "HEADSCOPE_SPLIT_COMPARE_PART_TEXTS": str(PART),
}
TIMING = ("seconds",)


def corpus_texts() -> list[str]:
    return numbered_texts(N_TEXTS)


def put_corpus(store: Store) -> str:
    return put_numbered_corpus(store, N_TEXTS)


def comparable(result: dict) -> dict:
    """The result without its timings (the only keys that may differ between runs)."""
    out = {k: v for k, v in result.items() if k not in TIMING}
    if "split" in out:
        out["split"] = {k: v for k, v in out["split"].items() if k != "part_seconds"}
    return out


def worker(conn: Redis) -> SimpleWorker:
    return SimpleWorker(
        [protocol.queue(conn, q) for q in protocol.QUEUES],
        connection=conn,
        serializer=protocol.SERIALIZER,
    )


@pytest.fixture(scope="module")
def service(redis_server, tmp_path_factory, catalogue):
    """A real Redis (a database of its own), a SQLite store holding the corpus, the split settings, the
    one-job comparison computed in this process: (conn, store, queue, req, single, mp)."""
    import torch

    import workers.queue.reporter
    from workers.core.settings import get_settings
    from workers.queue.jobs_compare import compute_compare, request_texts

    url = redis_server.rsplit("/", 1)[0] + "/4"
    conn = Redis.from_url(url)
    conn.flushdb()
    base = tmp_path_factory.mktemp("compare-parts")
    settings = Settings(data_dir=base / "data", redis_url=url)
    store = Store(settings)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the subprocess workers (OMP_NUM_THREADS=1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(workers.queue.reporter, "store", lambda: store)
        for name, value in SPLIT_ENV.items():
            mp.setenv(name, value)
        get_settings.cache_clear()
        req = CompareRequest(
            model_a="tiny-bert", model_b="tiny-gpt2", corpus=put_corpus(store), max_tokens=32
        )
        single = json.loads(
            dumps(
                compute_compare(
                    req, texts=request_texts(req, store=store), progress=lambda f, m: None
                )
            )
        )
        yield SimpleNamespace(
            conn=conn,
            store=store,
            queue=JobQueue(conn, store, settings),
            req=req,
            single=single,
            base=base,
            url=url,
            mp=mp,
        )
        get_settings.cache_clear()
    torch.set_num_threads(threads)
    conn.flushdb()


def submit(s, req: CompareRequest | None = None) -> str:
    req = req or s.req
    s.store.delete_result(req.job_id())
    s.conn.flushdb()
    s.queue.submit("compare", req.job_id(), req.normalised())
    return req.job_id()


def run_split_here(s) -> dict:
    """The split comparison run by one RQ worker in this process; its status checked on the way."""
    job_id = submit(s)
    w = worker(s.conn)
    w.work(burst=True, max_jobs=1)  # the coordinator: parts enqueued
    plan = parts.plan(s.conn, job_id)
    assert plan is not None and plan["n_parts"] == N_TEXTS // PART and plan["unit"] == "texts"
    state = s.queue.lookup(job_id, with_partial=False)
    assert state.status == "queued" and state.message.startswith(
        f"queued: 3 parts of {N_TEXTS} texts"
    ), state.message
    w.work(burst=True, max_jobs=1)  # one part
    state = s.queue.lookup(job_id, with_partial=False)
    assert state.message.startswith(f"parts 1/3 done, 0 running; {PART}/{N_TEXTS} texts, "), (
        state.message
    )
    assert " texts/s" in state.message and abs(state.progress - 0.33) < 0.01
    w.work(burst=True)
    state = s.queue.lookup(job_id)
    assert state.status == "finished", state.error
    assert s.store.has_result(job_id) and not s.conn.keys("hs:parts*")
    return json.loads(state.result_raw)


@pytest.fixture(scope="module")
def split(service):
    return run_split_here(service)


def test_split_comparison_equals_the_one_job_comparison(service, split):
    one = service.single
    assert "split" not in one and split["split"] == {
        "parts": 3,
        "part_texts": PART,
        "part_seconds": split["split"]["part_seconds"],
    }
    for key in (
        "model_a",
        "model_b",
        "n_texts",
        "n_query_words",
        "causal",
        "max_tokens",
        "text",
        "corpus",
        "texts",
        "words",
        "one_at_a_time",
    ):
        assert split[key] == one[key], key
    assert split["n_texts"] == N_TEXTS and split["words"][5]["words"] == corpus_texts()[5].split()
    assert any(
        x is not None for x in split["words"][5]["b"]["surprisal"]
    )  # model B's, from its part
    assert [(p["a"], p["b"]) for p in split["matching"]["pairs"]] == [
        (p["a"], p["b"]) for p in one["matching"]["pairs"]
    ]
    got = np.array([p["similarity"] for p in split["matching"]["pairs"]])
    want = np.array([p["similarity"] for p in one["matching"]["pairs"]])
    assert np.max(np.abs(got - want)) <= 1e-12 and 0 < want.min() and want.max() <= 1
    assert np.max(np.abs(np.array(split["similarity"]) - np.array(one["similarity"]))) <= 1e-12
    assert abs(split["matching"]["total"] - one["matching"]["total"]) <= 1e-12
    pa, pb = split["profiles"], one["profiles"]
    assert pa["statistics"] == pb["statistics"]
    for stat in pb["statistics"]:
        a, b = (np.array(p["raw"][stat], dtype=float) for p in (pa, pb))
        assert np.array_equal(np.isnan(a), np.isnan(b)) and np.nanmax(np.abs(a - b)) <= 1e-12, stat
    assert np.allclose(pa["xy_a"], pb["xy_a"], rtol=0, atol=1e-9)


def test_the_split_comparison_is_the_same_bits_every_run(service, split):
    assert comparable(run_split_here(service)) == comparable(split)


def test_a_small_comparison_stays_one_job(service, setting):
    setting("HEADSCOPE_SPLIT_COMPARE_MIN_TEXTS", str(N_TEXTS + 1))
    job_id = submit(service)
    worker(service.conn).work(burst=True)
    state = service.queue.lookup(job_id)
    assert state.status == "finished", state.error
    assert parts.plan(service.conn, job_id) is None and not service.conn.keys(
        f"rq:job:{job_id}-part-*"
    )
    result = json.loads(state.result_raw)
    assert "split" not in result and comparable(result) == comparable(service.single)


def test_a_comparison_cancelled_in_the_middle_of_a_part_keeps_nothing(service, monkeypatch):
    s = service
    monkeypatch.setitem(queue_module.FUNCS, "compare", "held_jobs.held_compare")
    job_id = submit(s)
    s.conn.set(parts_config_key(job_id), json.dumps({"hold_part": 1}))
    w = worker(s.conn)
    w.work(burst=True, max_jobs=2)  # the coordinator and part 0
    assert s.conn.hlen(protocol.parts_key(job_id)) == 1
    pid = fork_worker(s)  # takes part 1 and holds in its middle: model A ran its texts, B not yet
    try:
        wait_for(lambda: s.conn.exists(held_part_key(job_id)), "part 1 held mid-part")
        assert s.queue.cancel(job_id).status == "running"
        s.conn.set(
            release_key(job_id), 1
        )  # part 1 goes on: it sees the cancel before its next batch
        reap([pid])
    finally:
        stop([pid])
    assert_cancelled_and_gone(s.conn, s.queue, s.store, job_id)
    assert protocol.fetch_job(s.conn, parts.part_id(job_id, 1)).return_value() == {"skipped": True}
    assert (
        protocol.fetch_job(s.conn, parts.part_id(job_id, 2)).get_status(refresh=True) == "canceled"
    )
    assert protocol.fetch_job(s.conn, parts.merge_id(job_id)).get_status(refresh=True) == "canceled"


def test_a_part_failing_twice_fails_the_comparison_with_its_reason(service, monkeypatch):
    s = service
    monkeypatch.setitem(queue_module.FUNCS, "compare", "held_jobs.held_compare")
    job_id = submit(s)
    s.conn.set(parts_config_key(job_id), json.dumps({"fail_part": 2}))
    worker(s.conn).work(burst=True)
    state = s.queue.lookup(job_id)
    assert state.status == "failed" and not state.user_error
    assert "part 2 failed: part 2 broke on purpose (attempt 2)" in state.error, state.error
    attempts = [json.loads(x) for x in s.conn.lrange(part_log_key(job_id), 0, -1)]
    assert [a["attempt"] for a in attempts if a["part"] == 2] == [1, 2]
    assert not s.store.has_result(job_id) and not s.conn.keys("hs:parts*")


def test_the_memory_plan_of_a_split_comparison_is_its_heaviest_part(service):
    from workers.analyses.compare.plan import compare_ranges, plan_of

    texts = corpus_texts()
    ranges = compare_ranges(len(texts))
    assert ranges == [(0, 10), (10, 20), (20, 30)]
    whole = plan_of("tiny-bert", "tiny-gpt2", texts, max_tokens=32)
    split_plan = plan_of("tiny-bert", "tiny-gpt2", texts, max_tokens=32, ranges=ranges)
    each = [plan_of("tiny-bert", "tiny-gpt2", texts[a:b], max_tokens=32).maps for a, b in ranges]
    assert split_plan.maps == max(each) < whole.maps == sum(each) and split_plan.parts == 3


def fork_worker(s) -> int:
    """An RQ worker in a process of its own, forked from this one (models and settings as here, no
    start-up: ``workers.queue.worker`` processes are tested by tests/test_scale_parts.py), run until the
    queues are empty; its pid."""
    pid = os.fork()
    if pid == 0:  # the child: a fresh Redis connection and store connections, one RQ worker
        code = 1
        try:
            s.store.engine.dispose(close=False)
            worker(Redis.from_url(s.url)).work(burst=True)
            code = 0
        finally:
            os._exit(code)
    return pid


def reap(pids: list[int]) -> None:
    """Wait for the forked workers; each must exit cleanly."""
    deadline = time.monotonic() + HANG_S
    for pid in pids:
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
            assert time.monotonic() < deadline, "the workers never finished"
            time.sleep(0.05)
        assert os.waitstatus_to_exitcode(done[1]) == 0


def stop(pids: list[int]) -> None:
    """Kill those of the forked workers still running (after a failure only)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass  # already reaped


def wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + HANG_S
    while not predicate():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def test_two_workers_give_the_one_worker_bits(service, split, monkeypatch):
    s = service
    monkeypatch.setitem(queue_module.FUNCS, "compare", "held_jobs.held_compare")
    job_id = submit(s)
    s.conn.set(
        parts_config_key(job_id), json.dumps({"barrier": 2})
    )  # the first two parts wait for both
    worker(s.conn).work(burst=True, max_jobs=1)  # the coordinator
    pids = [fork_worker(s) for _ in range(2)]
    try:
        reap(pids)
    finally:
        stop(pids)
    state = s.queue.lookup(job_id)
    assert state.status == "finished", state.error
    attempts = [json.loads(x) for x in s.conn.lrange(part_log_key(job_id), 0, -1)]
    assert {a["part"] for a in attempts} == {0, 1, 2} and len({a["worker"] for a in attempts}) == 2
    assert comparable(json.loads(state.result_raw)) == comparable(split)
    assert not s.conn.keys("hs:parts*")
