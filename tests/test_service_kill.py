"""Worker death and job timeouts, for real: worker subprocesses on a real Redis, SIGKILLed mid-job.

A job whose worker dies is re-queued once (``Retry(max=1)``) and then finished by another worker,
or reported failed with a reason; a job over its timeout is retried once and then failed with a
reason. Never "running" forever. Heartbeats are shortened (3 s) so this runs in seconds.

The test decides how long a job lasts: jobs run ``held_jobs.held_analysis``, which holds until
the test releases it (or forever), so nothing races a computation against a kill or a timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from held_jobs import attempts_key, release_key
from redis import Redis
from service_helpers import (
    HANG_S,
    ROOT,
    service_env,
    short_text,
    stop_all,
    wait_ready,
    write_catalogue,
)

from backend import queue as queue_module
from backend.config import Settings
from backend.queue import JobQueue
from backend.store import Store
from workers.core.contracts import AnalysisRequest
from workers.queue import keys as protocol

pytestmark = pytest.mark.slow

WORKER_TTL_S = 3.0
JOB_TIMEOUT_S = int(HANG_S)  # a released job must never race its timeout, however slow the machine


def long_request(seed: int) -> AnalysisRequest:
    """Every head of tiny-bert: a real analysis, run once the test releases the held job."""
    return AnalysisRequest(
        model="tiny-bert", text=short_text(38), analyses=["head-tsne"], options={"seed": seed}
    )


@pytest.fixture(autouse=True)
def held(monkeypatch):
    """Analysis jobs enqueued by these tests run ``held_jobs.held_analysis``."""
    monkeypatch.setitem(queue_module.FUNCS, "analysis", "held_jobs.held_analysis")


def release(c, job_id: str) -> None:
    c.conn.set(release_key(job_id), "1", ex=600)


@pytest.fixture(scope="module")
def cluster(redis_server, tmp_path_factory, tiny_model_dirs):
    base = tmp_path_factory.mktemp("cluster")
    conn = Redis.from_url(redis_server)
    conn.flushdb()
    env = service_env(
        base / "data",
        write_catalogue(base / "models.json", tiny_model_dirs),
        REDIS_URL=redis_server,
        PYTHONPATH=f"{ROOT}:{ROOT / 'tests'}",
        HEADSCOPE_WORKER_TTL_S=str(WORKER_TTL_S),
        HEADSCOPE_WORKER_HEARTBEAT_S="0.5",
        HEADSCOPE_REAPER_INTERVAL_S="1",
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
        for _ in range(3)
    ]
    wait_ready(conn, procs, 3, base / "workers.log")
    settings = Settings(
        data_dir=base / "data",
        redis_url=redis_server,
        job_timeout_s=JOB_TIMEOUT_S,
        worker_ttl_s=WORKER_TTL_S,
    )
    store = Store(settings)
    yield SimpleNamespace(
        conn=conn,
        settings=settings,
        store=store,
        queue=JobQueue(conn, store, settings),
        procs=procs,
    )
    stop_all(procs)
    log.close()


def wait_running(c, job_id: str, *, timeout_s: float = HANG_S) -> str:
    """Wait until the job is computing (past loading); return its worker's name."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = c.queue.lookup(job_id, with_partial=False)
        if state.status == "running" and state.progress > 0.02:
            return protocol.fetch_job(c.conn, job_id).worker_name
        assert state.status in ("queued", "running"), state
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.05)


def kill_worker(c, name: str) -> None:
    pid = protocol.live_workers(c.conn)[name]["pid"]
    os.kill(pid, signal.SIGKILL)
    proc = next(p for p in c.procs if p.pid == pid)
    proc.wait(10)


def test_worker_healthcheck_sees_live_workers_on_this_host(cluster, redis_server):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    check = [sys.executable, "-m", "workers.queue.worker", "--check", "--redis-url"]
    assert subprocess.run([*check, redis_server], env=env, cwd=ROOT, timeout=60).returncode == 0
    empty = redis_server.rsplit("/", 1)[0] + "/5"  # another database: no worker there
    assert subprocess.run([*check, empty], env=env, cwd=ROOT, timeout=60).returncode == 1


def test_job_over_its_timeout_fails_with_a_reason_after_one_retry(cluster):
    short = cluster.settings.model_copy(update={"job_timeout_s": 1})
    queue = JobQueue(cluster.conn, cluster.store, short)
    req = long_request(seed=100)
    queue.submit("analysis", req.job_id(), req.normalised())  # never released: over 1 s, twice
    state = queue.wait(req.job_id(), timeout_s=HANG_S)
    assert state.status == "failed"
    assert "longer than its 1 s limit" in state.error
    assert int(cluster.conn.get(attempts_key(req.job_id()))) == 2  # tried, retried, given up


def test_killed_worker_job_is_retried_and_finished_while_another_worker_serves(cluster):
    c = cluster
    req = long_request(seed=1)
    job_id = req.job_id()
    c.queue.submit("analysis", job_id, req.normalised())
    victim = wait_running(c, job_id)
    kill_worker(c, victim)
    small = AnalysisRequest(model="tiny-bert", text=short_text(10), analyses=["max-attention"])
    c.queue.submit("analysis", small.job_id(), small.normalised())
    release(c, small.job_id())

    served = c.queue.wait(small.job_id(), timeout_s=HANG_S)
    served_at = time.monotonic()
    assert served.status == "finished", served.error
    release(c, job_id)  # only now may the retried job finish
    state = c.queue.wait(job_id, timeout_s=HANG_S)
    finished_at = time.monotonic()
    assert state.status == "finished", state.error
    assert served_at < finished_at  # the other worker kept serving while the job was recovered
    job = protocol.fetch_job(c.conn, job_id)
    # recovered by the reaper (it sets abandoned_by), not by RQ's own job timeout + 60 s
    assert job.meta["abandoned_by"] == victim and job.worker_name != victim
    assert int(c.conn.get(attempts_key(job_id))) == 2
    assert (
        int(c.conn.get(protocol.computed_key(job_id))) == 1
    )  # computed once, by the second worker
    result = json.loads(state.result_raw)
    n = result["n_tokens"]
    assert (
        len(result["head-tsne"]["embedding"]) == 2
        and len(result["head-tsne"]["embedding"][0][0]) == n
    )


def test_job_whose_workers_die_twice_fails_with_a_reason(cluster):
    c = cluster
    req = long_request(seed=2)
    job_id = req.job_id()
    c.queue.submit("analysis", job_id, req.normalised())
    first = wait_running(c, job_id)
    kill_worker(c, first)
    deadline = time.monotonic() + HANG_S
    while (
        protocol.fetch_job(c.conn, job_id).meta.get("abandoned_count", 0) < 1
    ):  # the other worker reaps
        assert time.monotonic() < deadline
        time.sleep(0.1)
    second = wait_running(c, job_id)
    assert second != first
    kill_worker(c, second)
    assert all(p.poll() is not None for p in c.procs)  # every worker is dead now
    deadline = time.monotonic() + HANG_S
    while True:  # no worker left: the API's reaper (this call) hands it to RQ's failure handling
        protocol.reap_abandoned(c.conn)
        state = c.queue.lookup(job_id, with_partial=False)
        if state.status != "running" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert state.status == "failed"
    assert "stopped unexpectedly" in state.error and "retried once" in state.error
    again = c.queue.submit("analysis", job_id, req.normalised())  # not the input's fault: try again
    assert again.status == "queued"
    state = c.queue.lookup(job_id)
    assert state.status == "queued" and "no worker is running" in state.message
