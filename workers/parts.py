"""Jobs that are sums of parts: split, fan out on the queue, join in a final merge job (RQ 2.x).

A long job (a corpus over many texts) is cut into parts of items; each part is one RQ job that any
worker on any machine may take, and one merge job ``depends_on`` all of them (RQ's fan-out/join, not a
scheduler of our own). Keys (``{id}`` is the whole job's id):

    ``hs:parts:{id}``        hash part index -> the part's partial result (JSON). A retried part
                             overwrites its own slot, so nothing is counted twice.
    ``hs:parts-tries:{id}``  hash part index -> attempts started
    ``hs:parts-failed:{id}`` the reason of the first part that failed its last attempt
    ``hs:cancel:{id}``       set by the API: parts not yet started return at once, the merge clears all

Each part runs at most ``ATTEMPTS`` times (RQ ``Retry``); a part failing its last attempt records its
reason and the merge job (which runs even when parts failed) fails the whole job with that reason.
The merge reads the slots in index order, so the result does not depend on which worker ran what.
Progress of the whole job is parts done / parts.

Part and merge functions are importable dotted paths: ``part(payload: dict) -> dict`` and
``merge(partials: list[dict], context: dict) -> dict``.
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Callable
from typing import Any

from redis import Redis
from rq import Queue, Retry, get_current_job
from rq.job import Dependency, Job

from workers import protocol

logger = logging.getLogger(__name__)
ATTEMPTS = 2  # a part that fails twice fails the job
KEY_TTL_S = 7 * 24 * 3600


def parts_key(job_id: str) -> str:
    return f"hs:parts:{job_id}"


def tries_key(job_id: str) -> str:
    return f"hs:parts-tries:{job_id}"


def failed_key(job_id: str) -> str:
    return f"hs:parts-failed:{job_id}"


def part_id(job_id: str, index: int) -> str:
    return f"{job_id}-part-{index}"


def split(n_items: int, *, part_items: int, min_items: int) -> list[tuple[int, int]]:
    """Half-open ranges ``[start, stop)`` covering ``range(n_items)``; one range when ``n_items < min_items``.

    >>> split(5, part_items=2, min_items=3)
    [(0, 2), (2, 4), (4, 5)]
    """
    if n_items < min_items or n_items <= part_items:
        return [(0, n_items)]
    return [(start, min(start + part_items, n_items)) for start in range(0, n_items, part_items)]


def _resolve(path: str) -> Callable[..., Any]:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def fan_out(conn: Redis, *, job_id: str, part: str, merge: str, payloads: list[dict[str, Any]],
            context: dict[str, Any] | None = None, queue: str = protocol.QUEUE,
            job_timeout: int | None = None) -> Job:
    """Enqueue one job per payload (ids ``{job_id}-part-{i}``) and the merge job ``job_id`` after them all."""
    q = Queue(queue, connection=conn, serializer=protocol.SERIALIZER)
    for key in (parts_key(job_id), tries_key(job_id), failed_key(job_id)):
        conn.delete(key)
    datas = [
        Queue.prepare_data(run_part, kwargs={"job_id": job_id, "index": i, "part": part, "payload": p},
                           job_id=part_id(job_id, i), retry=Retry(max=ATTEMPTS - 1), timeout=job_timeout,
                           result_ttl=KEY_TTL_S)
        for i, p in enumerate(payloads)
    ]
    with conn.pipeline() as pipe:
        jobs = q.enqueue_many(datas, pipeline=pipe)
        pipe.execute()
    return q.enqueue(run_merge, kwargs={"job_id": job_id, "merge": merge, "n_parts": len(payloads),
                                        "context": context or {}},
                     job_id=job_id, depends_on=Dependency(jobs=jobs, allow_failure=True), timeout=job_timeout,
                     result_ttl=KEY_TTL_S)


def run_part(*, job_id: str, index: int, part: str, payload: dict[str, Any]) -> dict[str, Any]:
    """RQ job: one part. Skipped once the whole job is cancelled or failed; its result goes to its slot."""
    job = get_current_job()
    assert job is not None
    conn: Redis = job.connection
    if conn.exists(protocol.cancel_key(job_id)) or conn.exists(failed_key(job_id)):
        return {"skipped": True}
    attempt = conn.hincrby(tries_key(job_id), str(index), 1)
    conn.expire(tries_key(job_id), KEY_TTL_S)
    try:
        partial = _resolve(part)(payload)
    except Exception as exc:
        if attempt >= ATTEMPTS:
            conn.set(failed_key(job_id), f"part {index} failed: {exc}", nx=True, ex=KEY_TTL_S)
        raise
    if conn.exists(protocol.cancel_key(job_id)):
        return {"skipped": True}  # cancelled while running: leave no slot behind
    conn.hset(parts_key(job_id), str(index), json.dumps(partial))
    conn.expire(parts_key(job_id), KEY_TTL_S)
    return {"part": index}


def progress(conn: Redis, job_id: str, n_parts: int) -> float:
    """Fraction of parts done (their slots written)."""
    return conn.hlen(parts_key(job_id)) / max(n_parts, 1)


def clear(conn: Redis, job_id: str) -> None:
    """Remove every partial of ``job_id`` (cancel, failure, or after the merge)."""
    conn.delete(parts_key(job_id), tries_key(job_id))


def cancel(conn: Redis, job_id: str, n_parts: int) -> None:
    """Stop every part of ``job_id``: parts not started skip, running ones drop their slot; nothing is left."""
    conn.set(protocol.cancel_key(job_id), 1, ex=KEY_TTL_S)
    for i in range(n_parts):
        try:
            Job.fetch(part_id(job_id, i), connection=conn, serializer=protocol.SERIALIZER).cancel()
        except Exception:  # noqa: BLE001 - already finished or gone: nothing to stop
            pass
    clear(conn, job_id)


class PartFailed(RuntimeError):
    """A part failed its last attempt (the message is the part's reason)."""


def run_merge(*, job_id: str, merge: str, n_parts: int, context: dict[str, Any]) -> dict[str, Any]:
    """RQ job after all parts: fail with a part's reason, or merge the slots in index order."""
    job = get_current_job()
    assert job is not None
    conn: Redis = job.connection
    try:
        if conn.exists(protocol.cancel_key(job_id)):
            return {"cancelled": True}
        reason = conn.get(failed_key(job_id))
        if reason is not None:
            raise PartFailed(reason.decode() if isinstance(reason, bytes) else str(reason))
        slots = conn.hgetall(parts_key(job_id))
        missing = [i for i in range(n_parts) if str(i).encode() not in slots and str(i) not in slots]
        if missing:
            raise PartFailed(f"parts {missing} left no result")
        partials = [json.loads(slots.get(str(i).encode(), slots.get(str(i)))) for i in range(n_parts)]
        return _resolve(merge)(partials, context)
    finally:
        clear(conn, job_id)
