"""Jobs that are sums of parts: split, fan out on the queue, join in a final merge job (RQ 2.x).

A long job (a corpus over many texts, every head's ablation) is cut into parts of items; each part is
one RQ job that any worker on any machine may take, and one merge job ``depends_on`` all of them (RQ's
fan-out/join, not a scheduler of our own). docs/scaling.md. Its Redis keys (``workers.queue.keys``:
``hs:split:{id}``, ``hs:parts:{id}``, ``hs:parts-done:{id}``, ...; ``{id}`` is the whole job's id,
the request hash the API knows) hold the plan, which the API's status of the job reads
(``status``), each part's partial result in its own slot (a retried part overwrites its own slot,
so nothing is counted twice), the items each part has done, its attempts, and the first part that
failed for good. Once the API sets ``hs:cancel:{id}``, parts not yet started skip, running ones
stop between batches, and no slot is written (checked atomically).

Each part runs at most ``ATTEMPTS`` times (RQ ``Retry``; a worker killed mid-part counts as one); a
part failing its last attempt records its reason, and the merge job (which runs even when parts
failed) fails the whole job with that reason. A part failing on the user's input (``HeadscopeError``)
fails the job at once: the same input fails the same way. The merge reads the slots one at a time in
index order, so the result does not depend on which worker ran what and its memory does not grow with
the number of parts.

Part and merge functions are importable dotted paths: ``part(payload: dict, ctx: PartContext) -> dict``
and ``merge(partials: Partials, context: dict) -> dict``.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from redis import Redis
from rq import Queue, Retry, get_current_job
from rq.job import Dependency, Job

from workers.core.errors import CancelledError, HeadscopeError
from workers.core.jsonable import dumps
from workers.queue import keys as protocol

logger = logging.getLogger(__name__)
ATTEMPTS = 2  # a part that fails twice fails the job
KEY_TTL_S = 7 * 24 * 3600
ALIVE = ("queued", "deferred", "scheduled", "started")

# write a hash field only while the job is not cancelled (one round trip, atomic in Redis)
_HSET_UNLESS = """
if redis.call('exists', KEYS[1]) == 1 then return 0 end
redis.call('hset', KEYS[2], ARGV[1], ARGV[2])
redis.call('expire', KEYS[2], ARGV[3])
return 1
"""


def part_id(job_id: str, index: int) -> str:
    return f"{job_id}-part-{index}"


def merge_id(job_id: str) -> str:
    return f"{job_id}-merge"


def split(
    n_items: int, *, part_items: int, min_items: int, max_parts: int | None = None
) -> list[tuple[int, int]]:
    """Half-open ranges ``[start, stop)`` covering ``range(n_items)``; one range when ``n_items < min_items``.
    Parts hold ``part_items`` items, more when that would make over ``max_parts`` parts.

    >>> split(5, part_items=2, min_items=3)
    [(0, 2), (2, 4), (4, 5)]
    """
    if max_parts:
        part_items = max(part_items, math.ceil(n_items / max_parts))
    if n_items < min_items or n_items <= part_items:
        return [(0, n_items)]
    return [(start, min(start + part_items, n_items)) for start in range(0, n_items, part_items)]


def _resolve(path: str) -> Callable[..., Any]:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _hset_unless_cancelled(
    conn: Redis, job_id: str, key: str, field: str, value: str | bytes
) -> bool:
    return bool(
        conn.eval(_HSET_UNLESS, 2, protocol.cancel_key(job_id), key, field, value, KEY_TTL_S)
    )


# ------------------------------------------------------------------------------------ fan out


@dataclass(frozen=True)
class Split:
    """What a coordinating job returns once it handed its work to parts: the merge job stores the result."""

    merge: str
    n_parts: int


def plan(conn: Redis, job_id: str) -> dict[str, Any] | None:
    """The split plan of ``job_id`` (``hs:split:{id}``), or None for a job that was not split."""
    raw = conn.get(protocol.split_key(job_id))
    return json.loads(raw) if raw else None


def fan_out(
    conn: Redis,
    *,
    job_id: str,
    part: str,
    merge: str,
    payloads: list[dict[str, Any]],
    sizes: list[int] | None = None,
    unit: str = "items",
    context: dict[str, Any] | None = None,
    queue: str = protocol.QUEUE,
    job_timeout: int | None = None,
    owned_keys: list[str] | None = None,
) -> Job:
    """Enqueue one job per payload (ids ``{job_id}-part-{i}``) and the merge job ``{job_id}-merge``
    after them all; record the plan. ``sizes``: items per part (progress); default 1 each.
    ``owned_keys``: more Redis keys of this split (the job's other sections) that go with its slots.

    Idempotent for a retried coordinator: when the plan exists and its merge job is still waiting or
    running, nothing is enqueued again."""
    old = plan(conn, job_id)
    if old is not None:
        current = protocol.fetch_job(conn, old["merge"])
        if current is not None and _status(current) in ALIVE:
            return current
    q = Queue(queue, connection=conn, serializer=protocol.SERIALIZER)
    conn.delete(
        protocol.parts_key(job_id),
        protocol.tries_key(job_id),
        protocol.failed_key(job_id),
        protocol.done_key(job_id),
    )
    sizes = list(sizes) if sizes is not None else [1] * len(payloads)
    datas = [
        Queue.prepare_data(
            run_part,
            kwargs={"job_id": job_id, "index": i, "part": part, "payload": p},
            job_id=part_id(job_id, i),
            retry=Retry(max=ATTEMPTS - 1),
            timeout=job_timeout,
            result_ttl=KEY_TTL_S,
            failure_ttl=KEY_TTL_S,
            description=f"part {i} of {job_id}",
        )
        for i, p in enumerate(payloads)
    ]
    with conn.pipeline() as pipe:
        jobs = q.enqueue_many(datas, pipeline=pipe)
        pipe.execute()
    merge_job = q.enqueue(
        run_merge,
        kwargs={
            "job_id": job_id,
            "merge": merge,
            "n_parts": len(payloads),
            "context": context or {},
        },
        job_id=merge_id(job_id),
        depends_on=Dependency(jobs=jobs, allow_failure=True),
        retry=Retry(max=1),
        timeout=job_timeout,
        result_ttl=KEY_TTL_S,
        failure_ttl=KEY_TTL_S,
        description=f"merge of {job_id}",
    )
    record = {
        "merge": merge_id(job_id),
        "n_parts": len(payloads),
        "n_items": int(sum(sizes)),
        "sizes": sizes,
        "unit": unit,
        "started": time.time(),
        "keys": list(owned_keys or []),
    }
    conn.set(protocol.split_key(job_id), dumps(record), ex=KEY_TTL_S)
    return merge_job


def _status(job: Job) -> str:
    status = job.get_status(refresh=False)
    return str(getattr(status, "value", status))


# ------------------------------------------------------------------------------------- a part


@dataclass
class PartContext:
    """What a part function may ask of the queue: report its progress, look for a cancel."""

    conn: Redis
    job_id: str
    index: int
    attempt: int

    def items(self, done: int) -> None:
        """Items of this part done so far (the job's progress and rate); ignored once cancelled."""
        _hset_unless_cancelled(
            self.conn, self.job_id, protocol.done_key(self.job_id), str(self.index), str(int(done))
        )

    def cancelled(self) -> bool:
        """True once the whole job is cancelled or another part failed for good: stop now."""
        return bool(
            self.conn.exists(protocol.cancel_key(self.job_id), protocol.failed_key(self.job_id))
        )


def _fail(conn: Redis, job_id: str, index: int, exc: BaseException, *, code: str | None) -> None:
    reason = {"reason": f"part {index} failed: {exc}", "code": code}
    conn.set(protocol.failed_key(job_id), dumps(reason), nx=True, ex=KEY_TTL_S)


def run_part(*, job_id: str, index: int, part: str, payload: dict[str, Any]) -> dict[str, Any]:
    """RQ job: one part. Skipped once the whole job is cancelled or failed; its result goes to its slot."""
    job = get_current_job()
    assert job is not None
    conn: Redis = job.connection
    if conn.exists(protocol.cancel_key(job_id), protocol.failed_key(job_id)):
        return {"skipped": True}
    attempt = conn.hincrby(protocol.tries_key(job_id), str(index), 1)
    conn.expire(protocol.tries_key(job_id), KEY_TTL_S)
    ctx = PartContext(conn, job_id, index, int(attempt))
    ctx.items(0)  # a retried part counts its items again from 0
    try:
        partial = _resolve(part)(payload, ctx)
    except CancelledError:
        conn.hdel(protocol.done_key(job_id), str(index))
        return {"skipped": True}
    except HeadscopeError as exc:  # the input: a retry fails the same way
        _fail(conn, job_id, index, exc, code=exc.code)
        return {"failed": str(exc)}
    except Exception as exc:
        if attempt >= ATTEMPTS:
            _fail(conn, job_id, index, exc, code=None)
        raise
    slot = zlib.compress(json.dumps(partial).encode(), 1)  # a corpus part's top-pair contexts: ~7x
    if not _hset_unless_cancelled(conn, job_id, protocol.parts_key(job_id), str(index), slot):
        conn.hdel(protocol.done_key(job_id), str(index))
        return {"skipped": True}  # cancelled while running: leave no slot behind
    return {"part": index}


# ----------------------------------------------------------------------------------- progress


def status(conn: Redis, job_id: str, split_plan: dict[str, Any] | None = None) -> tuple[float, str]:
    """(fraction done, a line for the status bar) of a split job: parts done and running, items
    done and their rate since the split."""
    p = split_plan or plan(conn, job_id)
    if p is None:
        return 0.0, ""
    n, unit = int(p["n_parts"]), str(p.get("unit", "items"))
    with conn.pipeline() as pipe:
        pipe.hkeys(protocol.parts_key(job_id))
        pipe.hgetall(protocol.done_key(job_id))
        slots, done_raw = pipe.execute()
    finished = {int(protocol.text(k)) for k in slots}
    done = {int(protocol.text(k)): int(v) for k, v in done_raw.items()}
    sizes = p.get("sizes") or [1] * n
    items = sum(sizes[i] if i in finished else min(done.get(i, 0), sizes[i]) for i in range(n))
    running = len(set(done) - finished)
    total = max(int(p.get("n_items", n)), 1)
    elapsed = max(time.time() - float(p["started"]), 1e-9)
    line = f"parts {len(finished)}/{n} done, {running} running; {items:,}/{total:,} {unit}, {items / elapsed:.1f} {unit}/s"
    if len(finished) == n:
        line = f"merging {n} parts; {total:,} {unit}, {total / elapsed:.1f} {unit}/s"
    return min(items / total, 1.0) * 0.99, line  # the last 1 %: the merge


def progress(conn: Redis, job_id: str, n_parts: int) -> float:
    """Fraction of parts done (their slots written)."""
    return conn.hlen(protocol.parts_key(job_id)) / max(n_parts, 1)


# ----------------------------------------------------------------------------- cancel, clear


def clear(conn: Redis, job_id: str) -> None:
    """Remove every partial of ``job_id`` (cancel, failure, or after the merge), its owned keys too."""
    p = plan(conn, job_id)
    conn.delete(
        protocol.parts_key(job_id),
        protocol.tries_key(job_id),
        protocol.done_key(job_id),
        protocol.failed_key(job_id),
        *((p or {}).get("keys") or []),
    )


def cancel(conn: Redis, job_id: str, n_parts: int | None = None) -> None:
    """Stop every part of ``job_id``: parts not started skip, running ones stop between batches and
    write nothing (``_HSET_UNLESS``); the merge job is cancelled; no slot is left."""
    conn.set(protocol.cancel_key(job_id), 1, ex=KEY_TTL_S)
    if n_parts is None:
        p = plan(conn, job_id)
        n_parts = int(p["n_parts"]) if p else 0
    for jid in [merge_id(job_id), *(part_id(job_id, i) for i in range(n_parts))]:
        job = protocol.fetch_job(conn, jid)
        if job is not None and _status(job) in ("queued", "deferred", "scheduled"):
            try:
                job.cancel()
            except Exception:
                logger.debug("could not cancel %s", jid, exc_info=True)
    clear(conn, job_id)


def forget(conn: Redis, job_id: str) -> None:
    """Before ``job_id`` is submitted again: drop its old plan, part and merge jobs and partials."""
    p = plan(conn, job_id)
    if p is None:
        return
    for jid in [str(p["merge"]), *(part_id(job_id, i) for i in range(int(p["n_parts"])))]:
        job = protocol.fetch_job(conn, jid)
        if job is not None and _status(job) not in ("started",):
            job.delete(remove_from_queue=True)
    clear(conn, job_id)
    conn.delete(protocol.split_key(job_id))


# -------------------------------------------------------------------------------------- merge


class PartFailed(RuntimeError):
    """A part failed its last attempt (the message is the part's reason)."""


class Partials:
    """The parts' partial results in index order, read from Redis one at a time (``len``, iteration,
    indexing): a merge holds one partial at a time, however many parts there are."""

    def __init__(self, conn: Redis, job_id: str, n_parts: int):
        self.conn, self.job_id, self.n = conn, job_id, n_parts

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        if not 0 <= i < self.n:
            raise IndexError(i)
        raw = self.conn.hget(protocol.parts_key(self.job_id), str(i))
        if raw is None:
            raise PartFailed(f"part {i} left no result")
        return json.loads(zlib.decompress(raw))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[i] for i in range(self.n))


def _missing_reason(conn: Redis, job_id: str, index: int) -> str:
    """Why part ``index`` left no slot: its RQ failure (a worker that died twice, a timeout)."""
    job = protocol.fetch_job(conn, part_id(job_id, index))
    if job is None:
        return f"part {index} left no result (its job is gone)"
    result = job.latest_result()
    exc = (getattr(result, "exc_string", None) or "").strip()
    if "AbandonedJobError" in exc or job.meta.get("abandoned_by"):
        return (
            f"part {index} failed: the worker computing it stopped unexpectedly (killed, crashed or out of "
            f"memory), {int(job.meta.get('abandoned_count', 1))} time(s)"
        )
    if "JobTimeoutException" in exc:
        return f"part {index} failed: it ran longer than its {job.timeout} s limit, twice"
    last = exc.splitlines()[-1] if exc else f"status {_status(job)}"
    return f"part {index} failed: {last[:300]}"


def run_merge(*, job_id: str, merge: str, n_parts: int, context: dict[str, Any]) -> dict[str, Any]:
    """RQ job after all parts: fail with a part's reason, or merge the slots in index order.

    A part that failed on the input ends this job with ``meta["error"]`` (the user's to fix, as a
    single job does), any other part's failure with ``meta["part_error"]`` (the API reads both). A
    worker killed while merging: the job is retried (``Retry``) and the slots are still there.
    """
    job = get_current_job()
    assert job is not None
    conn: Redis = job.connection
    try:
        outcome = _merge_or_fail(
            job, conn, job_id=job_id, merge=merge, n_parts=n_parts, context=context
        )
    except BaseException:
        if job.retries_left:  # retried: the slots stay for the next attempt
            raise
        clear(conn, job_id)
        raise
    clear(conn, job_id)
    return outcome


def _merge_or_fail(
    job: Job, conn: Redis, *, job_id: str, merge: str, n_parts: int, context: dict[str, Any]
) -> dict[str, Any]:
    if conn.exists(protocol.cancel_key(job_id)):
        return {"cancelled": True}
    raw = conn.get(protocol.failed_key(job_id))
    if raw is None:
        names = {protocol.text(k) for k in conn.hkeys(protocol.parts_key(job_id))}
        missing = [i for i in range(n_parts) if str(i) not in names]
        if missing:
            raw = dumps({"reason": _missing_reason(conn, job_id, missing[0]), "code": None})
    if raw is not None:
        failed = json.loads(raw)
        if failed.get("code"):
            job.meta.update(error=failed["reason"], error_code=failed["code"], message="failed")
        else:
            job.meta.update(part_error=failed["reason"], message="failed")
        job.save_meta()
        return {"failed": failed["reason"]}
    return _resolve(merge)(Partials(conn, job_id, n_parts), context)
