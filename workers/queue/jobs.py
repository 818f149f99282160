"""Queue jobs: the only code that knows both the queue and the analysis core.

Each job is an importable function the API enqueues by dotted path (``workers.queue.jobs.run_analysis``)
with JSON arguments. It parses the request, takes the model from this process' cache, calls the
core, writes each finished section to Redis as it comes (``hs:partial:{id}``), keeps its progress
in ``job.meta`` and writes the result to the store (``workers.store``: the database every replica
shares), in one transaction. Errors the user can fix end the job
with ``job.meta["error"]`` (no retry: the same input fails the same way); anything else raises, so
RQ retries it once and then marks it failed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from redis import Redis
from rq import get_current_job
from rq.job import Job

from workers.core import registry
from workers.core.contracts import LASF_MODELS, AnalysisRequest, PEAnalysisRequest
from workers.core.errors import HeadscopeError
from workers.core.partials import part_key
from workers.core.progress_lines import ProgressLines, progress_line
from workers.queue import keys as protocol

logger = logging.getLogger(__name__)
# a job's progress as log lines (INFO even when the worker logs only warnings: workers.queue.worker)
PROGRESS_LOG = logging.getLogger("headscope.progress")


def stage_weight(key: str) -> float:
    """A result key's share of the job's progress bar: its analysis' ``weight``, or a followup's."""
    for spec in registry.specs():
        if spec.kind == key:
            return spec.weight
        for follow in spec.followups:
            if follow.key == key:
                return follow.weight
    raise KeyError(f"no analysis or followup {key!r}")


def section_keys() -> set[str]:
    """Every result key a section may have: the kinds and their followups'."""
    return {s.kind for s in registry.specs()} | {
        f.key for s in registry.specs() for f in s.followups
    }


