"""The short-job queue and worker recycling, with real worker processes on a real Redis.

A long analysis is held (tests/held_jobs.py) on the only general worker for as long as the test
wants; a one-head request submitted meanwhile goes to the short-job queue and is finished by the
short-job worker while the long one still runs. Nothing here races a computation against a clock.
"""

from __future__ import annotations

import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from held_jobs import release_key
from redis import Redis
from service_helpers import ROOT, service_env, short_text, stop_all, wait_ready, write_catalogue

from backend import queue as queue_module
from backend.config import Settings
from backend.queue import JobQueue
from backend.store import Store
from workers.core.contracts import AnalysisRequest
from workers.queue import keys as protocol

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def workers(redis_server, tmp_path_factory, tiny_model_dirs):
    base = tmp_path_factory.mktemp("queues")
    conn = Redis.from_url(redis_server)
    conn.flushdb()
    env = service_env(
        base / "data",
        write_catalogue(base / "models.json", tiny_model_dirs),
        REDIS_URL=redis_server,
        PYTHONPATH=f"{ROOT}:{ROOT / 'tests'}",
        HEADSCOPE_WORKER_MAX_JOBS="0",
    )
    log = open(base / "workers.log", "ab")
    cmd = [
        sys.executable,
        "-m",
        "workers.queue.worker",
    ]  # no --preload: the first job loads tiny-bert
    procs = [
        subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT),
        subprocess.Popen(
            [*cmd, "--queues", ",".join(protocol.SHORT_QUEUES)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        ),
    ]
    wait_ready(conn, procs, 2, base / "workers.log")
    settings = Settings(data_dir=base / "data", redis_url=redis_server)
    store = Store(settings)
    yield SimpleNamespace(
        conn=conn, queue=JobQueue(conn, store, settings), env=env, base=base, log=log
    )
    stop_all(procs)
    log.close()


def test_short_jobs_are_classified():
    one_head = {"analyses": ["max-attention", "head-tsne"], "options": {"layer": 1, "head": 2}}
    assert protocol.is_short("pe", {})
    assert protocol.is_short("analysis", one_head)
    assert protocol.is_short(
        "analysis", {"analyses": ["max-attention"], "options": {"layer": "all"}}
    )
    assert not protocol.is_short("analysis", {**one_head, "options": {"layer": 1, "head": "all"}})
    assert not protocol.is_short(
        "analysis", {**one_head, "options": {"layer": 1, "head": 2, "all_heads": True}}
    )
    assert not protocol.is_short(
        "analysis", {"analyses": ["robustness"], "options": {"layer": 1, "head": 2}}
    )


def test_a_one_head_request_finishes_while_a_long_analysis_holds_the_general_worker(
    workers, monkeypatch
):
    monkeypatch.setitem(queue_module.FUNCS, "analysis", "held_jobs.held_analysis")
    c = workers
    # long by classification (decomposition is not a short kind), held as long as the test wants
    long = AnalysisRequest(
        model="tiny-bert", text=short_text(30), analyses=["max-attention", "decomposition"]
    )
    assert not protocol.is_short("analysis", long.normalised())
    c.queue.submit("analysis", long.job_id(), long.normalised())  # held until released
    deadline = time.monotonic() + 120
    while c.queue.lookup(long.job_id(), with_partial=False).status != "running":
        assert time.monotonic() < deadline, "the long job never started"
        time.sleep(0.05)
    short = AnalysisRequest(
        model="tiny-bert",
        text=short_text(20),
        analyses=["max-attention", "head-tsne"],
        options={"layer": 1, "head": 2, "n_iter": 50, "early_exaggeration_iter": 50},
    )
    c.conn.set(release_key(short.job_id()), "1", ex=600)  # the short one runs at once
    c.queue.submit("analysis", short.job_id(), short.normalised())
    assert protocol.fetch_job(c.conn, short.job_id()).origin == protocol.SHORT_QUEUE
    state = c.queue.wait(short.job_id(), timeout_s=120)
    assert state.status == "finished", state.error
    assert c.queue.lookup(long.job_id(), with_partial=False).status == "running"  # still held
    c.conn.set(release_key(long.job_id()), "1", ex=600)
    assert c.queue.wait(long.job_id(), timeout_s=120).status in (
        "finished",
        "failed",
    )  # ended, not held


def test_a_worker_stops_after_its_job_bound_and_leaves_the_rest_queued(workers):
    c = workers
    q = protocol.queue(c.conn, "hs-test-recycle")
    for _ in range(3):
        q.enqueue_call("held_jobs.noop")
    env = {**c.env, "HEADSCOPE_WORKER_MAX_JOBS": "2"}
    proc = subprocess.run(
        [sys.executable, "-m", "workers.queue.worker", "--queues", "hs-test-recycle"],
        cwd=ROOT,
        env=env,
        stdout=c.log,
        stderr=subprocess.STDOUT,
        timeout=300,
    )
    assert proc.returncode == 0  # a clean exit: `headscope serve` starts a fresh worker
    assert q.count == 1
