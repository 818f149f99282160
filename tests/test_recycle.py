"""workers/queue/recycle.py: a worker's heap frozen once it is ready, so each job's collection skips what the
worker holds for good (docs/scaling.md: ~0.3 s a job, with torch and MiniLM), and still frees what a job
leaves behind; a model released is freed though it was frozen. In-process RQ worker, real Redis."""

from __future__ import annotations

import gc
import weakref

import pytest
import recycle_toys
from redis import Redis

from workers.models.loader import load_model, release_model
from workers.queue import keys as protocol
from workers.queue.recycle import SETTLE_OBJECTS, RecyclingWorker, settle

QUEUE = "hs-test-recycle-gc"


@pytest.fixture
def conn(redis_server):
    c = Redis.from_url(redis_server)
    c.delete(f"rq:queue:{QUEUE}")
    recycle_toys.reset()
    yield c
    gc.unfreeze()  # the rest of the test session collects as usual
    recycle_toys.reset()


def _worker(conn: Redis) -> tuple[RecyclingWorker, object]:
    q = protocol.queue(conn, QUEUE)
    return RecyclingWorker([q], connection=conn, serializer=protocol.SERIALIZER), q


def test_a_ready_worker_skips_what_it_holds_and_still_frees_each_jobs_cycles(conn):
    worker, q = _worker(conn)
    worker.settle()
    frozen = gc.get_freeze_count()
    assert frozen > 100_000  # torch, transformers, the test session: out of every later collection
    assert len(gc.get_objects()) < SETTLE_OBJECTS  # what a job's collection still walks
    for _ in range(3):
        q.enqueue_call("recycle_toys.make_cycle")
    worker.work(burst=True, with_scheduler=False)
    assert recycle_toys.alive() == 0  # the jobs' cyclic garbage was collected
    assert gc.get_freeze_count() > frozen - 1000  # the held objects stayed frozen between jobs
    assert len(gc.get_objects()) < SETTLE_OBJECTS

    q.enqueue_call(
        "recycle_toys.hold", kwargs={"n": 2 * SETTLE_OBJECTS}
    )  # a job that imports a lot
    worker.work(burst=True, with_scheduler=False)
    assert (
        gc.get_freeze_count() > frozen + 2 * SETTLE_OBJECTS - 1000
    )  # its survivors were frozen too
    assert len(gc.get_objects()) < SETTLE_OBJECTS


def test_a_job_that_changes_the_model_cache_settles_the_worker_again(conn, catalogue):
    release_model("tiny-bert")  # not cached: the job loads it
    recycle_toys.keep_cycle()  # held by the worker, frozen with the rest
    worker, q = _worker(conn)
    worker.settle()
    q.enqueue_call("recycle_toys.drop_kept")  # now garbage, but frozen: waits for the next settle
    worker.work(burst=True, with_scheduler=False)
    assert recycle_toys.alive() == 1
    recycle_toys.keep_cycle()
    q.enqueue_call("recycle_toys.drop_kept", kwargs={"load": "tiny-bert"})  # a model loaded: settle
    worker.work(burst=True, with_scheduler=False)
    assert recycle_toys.alive() == 0
    release_model("tiny-bert")


def test_a_released_model_is_freed_though_the_worker_froze_it(conn, catalogue):
    release_model("tiny-bert")
    loaded = load_model("tiny-bert", device="cpu")
    loaded.model.held_by = loaded  # a cycle: only the cyclic collector frees it
    model = weakref.ref(loaded.model)
    del loaded
    settle()  # as a worker does once ready: the cached model is frozen
    assert model() is not None
    release_model("tiny-bert")  # a comparison dropping its first model
    assert model() is None