class Reporter:
    """Progress, partial sections and the result of the current job, written to Redis.

    ``result_id``: the job whose result this is when it is not ``job`` itself (the merge job of a
    job split into parts, ``workers.queue.parts``, stores the whole job's result)."""

    def __init__(self, job: Job, *, ttl_s: int, result_id: str | None = None):
        self.job = job
        self.id = result_id or job.id
        self.conn: Redis = job.connection
        self.ttl_s = ttl_s
        self._last_meta = 0.0
        self._lines = ProgressLines()

    def start(self) -> None:
        """A fresh attempt: forget the partials of an earlier one, count the computation."""
        with self.conn.pipeline() as pipe:
            pipe.delete(protocol.partial_key(self.id))
            pipe.incr(protocol.computed_key(self.id))
            pipe.expire(protocol.computed_key(self.id), self.ttl_s)
            pipe.execute()
        self.job.meta.update(
            progress=0.0, message="starting", attempt_started=time.time(), sections=[]
        )
        self.job.meta.pop("error", None)
        self.job.save_meta()

    def progress(self, fraction: float, message: str) -> None:
        if self._lines.due(fraction, message):  # the worker's log: one line per step
            PROGRESS_LOG.info(
                "%s",
                progress_line(f"job {self.job.id[:12]}", fraction, self._lines.elapsed(), message),
            )
        now = time.monotonic()
        if now - self._last_meta < 0.25 and fraction < 1.0:
            return  # at most four meta writes a second
        self._last_meta = now
        self.job.meta.update(progress=round(max(0.0, min(1.0, fraction)), 4), message=message[:200])
        self.job.save_meta()

    def partial(self, fields: dict[str, Any]) -> None:
        """Add top-level keys of the result so far (sections and the common keys)."""
        key = protocol.partial_key(self.id)
        with self.conn.pipeline() as pipe:
            pipe.hset(key, mapping={k: protocol.dumps(v) for k, v in fields.items()})
            pipe.expire(key, self.ttl_s)
            pipe.execute()
        done = [k for k in fields if k in section_keys()]
        if done:  # the order sections finished in, for the record (and the tests)
            self.job.meta["sections"] = [*self.job.meta.get("sections", []), *done]
            self.job.save_meta()

    def finish(self, result: dict[str, Any]) -> int:
        """Store the result: a request's in the store (one transaction), else in Redis."""
        blob = protocol.dumps(result)
        if not self._persist(blob):
            self.conn.set(protocol.result_key(self.id), blob, ex=self.ttl_s)
        self.job.meta.update(progress=1.0, message="done")
        self.job.save_meta()
        return len(blob)

    def _persist(self, blob: str) -> bool:
        """Write a request's result to the store; False for other jobs or a database that is down
        (then Redis holds it and the API moves it to the store when it reads it)."""
        if not protocol.JOB_ID.fullmatch(self.id):
            return False
        raw = self.conn.get(protocol.request_key(self.id))
        envelope = json.loads(raw) if raw else {}
        if envelope.get("request") is None:
            return False
        from workers.store import StoreUnavailable

        try:
            _store().write_result(
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


def _settings():
    from workers.core.settings import get_settings

    return get_settings()


@lru_cache(maxsize=1)
def _store():
    """This process' store (the database every replica shares)."""
    from workers.store import Store

    return Store(_settings())


def _current(ttl_s: int | None = None, *, result_id: str | None = None) -> Reporter:
    job = get_current_job()
    if job is None:
        raise RuntimeError("this function runs inside an RQ job")
    return Reporter(job, ttl_s=ttl_s or _settings().redis_result_ttl_s, result_id=result_id)


def _stages(req: AnalysisRequest) -> list[tuple[str, list[str], dict[str, Any]]]:
    """(result key, kinds, options) per analyze() call, cheap first: the first-stage kinds (max
    attention, decomposition, the requested head's t-SNE), then each followup (the service's every
    head after one head), then the rest."""
    options = req.options.model_dump(mode="json")
    specs = [registry.get(k) for k in req.analyses]  # already in job order
    first = [s.kind for s in specs if s.first_stage]
    rest = [s.kind for s in specs if not s.first_stage]
    stages: list[tuple[str, list[str], dict[str, Any]]] = []
    if first:
        stages.append(("", first, options))
    for spec in specs:
        own = spec.options_of(req.options)
        for follow in spec.followups:
            if follow.when(own):
                stages.append((follow.key, [spec.kind], {**options, **follow.overrides}))
    if rest:
        stages.append(("", rest, options))
    return stages


def compute_analysis(
    req: AnalysisRequest,
    *,
    progress: Callable[[float, str], None],
    on_partial: Callable[[dict[str, Any]], None],
    conn: Redis | None = None,
    defer: Callable[[str, Any], bool] | None = None,
) -> dict[str, Any]:
    """The API's result for ``req``: common keys plus one section per analysis (no queue needed;
    ``defer``: ``analyze``'s, the sections a queue job hands to parts)."""
    from workers.core.progress import scaled
    from workers.engine.pipeline import analyze
    from workers.models import load_model

    missing = [k for k in req.analyses if k not in registry.kinds()]
    if missing:
        raise HeadscopeError(
            f"the {missing[0]} analysis is not available on this worker yet; "
            f"available: {', '.join(registry.kinds())}"
        )
    progress(0.0, f"loading model {req.model}")
    wants_lasf = any("lasf_model" in registry.get(k).needs for k in req.analyses)
    lasf = lasf_model(req.model, conn=conn) if wants_lasf else None
    loaded = load_model(lasf.config["base_model"] if lasf else req.model, dtype=req.options.dtype)
    stages = _stages(req)
    total = sum(stage_weight(key or k) for key, kinds, _ in stages for k in kinds)
    done = 0.0
    result: dict[str, Any] = {}
    shared = shared_run(stages)
    keys = section_keys()
    for key, kinds, options in stages:
        weight = sum(stage_weight(key or k) for k in kinds)

        def on_layer(kind: str, layer: int, part: dict[str, Any], key: str = key) -> None:
            on_partial({part_key(key or kind, layer): part})

        def on_section(
            kind: str, section: dict[str, Any], so_far: dict[str, Any], key: str = key
        ) -> None:
            common = {k: v for k, v in so_far.items() if k not in keys}
            fields = {
                **{k: v for k, v in common.items() if k not in result},
                (key or kind): section,
            }
            result.update(fields)
            result["timings"] = {
                **result.get("timings", {}),
                **common.get("timings", {}),
            }  # every stage's
            on_partial(fields)

        analyze(
            loaded,
            req.text,
            kinds,
            options,
            progress=scaled(progress, done / total, (done + weight) / total),
            on_section=on_section,
            lasf=lasf,
            on_layer=on_layer,
            shared=shared,
            defer=defer,
        )
        done += weight
    return result


def shared_run(stages: list[tuple[str, list[str], dict[str, Any]]]) -> Any:
    """One pass over the text for every stage (``workers.engine.shared_run``); the first pass keeps
    the attention maps when a later stage reads them (a kind whose spec plans consumers)."""
    from workers.engine.shared_run import SharedRun

    later = {k for _, kinds, _ in stages[1:] for k in kinds}
    return SharedRun(keep_maps=any(registry.get(k).plan is not None for k in later))


def run_analysis(request: dict[str, Any]) -> dict[str, Any]:
    """RQ job: a text analysis (``AnalysisRequest``), result under ``hs:result:{job id}``."""
    from workers.queue.section_split import SplitSections

    rep = _current()
    rep.start()
    try:
        req = AnalysisRequest.model_validate(request)
        split = SplitSections(rep, request)
        with engine_retry(rep.job):
            result = compute_analysis(
                req,
                progress=_cancellable(rep),
                on_partial=rep.partial,
                conn=rep.conn,
                defer=split.defer,
            )
        handed = split.fan_out(result)
    except HeadscopeError as exc:
        if exc.code == "cancelled":  # nothing of a cancelled job is kept
            rep.conn.delete(protocol.partial_key(rep.job.id))
        return rep.fail(exc)
    if handed is not None:  # the merge job stores the result (docs/scaling.md)
        return {"split": handed.n_parts, "merge": handed.merge}
    return {"bytes": rep.finish(result)}


def _cancellable(rep: Reporter) -> Callable[[float, str], None]:
    """``rep.progress`` that ends the job (``CancelledError``) once ``DELETE /api/analyses/{id}`` asked."""
    from workers.core.errors import CancelledError

    def progress(fraction: float, message: str) -> None:
        if rep.conn.exists(protocol.cancel_key(rep.job.id)):  # one EXISTS (~0.1 ms) per step
            raise CancelledError("the analysis")
        rep.progress(fraction, message)

    return progress


@contextlib.contextmanager
def engine_retry(job: Job) -> Iterator[None]:
    """A t-SNE engine that lost the device (``engines.DeviceLost``): remember it in ``job.meta`` and
    raise, so RQ retries the job (``Retry``) while this worker ends itself (``workers.queue.recycle``);
    the retry skips that engine, on whichever worker takes it."""
    from workers.analyses.tsne import chain as engines

    avoid = list(job.meta.get("tsne_avoid", []))
    notes = tuple(
        f"{why} (the device was lost; retried by a fresh worker)"
        for why in job.meta.get("tsne_lost", [])
    )
    try:
        with engines.avoiding(avoid, notes=notes):
            yield
    except engines.DeviceLost as exc:
        job.meta.update(tsne_avoid=[*avoid, exc.engine], tsne_lost=[*job.meta.get("tsne_lost", []),
                        f"{exc.engine} failed: {exc.why}"], message="device lost: retrying")  # fmt: skip
        job.save_meta()
        raise


# ----------------------------------------------------------------------------- checkpoints


def checkpoint_file(checkpoint_id: str, *, conn: Redis | None = None) -> tuple[Path, str]:
    """(local file, display name) of a checkpoint: a shipped demo, or an upload in the store."""
    if checkpoint_id.startswith("demo-"):
        from workers.data.pe_demo import demo_checkpoints

        for demo in demo_checkpoints():
            if demo["id"] == checkpoint_id:
                return Path(demo["path"]), str(demo.get("name") or checkpoint_id)
        raise HeadscopeError(f"unknown demo checkpoint {checkpoint_id!r}")
    if not protocol.CHECKPOINT_ID.fullmatch(checkpoint_id):
        raise HeadscopeError(f"malformed checkpoint id {checkpoint_id!r}")
    found = _store().checkpoint_file(checkpoint_id)
    if found is None:
        raise HeadscopeError(f"checkpoint {checkpoint_id} is no longer available; upload it again")
    return found


def lasf_model(name: str, *, conn: Redis | None) -> Any:
    """The LasF layer ``name``: a shipped one (``lasf-minilm``, ``lasf-minilm-paper``) or an uploaded checkpoint id."""
    from workers.analyses.lasf.checkpoint import shipped_path
    from workers.analyses.lasf.fields import load_lasf

    path = shipped_path(name)
    if path is None:
        if conn is None or not protocol.CHECKPOINT_ID.fullmatch(name):
            raise HeadscopeError(
                f"unknown LasF model {name!r}; use {' or '.join(LASF_MODELS)} or an uploaded LasF checkpoint id"
            )
        path = checkpoint_file(name, conn=conn)[0]
    return load_lasf(path, name=name)


def _jsonable(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def _reference(ref: dict[str, Any], *, n: int, d: int, conn: Redis) -> Any:
    from workers.analyses.positional.encodings import make_reference
    from workers.models.checkpoints import read_tensor

    kind = ref["kind"]
    if kind == "none":
        return None
    if kind == "checkpoint":
        spec = ref.get("checkpoint") or {}
        return read_tensor(checkpoint_file(spec["id"], conn=conn)[0], spec.get("tensor"))
    grid = ref.get("grid")
    return make_reference(
        kind,
        n=n,
        d=d,
        grid=tuple(grid) if grid else None,
        sigma=float(ref["sigma"]),
        seed=int(ref["seed"]),
    )


def _partition(part: dict[str, Any], *, n: int) -> Any:
    from workers.analyses.positional.encodings import grid_partition, parse_partition_csv

    kind = part["kind"]
    if kind == "none":
        return None
    if kind == "csv":
        return parse_partition_csv(part.get("csv") or "", n)
    return grid_partition(kind, tuple(part["grid"]))


def compute_pe(
    req: PEAnalysisRequest, *, conn: Redis, progress: Callable[[float, str], None]
) -> dict[str, Any]:
    """``{"checkpoints": [report per checkpoint], "reference": {...}}`` for a PE request."""
    from workers.analyses.positional.encodings import pe_report
    from workers.models.checkpoints import list_candidates, read_tensor

    reports = []
    for i, ck in enumerate(req.checkpoints):
        progress(i / len(req.checkpoints), f"checkpoint {i + 1}/{len(req.checkpoints)}")
        path, name = checkpoint_file(ck.id, conn=conn)
        tensor = ck.tensor
        if tensor is None:  # the best candidate, as read_tensor picks it
            tensor = list_candidates(path)[0]["name"]
        E = read_tensor(path, tensor)  # [position, dim]
        if E.ndim != 2:
            raise HeadscopeError(f"tensor {tensor!r} of {name} is not 2-D (shape {list(E.shape)})")
        n, d = E.shape
        ref = _reference(req.reference.model_dump(mode="json"), n=n, d=d, conn=conn)
        part = _partition(req.partition.model_dump(mode="json"), n=n)
        report = _jsonable(pe_report(E, reference=ref, partition=part, metric=req.metric))
        reports.append({**report, "id": ck.id, "name": name, "tensor": tensor, "shape": [n, d]})
    progress(1.0, "done")
    return {"checkpoints": reports, "reference": req.reference.model_dump(mode="json")}


def run_pe_analysis(request: dict[str, Any]) -> dict[str, Any]:
    """RQ job: a positional-encoding analysis (``PEAnalysisRequest``)."""
    rep = _current()
    rep.start()
    try:
        req = PEAnalysisRequest.model_validate(request)
        result = compute_pe(req, conn=rep.conn, progress=rep.progress)
    except HeadscopeError as exc:
        return rep.fail(exc)
    return {"bytes": rep.finish(result)}
