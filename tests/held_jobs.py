"""A job whose duration the test decides: it holds until the test releases it, then runs for real.

Used by the kill and timeout tests (tests/test_service_kill.py) instead of racing a computation
against a kill or a job timeout: a held job is running (progress > 0) for as long as the test
wants, on any machine, fast or slow. Workers import it by dotted path (``held_jobs.held_analysis``)
with ``tests/`` on their PYTHONPATH.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from rq import get_current_job
from rq.job import Job, JobStatus

from workers.core.jsonable import dumps
from workers.queue import jobs
from workers.queue import keys as protocol


def release_key(job_id: str) -> str:
    return f"hs-test:release:{job_id}"


def attempts_key(job_id: str) -> str:
    return f"hs-test:attempts:{job_id}"


def held_analysis(request: dict[str, Any]) -> dict[str, Any]:
    """Count the attempt, report progress, wait for ``release_key``, then ``run_analysis``."""
    job = get_current_job()
    assert job is not None
    conn = job.connection
    conn.incr(attempts_key(job.id))
    job.meta.update(progress=0.05, message="held by the test")
    job.save_meta()
    while not conn.exists(release_key(job.id)):
        time.sleep(0.02)  # a job timeout (SIGALRM) or SIGKILL ends this wait
    return jobs.run_analysis(request)


def start_running_job(
    redis: Any,
    request: dict[str, Any],
    *,
    sections: dict[str, Any] | None = None,
    progress: float = 0.2,
    message: str = "held by the test",
) -> str:
    """An analysis job made running by hand: an RQ job in the started state with its request and
    ``sections`` as partial result (what ``workers.queue.reporter.Reporter`` writes); no worker runs
    it, so nothing new arrives until the caller writes it. Returns the job id."""
    job_id = uuid.uuid4().hex
    redis.set(
        protocol.request_key(job_id),
        dumps({"kind": "analysis", "request": request}),
        ex=600,
    )
    job = Job.create(
        "held_jobs.noop",
        connection=redis,
        id=job_id,
        serializer=protocol.SERIALIZER,
        meta={"progress": progress, "message": message},
    )
    job.save()
    job.set_status(JobStatus.STARTED)
    if sections:
        redis.hset(
            protocol.partial_key(job_id),
            mapping={k: dumps(v) for k, v in sections.items()},
        )
    return job_id


def finish_running_job(redis: Any, job_id: str, result: dict[str, Any]) -> None:
    """``start_running_job``'s job finished, with ``result`` stored as a worker stores it."""
    redis.set(protocol.result_key(job_id), dumps(result), ex=600)
    Job.fetch(job_id, connection=redis, serializer=protocol.SERIALIZER).set_status(
        JobStatus.FINISHED
    )


def remove_running_job(redis: Any, job_id: str) -> None:
    """``start_running_job``'s job and everything written for it, gone."""
    Job.fetch(job_id, connection=redis, serializer=protocol.SERIALIZER).delete()
    redis.delete(
        protocol.partial_key(job_id), protocol.result_key(job_id), protocol.request_key(job_id)
    )


def noop() -> int:
    """A job that does nothing (worker recycling tests count jobs, not work)."""
    return 1


def layer_release_key(job_id: str, layer: int) -> str:
    return f"hs-test:release:{job_id}:L{layer}"


def hold_after_layers(
    publish: Callable[[dict[str, Any]], None], conn: Any, job_id: str
) -> Callable[[dict[str, Any]], None]:
    """``publish`` (``Reporter.partial``) that, after writing a layer of a grid section
    (``workers.core.partials``), holds until the test sets ``layer_release_key``: the test sees the
    gallery with exactly the layers it let through, on any machine."""
    from workers.core.partials import parse_part_key

    def held(fields: dict[str, Any]) -> None:
        publish(fields)
        for key in fields:
            parsed = parse_part_key(key)
            if parsed is not None:
                while not conn.exists(layer_release_key(job_id, parsed[1])):
                    time.sleep(0.02)

    return held


# ------------------------------------------------------------------ parts of a split job (workers.queue.parts)


