"""Enqueue jobs once per request hash and report their status (API side; no torch).

``submit`` is idempotent: identical requests share one job id, so they share one job and one
result. A Redis claim (``SET NX``, released after the enqueue) plus a second look under the claim
make concurrent identical submissions enqueue once.
``lookup`` merges the places a job's state can be: the store (durable: the result, and the
request's fingerprint), Redis' result and partial keys, and the RQ job (queued / started / failed
and why).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from redis import Redis
from rq import Retry

from backend.config import Settings
from backend.store import Store
from workers.core.errors import CancelledError
from workers.core.ids import JOB_ID
from workers.core.jsonable import dumps
from workers.queue import keys as protocol
from workers.queue import parts

logger = logging.getLogger(__name__)

FUNCS = {
    "analysis": "workers.queue.jobs.run_analysis",
    "pe": "workers.queue.jobs.run_pe_analysis",
    "corpus": "workers.queue.jobs_corpus.run_corpus",
    "corpus-joint": "workers.queue.jobs_corpus.run_corpus_joint",
    "compare": "workers.queue.jobs_compare.run_compare",
}
CLAIM_S = 10  # a claim's lifetime if its holder dies before releasing it
FINISHED_JOB_TTL_S = 3600  # RQ's job hash after success (the result lives elsewhere)
FAILED_JOB_TTL_S = 86400


@dataclass
class Lookup:
    """Where a job stands. ``result_raw`` / ``request`` are set when known."""

    status: str  # queued | running | finished | failed
    kind: str = "analysis"
    progress: float = 0.0
    message: str = ""
    error: str | None = None
    user_error: bool = False  # the input is at fault: resubmitting gives the same error
    error_code: str | None = None  # the HeadscopeError's code when user_error
    partial_raw: dict[str, str] = field(
        default_factory=dict
    )  # key of the partial result -> its JSON text
    partial_keys: list[str] = field(default_factory=list)  # every key of the partial result so far
    result_raw: str | None = None
    request: dict[str, Any] | None = None
    sections: list[str] | None = (
        None  # every section of a stored result (docs/api.md), if kept apart
    )

    @property
    def partial(self) -> dict[str, Any]:
        """The partial result read (the keys in ``partial_raw``), parsed."""
        return {k: json.loads(v) for k, v in self.partial_raw.items()}


def failure_reason(job: Any) -> str:
    """A sentence for the user about why RQ marked ``job`` failed."""
    meta = job.meta or {}
    if meta.get("error"):
        return str(meta["error"])
    result = job.latest_result()
    exc = (getattr(result, "exc_string", None) or "").strip()
    if "JobTimeoutException" in exc:
        return (
            f"the job ran longer than its {job.timeout} s limit, twice; ask for fewer heads, "
            "fewer restarts or a shorter text"
        )
    if "AbandonedJobError" in exc or meta.get("abandoned_by"):
        return (
            "the worker computing this stopped unexpectedly (killed, crashed or out of memory), "
            f"{int(meta.get('abandoned_count', 1))} time(s); it was retried once and did not finish"
        )
    last = exc.splitlines()[-1] if exc else "no details"
    return f"internal error in the worker: {last[:300]}"


class JobQueue:
    """Submit and look up jobs on one Redis, with results persisted to ``store``."""

    def __init__(self, conn: Redis, store: Store, settings: Settings):
        self.conn = conn
        self.store = store
        self.settings = settings

    # --------------------------------------------------------------------------------- look up

    def lookup(
        self,
        job_id: str,
        *,
        with_partial: bool | Collection[str] = True,
        with_result: bool = True,
        claim_counts: bool = True,
        sections: list[str] | None = None,
    ) -> Lookup | None:
        """The job's state, or None for an id never submitted (or long forgotten).

        ``with_partial``: True reads the whole partial result, a collection of keys only those keys
        (an empty one none: only ``partial_keys``), False nothing. The partial values stay JSON text
        (``partial_raw``): a running all-heads job's partial result is tens of MB.
        ``claim_counts``: a job being enqueued (claimed, not yet in RQ) reads as queued.
        ``sections``: of a finished result, only the small keys and these sections
        (``Store.read_result``); ``Lookup.sections`` names all it holds.
        """
        if _persistable(job_id):
            if not with_result:
                if self.store.has_result(job_id):
                    return Lookup(status="finished", progress=1.0, message="done")
            elif (stored := self.store.read_result(job_id, sections=sections)) is not None:
                meta, raw = stored
                return Lookup(
                    "finished", meta["kind"], 1.0, "done", result_raw=raw,
                    request=meta["request"], sections=meta["sections"],
                )  # fmt: skip
        # the job before the result key: a worker writes the result and then finishes the job, so
        # a job seen finished here has its result visible below (no transient "expired")
        job = protocol.fetch_job(self.conn, job_id)
        with self.conn.pipeline() as pipe:
            pipe.get(protocol.request_key(job_id))
            pipe.exists(protocol.result_key(job_id))
            names: list[str] = []
            if with_partial is True:
                pipe.hgetall(protocol.partial_key(job_id))
            elif with_partial is not False:
                names = list(dict.fromkeys(with_partial))
                pipe.hkeys(protocol.partial_key(job_id))
                if names:
                    pipe.hmget(protocol.partial_key(job_id), names)
            got = pipe.execute()
        req_raw, has_result = got[0], bool(got[1])
        envelope = json.loads(req_raw) if req_raw else {}
        kind, request = envelope.get("kind", "analysis"), envelope.get("request")
        if has_result:
            fresh = self.conn.get(protocol.result_key(job_id))
            if fresh is not None:
                raw_s = protocol.text(fresh)
                if _persistable(job_id) and request is not None:
                    self.store.write_result(job_id, kind=kind, request=request, result_raw=raw_s)
                    if sections is not None and (
                        kept := self.store.read_result(job_id, sections=sections)
                    ):  # the sections asked for, as the next reader gets them
                        return Lookup("finished", kind, 1.0, "done", result_raw=kept[1],
                                      request=request, sections=kept[0]["sections"])  # fmt: skip
                return Lookup("finished", kind, 1.0, "done", result_raw=raw_s, request=request)
        partial_raw: dict[str, str] = {}
        partial_keys: list[str] = []
        if with_partial is True:
            partial_raw = {protocol.text(k): protocol.text(v) for k, v in got[2].items()}
            partial_keys = sorted(partial_raw)
        elif with_partial is not False:
            partial_keys = sorted(protocol.text(k) for k in got[2])
            if names:
                partial_raw = {
                    k: protocol.text(v) for k, v in zip(names, got[3], strict=True) if v is not None
                }
        partial: dict[str, Any] = {"partial_raw": partial_raw, "partial_keys": partial_keys}
        split = parts.plan(self.conn, job_id)
        if (
            split is not None
        ):  # handed to its parts (docs/scaling.md): the merge job and the parts say
            before = float(((job.meta or {}) if job is not None else {}).get("progress", 0.0))
            return self._split_lookup(
                job_id, split, kind=kind, request=request, partial=partial, before=before
            )
        if job is None:
            if request is None and _persistable(job_id):  # Redis forgot it; the database did not
                seen = self.store.fingerprint(job_id)
                if seen is not None:
                    kind, request = seen["kind"], seen["request"]
            if request is None:
                return None
            if claim_counts and self.conn.exists(protocol.claim_key(job_id)):
                return Lookup("queued", kind, message="queued", request=request, **partial)
            return Lookup(
                "failed",
                kind,
                error="the job was lost (the queue was reset); submit it again",
                request=request,
                **partial,
            )
        meta = job.meta or {}
        status = job.get_status(refresh=False)
        status = getattr(status, "value", status)
        base = {"kind": kind, "request": request, **partial}
        progress, message = float(meta.get("progress", 0.0)), str(meta.get("message", ""))
        if meta.get("error"):  # the job ended on an input the user can fix, or was cancelled
            cancelled = meta.get("error_code") == "cancelled"  # submitting again runs it again
            return Lookup(
                "failed",
                progress=progress,
                message="cancelled" if cancelled else "failed",
                error=str(meta["error"]),
                user_error=not cancelled,
                error_code=meta.get("error_code"),
                **base,
            )
        if status in ("queued", "deferred", "scheduled"):
            message = (
                "queued (retrying)"
                if meta.get("abandoned_by") or job.retries_left == 0
                else "queued"
            )
            if not protocol.live_workers(self.conn):
                message += "; no worker is running at the moment"
            return Lookup("queued", progress=0.0, message=message, **base)
        if status == "started":
            return Lookup("running", progress=progress, message=message, **base)
        if status == "finished":  # finished without a result: the result expired
            return Lookup(
                "failed", error="the result has expired; submit the request again", **base
            )
        if status in ("stopped", "canceled"):
            return Lookup("failed", error="the job was cancelled", **base)
        return Lookup(
            "failed", progress=progress, message="failed", error=failure_reason(job), **base
        )

    def _split_lookup(
        self,
        job_id: str,
        split: dict[str, Any],
        *,
        kind: str,
        request: dict[str, Any] | None,
        partial: dict[str, Any],
        before: float = 0.0,
    ) -> Lookup:
        """Where a job split into parts stands: cancelled, failed (a part's reason), or its parts'
        progress (parts done, items/s) while they and the merge run. ``before``: the job's own
        progress when it handed its parts on; theirs goes on from there (one bar that never goes
        down, docs/service.md)."""
        base = {"kind": kind, "request": request, **partial}
        share, message = parts.status(self.conn, job_id, split)
        progress = before + (1.0 - before) * share
        if self.conn.exists(protocol.cancel_key(job_id)):
            what = {"analysis": "the analysis"}.get(
                kind, f"the {kind} job"
            )  # as the jobs' own CancelledError
            return Lookup(
                "failed",
                progress=progress,
                message="cancelled",
                error=str(CancelledError(what)),
                error_code="cancelled",
                **base,
            )
        merge = protocol.fetch_job(self.conn, str(split["merge"]))
        if merge is None:
            return Lookup(
                "failed", error="the job was lost (the queue was reset); submit it again", **base
            )
        meta = merge.meta or {}
        status = merge.get_status(refresh=False)
        status = getattr(status, "value", status)
        if meta.get("error"):  # a part (or the merge) failed on the input
            return Lookup(
                "failed",
                progress=progress,
                message="failed",
                error=str(meta["error"]),
                user_error=True,
                error_code=meta.get("error_code"),
                **base,
            )
        if status == "failed":
            return Lookup(
                "failed", progress=progress, message="failed", error=failure_reason(merge), **base
            )
        if status in ("stopped", "canceled"):
            return Lookup("failed", error="the job was cancelled", **base)
        if meta.get("part_error"):  # a part failed for good
            return Lookup(
                "failed", progress=progress, message="failed", error=str(meta["part_error"]), **base
            )
        if status == "finished":  # the merge stored the result just after this lookup first looked
            again = self._stored(job_id, kind=kind, request=request)
            if again is not None:
                return again
            return Lookup(
                "failed", error="the result has expired; submit the request again", **base
            )
        if status == "started":
            return Lookup(
                "running",
                progress=max(progress, float(meta.get("progress", 0.0))),
                message=str(meta.get("message") or message),
                **base,
            )
        started = self.conn.hlen(protocol.done_key(job_id)) + self.conn.hlen(
            protocol.parts_key(job_id)
        )
        if not started:
            message = f"queued: {split['n_parts']} parts of {split['n_items']:,} {split.get('unit', 'items')}"
            if not protocol.live_workers(self.conn):
                message += "; no worker is running at the moment"
            return Lookup("queued", message=message, **base)
        return Lookup("running", progress=progress, message=message, **base)

    def _stored(self, job_id: str, *, kind: str, request: dict[str, Any] | None) -> Lookup | None:
        """The finished result, from the store or Redis, or None."""
        if _persistable(job_id) and (stored := self.store.read_result(job_id)) is not None:
            meta, raw = stored
            return Lookup(
                "finished", meta["kind"], 1.0, "done", result_raw=raw, request=meta["request"]
            )
        fresh = self.conn.get(protocol.result_key(job_id))
        if fresh is not None:
            return Lookup(
                "finished", kind, 1.0, "done", result_raw=protocol.text(fresh), request=request
            )
        return None

    # ---------------------------------------------------------------------------------- submit

    def submit(self, kind: str, job_id: str, request: dict[str, Any]) -> Lookup:
        """Enqueue ``request`` under ``job_id`` unless that job is queued, running or done."""
        current = self.lookup(job_id, with_partial=False, with_result=False)
        if current is not None and (current.status != "failed" or current.user_error):
            return current
        claim = protocol.claim_key(job_id)
        if not self.conn.set(claim, "1", nx=True, ex=CLAIM_S):
            return Lookup("queued", kind, message="queued", request=request)  # being enqueued now
        try:
            # checked again under the claim: whoever held it before has finished enqueueing
            current = self.lookup(job_id, with_partial=False, with_result=False, claim_counts=False)
            if current is not None and (current.status != "failed" or current.user_error):
                return current
            old = protocol.fetch_job(self.conn, job_id)
            if old is not None:  # failed for a reason other than the input: try again
                old.delete(remove_from_queue=True)
            parts.forget(self.conn, job_id)  # the parts and merge of an earlier split run
            self._enqueue(kind, job_id, request)
        finally:
            self.conn.delete(claim)
        return Lookup("queued", kind, message="queued", request=request)

    def _enqueue(self, kind: str, job_id: str, request: dict[str, Any]) -> None:
        s = self.settings
        envelope = dumps({"kind": kind, "request": request})
        if _persistable(job_id):
            self.store.record_request(job_id, kind=kind, request=request)
        with self.conn.pipeline() as pipe:
            pipe.set(protocol.request_key(job_id), envelope, ex=s.redis_result_ttl_s)
            pipe.delete(
                protocol.partial_key(job_id),
                protocol.result_key(job_id),
                protocol.cancel_key(job_id),
            )
            pipe.execute()
        name = protocol.SHORT_QUEUE if protocol.is_short(kind, request) else protocol.QUEUE
        q = protocol.queue(self.conn, name)
        q.enqueue_call(
            FUNCS[kind],
            args=(request,),
            job_id=job_id,
            timeout=s.job_timeout_s,
            result_ttl=FINISHED_JOB_TTL_S,
            failure_ttl=FAILED_JOB_TTL_S,
            retry=Retry(max=1),
            meta={"kind": kind, "progress": 0.0, "message": "queued", "enqueued_at": time.time()},
            description=f"{kind} {job_id}",
        )
        logger.info("enqueued %s job %s", kind, job_id)

    def cancel(self, job_id: str) -> Lookup | None:
        """Ask a queued or running job to stop: a queued one is cancelled in RQ, a running one sees
        ``hs:cancel:{id}`` between batches and ends keeping nothing. Returns its state before."""
        state = self.lookup(job_id, with_partial=False, with_result=False)
        if state is None or state.status in ("finished", "failed"):
            return state
        self.conn.set(protocol.cancel_key(job_id), "1", ex=self.settings.redis_result_ttl_s)
        job = protocol.fetch_job(self.conn, job_id)
        if job is not None and job.get_status(refresh=False) in ("queued", "deferred", "scheduled"):
            job.cancel()
        if parts.plan(self.conn, job_id) is not None:  # every part stops; none leaves a slot
            parts.cancel(self.conn, job_id)
            self.conn.delete(protocol.partial_key(job_id))  # the sections its own job had done
        return state

    def wait(self, job_id: str, *, timeout_s: float, poll_s: float = 0.05) -> Lookup | None:
        """Poll until the job finishes or fails, or ``timeout_s`` passes (then its last state)."""
        deadline = time.monotonic() + timeout_s
        while True:
            state = self.lookup(job_id, with_partial=False)
            if (
                state is None
                or state.status in ("finished", "failed")
                or time.monotonic() > deadline
            ):
                return state
            time.sleep(poll_s)


def _persistable(job_id: str) -> bool:
    """Request hashes are persisted in the store; other ids (checkpoint inspections) stay in Redis."""
    return JOB_ID.fullmatch(job_id) is not None
