"""Every Redis key of headscope, and what the API and the workers agree on in Redis: queue names,
liveness and the reaper.

Not part of the analysis core (it imports redis and rq); the backend and the queue service
(``workers.queue``) use it. Jobs travel with RQ's JSON serializer, so nothing in Redis is a pickle.
The key strings are a contract with stored data and running services: they never change.

Keys (``{id}`` is a job id: the request hash, or ``ck-...`` for a checkpoint inspection):
    ``hs:request:{id}``      the normalised request (JSON), written at enqueue
    ``hs:partial:{id}``      hash kind -> section JSON, written as sections finish
    ``hs:result:{id}``       a finished result the worker could not write to the store (the API
                             moves it there), or an inspection's result (JSON)
    ``hs:computed:{id}``     how many times a worker started computing it (dedup checks)
    ``hs:claim:{id}``        held by the API while it enqueues the job (concurrent submissions)
    ``hs:cancel:{id}``       set by the API: a running job stops at its next step (docs/api.md)
    ``hs:worker:{name}``     a live worker's heartbeat (expires after ``worker_ttl_s``)
    ``hs:demos``             the demo checkpoints a worker found (JSON list)
    ``hs:device-lost``       the last device losses (a worker that ended itself after a sticky GPU
                             error: JSON {worker, host, at, why}, newest first, at most 20)
    ``hs:reaper-lock``       held by the process reaping abandoned jobs
    ``hs:rate:{client}:{window}``  writes of one client in one rate-limit window
                             (``backend/ratelimit.py``)

A job split into parts (``workers.queue.parts``, docs/scaling.md), ``{id}`` the whole job's id:
    ``hs:split:{id}``        the plan: merge job id, parts, items, unit, start time (JSON)
    ``hs:parts:{id}``        hash part index -> the part's partial result (zlib-compressed JSON)
    ``hs:parts-done:{id}``   hash part index -> items the part has done so far
    ``hs:parts-tries:{id}``  hash part index -> attempts started
    ``hs:parts-failed:{id}`` the first part that failed for good: JSON {reason, code}
    ``hs:split-base:{id}``   a split analysis job's other sections, for its merge
                             (``workers.queue.section_split``)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from redis import Redis
from rq import Queue
from rq.exceptions import NoSuchJobError
from rq.executions import Execution
from rq.job import Job
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer
from rq.utils import parse_composite_key

from workers.core.jsonable import dumps

logger = logging.getLogger(__name__)

QUEUE = "headscope"  # analyses
SHORT_QUEUE = (
    "headscope-short"  # short jobs (PE analyses, one head): served by short-job workers too
)
QUEUES = (SHORT_QUEUE, QUEUE)  # the order workers listen in
SHORT_QUEUES = (SHORT_QUEUE,)  # what a short-job worker listens to


def is_short(kind: str, request: dict[str, Any]) -> bool:
    """A job that takes seconds at most: a PE analysis, or analyses whose specs call this request
    short (``AnalysisSpec.short``: max attention, one head's t-SNE)."""
    if kind == "pe":
        return True
    if kind != "analysis":
        return False
    from workers.core import registry

    kinds = list(request.get("analyses") or ())
    opts = request.get("options") or {}
    if not kinds or any(k not in registry.kinds() for k in kinds):
        return False
    specs = [registry.get(k) for k in kinds]
    return all(s.short is not None and s.short(s.options_of(opts)) for s in specs)


SERIALIZER = JSONSerializer


def _key(prefix: str) -> Callable[[str], str]:
    """The builder of the keys ``{prefix}:{id}`` (``id``: a job id, or a worker's name)."""

    def key(ident: str) -> str:
        return f"{prefix}:{ident}"

    return key


# the key table (what each key holds: the module's docstring)
request_key = _key("hs:request")
partial_key = _key("hs:partial")
result_key = _key("hs:result")
computed_key = _key("hs:computed")
claim_key = _key("hs:claim")
cancel_key = _key("hs:cancel")
worker_key = _key("hs:worker")
split_key = _key("hs:split")
parts_key = _key("hs:parts")
done_key = _key("hs:parts-done")
tries_key = _key("hs:parts-tries")
failed_key = _key("hs:parts-failed")
split_base_key = _key("hs:split-base")
DEMOS_KEY = "hs:demos"
DEVICE_LOST_KEY = "hs:device-lost"
REAPER_LOCK = "hs:reaper-lock"


def rate_key(address: str, window: int) -> str:
    """Writes of the client at ``address`` in rate-limit window ``window`` (the address hashed)."""
    return f"hs:rate:{hashlib.sha256(address.encode()).hexdigest()[:20]}:{window}"


def note_device_lost(
    conn: Redis, name: str, why: str, *, keep: int = 20, ttl_s: int = 7 * 86400
) -> None:
    """Record that worker ``name`` lost its device (``/api/health`` lists the last ones)."""
    entry = dumps({"worker": name, "host": socket.gethostname(), "at": time.time(), "why": why})
    with conn.pipeline() as pipe:
        pipe.lpush(DEVICE_LOST_KEY, entry)
        pipe.ltrim(DEVICE_LOST_KEY, 0, keep - 1)
        pipe.expire(DEVICE_LOST_KEY, ttl_s)
        pipe.execute()


def device_losses(conn: Redis) -> list[dict[str, Any]]:
    """The recorded device losses, newest first."""
    return [json.loads(raw) for raw in conn.lrange(DEVICE_LOST_KEY, 0, -1)]


def text(value: Any) -> str:
    """A Redis reply (bytes on our connections) as str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def queue(conn: Redis, name: str = QUEUE, *, default_timeout: int | None = None) -> Queue:
    """An RQ queue on ``conn`` with the JSON serializer."""
    return Queue(name, connection=conn, serializer=SERIALIZER, default_timeout=default_timeout)


def fetch_job(conn: Redis, job_id: str) -> Job | None:
    """The RQ job ``job_id``, or None."""
    try:
        return Job.fetch(job_id, connection=conn, serializer=SERIALIZER)
    except NoSuchJobError:
        return None


# ------------------------------------------------------------------------------------ liveness


def new_worker_name() -> str:
    """host.pid.random: unique, and says where to look when something goes wrong."""
    return f"{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:6]}"


def beat(conn: Redis, name: str, *, ttl_s: float, info: dict[str, Any]) -> None:
    """Mark worker ``name`` alive for ``ttl_s`` seconds."""
    conn.set(worker_key(name), dumps({**info, "beat": time.time()}), px=int(ttl_s * 1000))


def live_workers(conn: Redis) -> dict[str, dict[str, Any]]:
    """Name -> info of every worker whose heartbeat has not expired."""
    keys = list(conn.scan_iter(match=worker_key("*"), count=500))
    if not keys:
        return {}
    out = {}
    for key, raw in zip(keys, conn.mget(keys), strict=True):
        if raw is not None:
            name = (key.decode() if isinstance(key, bytes) else key).split(":", 2)[2]
            out[name] = json.loads(raw)
    return out


def reap_abandoned(
    conn: Redis, *, queues: tuple[str, ...] = QUEUES, grace_s: float = 2.0
) -> list[str]:
    """Hand jobs whose worker died to RQ's abandoned-job handling; return their ids.

    A started job whose worker has no live heartbeat is moved to the front of its registry's expiry
    and the registry cleaned: RQ re-queues it while it has retries left (``Retry(max=1)``) and fails
    it as abandoned otherwise. Without this, RQ notices only after job timeout + 60 s.
    """
    token = uuid.uuid4().hex
    if not conn.set(REAPER_LOCK, token, nx=True, px=2000):
        return []  # another process is reaping right now
    reaped: list[str] = []
    try:
        alive = set(live_workers(conn))
        now = datetime.now(timezone.utc)
        for name in queues:
            registry = StartedJobRegistry(name, connection=conn, serializer=SERIALIZER)
            expired = False
            for raw in conn.zrange(registry.key, 0, -1):
                member = text(raw)
                job_id, execution_id = parse_composite_key(member)
                job = fetch_job(conn, job_id)
                if job is None:
                    continue
                # this execution's worker and start: the job hash gets them only a moment after
                # the execution enters the registry (and still names the previous attempt's worker)
                owner, started = job.worker_name, job.started_at
                if execution_id:
                    try:
                        execution = Execution.fetch(execution_id, job_id, conn)
                    except ValueError:
                        continue  # the execution ended just now
                    owner, started = execution.worker_name or owner, execution.created_at
                if owner in alive:
                    continue
                if started is not None:
                    started = started if started.tzinfo else started.replace(tzinfo=timezone.utc)
                    if (now - started).total_seconds() < grace_s:
                        continue  # just started: its worker's first heartbeat may be in flight
                job.meta["abandoned_by"] = owner or "unknown"
                job.meta["abandoned_count"] = int(job.meta.get("abandoned_count", 0)) + 1
                job.save_meta()
                conn.zadd(registry.key, {member: 1})  # expired long ago: cleanup() takes it
                expired = True
                reaped.append(job_id)
                logger.warning(
                    "job %s: worker %s is gone; handing it to retry/failure", job_id, owner
                )
            if expired:
                registry.cleanup()
    finally:
        if conn.get(REAPER_LOCK) in (token, token.encode()):
            conn.delete(REAPER_LOCK)
    return reaped


class Ticker:
    """Call ``fn`` every ``interval_s`` seconds in a daemon thread until ``stop()``."""

    def __init__(self, fn: Callable[[], object], *, interval_s: float, name: str):
        self.fn = fn
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.fn()
            except Exception:  # keep ticking through a Redis restart
                logger.warning("%s failed", self._thread.name, exc_info=True)
            self._stop.wait(self.interval_s)

    def start(self) -> Ticker:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