def parts_config_key(job_id: str) -> str:
    """JSON the test writes before submitting: ``barrier`` (hold every part until this many workers
    run parts), ``until_release`` (hold every part until the test sets ``release_key``), ``hold_part``
    (hold that part's first attempt after its first batch), ``fail_part`` (that part raises on every
    attempt)."""
    return f"hs-test:parts-config:{job_id}"


def part_log_key(job_id: str) -> str:
    """List of JSON {part, attempt, worker}: every attempt of every part, in start order."""
    return f"hs-test:part-log:{job_id}"


def held_part_key(job_id: str) -> str:
    """Set (to the worker's name) once the held part is held mid-part."""
    return f"hs-test:held-part:{job_id}"


def held_corpus(request: dict[str, Any]) -> dict[str, Any]:
    """``run_corpus`` whose parts run ``held_corpus_part``."""
    from workers.queue import jobs_corpus

    return jobs_corpus.run_corpus(request, part="held_jobs.held_corpus_part")


class _HeldContext:
    """A part's context whose ``cancelled()`` (asked before each batch) holds on its second call:
    the part is in its middle, one batch folded in and nothing written."""

    def __init__(self, ctx: Any, *, hold: bool, worker: str):
        self.ctx, self.hold, self.worker, self.calls = ctx, hold, worker, 0

    def items(self, done: int) -> None:
        self.ctx.items(done)

    def cancelled(self) -> bool:
        self.calls += 1
        if self.hold and self.calls == 2:
            conn, job_id = self.ctx.conn, self.ctx.job_id
            conn.set(held_part_key(job_id), self.worker, ex=600)
            while not conn.exists(release_key(job_id)):
                time.sleep(0.02)  # SIGKILL ends this wait
        return self.ctx.cancelled()


def _log_and_wait(ctx: Any) -> tuple[dict[str, Any], str]:
    """A held part's start: log the attempt, wait at the barrier (or until released); (config, worker)."""
    import json

    job = get_current_job()
    assert job is not None
    conn, job_id, index = ctx.conn, ctx.job_id, ctx.index
    worker = str(job.worker_name)
    conn.rpush(
        part_log_key(job_id), json.dumps({"part": index, "attempt": ctx.attempt, "worker": worker})
    )
    config = json.loads(conn.get(parts_config_key(job_id)) or "{}")
    workers_key = f"hs-test:part-workers:{job_id}"
    conn.sadd(workers_key, worker)
    barrier, until_release = int(config.get("barrier", 0)), bool(config.get("until_release"))
    while not conn.exists(release_key(job_id)) and (
        until_release or conn.scard(workers_key) < barrier
    ):
        time.sleep(0.02)
    return config, worker


def held_compare(request: dict[str, Any]) -> dict[str, Any]:
    """``run_compare`` whose parts run ``held_compare_part``."""
    from workers.queue import jobs_compare

    return jobs_compare.run_compare(request, part="held_jobs.held_compare_part")


def held_compare_part(payload: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """``compare_part`` after the test's hooks: log the attempt, wait at the barrier, fail or hold where
    the test says (``hold_part``: before that part's second batch, model A's texts run, B's not)."""
    from workers.queue import jobs_compare

    config, worker = _log_and_wait(ctx)
    if config.get("fail_part") == ctx.index:
        raise RuntimeError(f"part {ctx.index} broke on purpose (attempt {ctx.attempt})")
    hold = config.get("hold_part") == ctx.index and ctx.attempt == 1
    return jobs_compare.compare_part(payload, _HeldContext(ctx, hold=hold, worker=worker))


def held_corpus_part(payload: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """``corpus_part`` with the test's hooks (``parts_config_key``): log the attempt, wait at the
    barrier, hold or fail where the test says."""
    from workers.queue import jobs_corpus

    config, worker = _log_and_wait(ctx)
    index = ctx.index
    if config.get("fail_part") == index:
        raise RuntimeError(f"part {index} broke on purpose (attempt {ctx.attempt})")
    hold = config.get("hold_part") == index and ctx.attempt == 1
    return jobs_corpus.corpus_part(payload, _HeldContext(ctx, hold=hold, worker=worker))
