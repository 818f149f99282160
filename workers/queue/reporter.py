"""What every queue job shares: its ``Reporter`` (progress, partial sections, result, failure), this
process' settings and store, and ``current()``, the reporter of the RQ job running now.

The job modules (``workers.queue.jobs``, ``jobs_corpus``, ``jobs_compare``, ``jobs_split``) sit
above this one. Progress goes to ``job.meta`` (at most four writes a second) and to the worker's
log, one line per step; partial sections to ``hs:partial:{id}`` as they finish; the result to the
store (``workers.store``: the database every replica shares) in one transaction, or to Redis when
the store is down (the API moves it later). Errors the user can fix end the job with
``job.meta["error"]`` (docs/service.md).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Collection
from functools import lru_cache
from typing import Any

from redis import Redis
from rq import get_current_job
from rq.job import Job

from workers.core.errors import HeadscopeError
from workers.core.ids import JOB_ID
from workers.core.jsonable import dumps
from workers.core.progress import Monotone
from workers.core.progress_lines import ProgressLines, progress_line
from workers.queue import keys as protocol
from workers.queue import parts

logger = logging.getLogger(__name__)
# a job's progress as log lines (INFO even when the worker logs only warnings: workers.queue.worker)
PROGRESS_LOG = logging.getLogger("headscope.progress")


class Reporter:
    """Progress, partial sections and the result of the current job, written to Redis.

    ``result_id``: the job whose result this is when it is not ``job`` itself (the merge job of a
    job split into parts, ``workers.queue.parts``, stores the whole job's result). ``sections``: the
    partial keys that are whole sections; ``job.meta["sections"]`` records the order they finish in.
    """

    def __init__(
        self,
        job: Job,
        *,
        ttl_s: int,
        result_id: str | None = None,
        sections: Collection[str] = (),
    ):
        self.job = job
        self.id = result_id or job.id
        self.conn: Redis = job.connection
        self.ttl_s = ttl_s
        self.sections = sections
        self._last_meta = 0.0
        self._lines = ProgressLines()
        self._bar = Monotone()  # one bar per attempt: never down, "done" only when it is

    def start(self) -> None:
        """A fresh attempt: forget the partials of an earlier one, count the computation."""
        with self.conn.pipeline() as pipe:
            pipe.delete(protocol.partial_key(self.id))
            pipe.incr(protocol.computed_key(self.id))
            pipe.expire(protocol.computed_key(self.id), self.ttl_s)
            pipe.execute()
        self._bar = Monotone()
        self.job.meta.update(
            progress=0.0, message="starting", attempt_started=time.time(), sections=[]
        )
        self.job.meta.pop("error", None)
        self.job.save_meta()

    def progress(self, fraction: float, message: str) -> None:
        """The job's bar (``workers.core.progress.Monotone``: never down, below 1 until ``finish``)."""
        fraction, message = self._bar(fraction, message)
        self._log(fraction, message)
        now = time.monotonic()
        if now - self._last_meta < 0.25:
            return  # at most four meta writes a second
        self._last_meta = now
        self.job.meta.update(progress=round(fraction, 4), message=message[:200])
        self.job.save_meta()

    def _log(self, fraction: float, message: str) -> None:
        if self._lines.due(fraction, message):  # the worker's log: one line per step
            PROGRESS_LOG.info(
                "%s",
                progress_line(f"job {self.job.id[:12]}", fraction, self._lines.elapsed(), message),
            )

    def partial(self, fields: dict[str, Any]) -> None:
        """Add top-level keys of the result so far (sections and the common keys)."""
        key = protocol.partial_key(self.id)
        with self.conn.pipeline() as pipe:
            pipe.hset(key, mapping={k: dumps(v) for k, v in fields.items()})
            pipe.expire(key, self.ttl_s)
            pipe.execute()
        done = [k for k in fields if k in self.sections]
        if done:  # the order sections finished in, for the record (and the tests)
            self.job.meta["sections"] = [*self.job.meta.get("sections", []), *done]
            self.job.save_meta()

    def finish(self, result: dict[str, Any]) -> int:
        """Store the result: a request's in the store (one transaction), else in Redis."""
        blob = dumps(result)
        if not self._persist(blob):
            self.conn.set(protocol.result_key(self.id), blob, ex=self.ttl_s)
        fraction, message = self._bar.finish()
        self._log(fraction, message)
        self.job.meta.update(progress=fraction, message=message)
        self.job.save_meta()
        return len(blob)

    def _persist(self, blob: str) -> bool:
        """Write a request's result to the store; False for other jobs or a database that is down
        (then Redis holds it and the API moves it to the store when it reads it)."""
        if not JOB_ID.fullmatch(self.id):
            return False
        raw = self.conn.get(protocol.request_key(self.id))
        envelope = json.loads(raw) if raw else {}
        if envelope.get("request") is None:
            return False
        from workers.store import StoreUnavailable

        try:
            store().write_result(
                self.id,
                kind=envelope.get("kind", "analysis"),
                request=envelope["request"],
                result_raw=blob,
            )
        except StoreUnavailable as exc:
            logger.warning("job %s: result kept in Redis: %s", self.id, exc)
            return False
        return True

    def fail(self, exc: HeadscopeError) -> dict[str, Any]:
        logger.info("job %s: %s", self.id, exc)
        self.job.meta.update(error=str(exc), error_code=exc.code, message="failed")
        self.job.save_meta()
        return {"error": str(exc), "code": exc.code}

    def run(self, work: Callable[[], dict[str, Any] | parts.Split]) -> dict[str, Any]:
        """Run ``work``, store its result and return the RQ job's return value. On a user error or
        cancel, or any failure, the partial results are cleared first. A job handed to its parts
        (``parts.Split``) stores nothing itself: its merge job does."""
        try:
            result = work()
        except HeadscopeError as exc:
            self.conn.delete(protocol.partial_key(self.job.id))
            return self.fail(exc)
        except BaseException:
            self.conn.delete(protocol.partial_key(self.job.id))
            raise
        if isinstance(result, parts.Split):
            return {"split": result.n_parts, "merge": result.merge}
        return {"bytes": self.finish(result)}


def settings() -> Any:
    """This process' settings (``workers.core.settings``)."""
    from workers.core.settings import get_settings

    return get_settings()


@lru_cache(maxsize=1)
def store() -> Any:
    """This process' store (the database every replica shares)."""
    from workers.store import Store

    return Store(settings())


def current(
    ttl_s: int | None = None, *, result_id: str | None = None, sections: Collection[str] = ()
) -> Reporter:
    """The reporter of the RQ job running in this process (``Reporter`` for the arguments)."""
    job = get_current_job()
    if job is None:
        raise RuntimeError("this function runs inside an RQ job")
    return Reporter(
        job, ttl_s=ttl_s or settings().redis_result_ttl_s, result_id=result_id, sections=sections
    )
