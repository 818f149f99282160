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
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from redis import Redis
from rq.job import Job

from workers.core import registry
from workers.core.contracts import LASF_MODELS, AnalysisRequest, PEAnalysisRequest
from workers.core.errors import HeadscopeError
from workers.core.ids import CHECKPOINT_ID
from workers.core.jsonable import jsonable
from workers.core.partials import part_key
from workers.queue import keys as protocol
from workers.queue import reporter
from workers.queue.reporter import Reporter

logger = logging.getLogger(__name__)


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
    from workers.core.progress import scaled, stage
    from workers.engine.pipeline import analyze
    from workers.models import load_model
    from workers.queue.jobs_corpus import first_texts

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
    for number, (key, kinds, options) in enumerate(stages, 1):
        weight = sum(stage_weight(key or k) for k in kinds)
        start, end = done / total, (done + weight) / total
        step = (  # each step named on the one bar (docs/service.md), when there are several
            stage(progress, start, end, f"step {number}/{len(stages)} ({key or ', '.join(kinds)})")
            if len(stages) > 1
            else scaled(progress, start, end)
        )

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
            progress=step,
            on_section=on_section,
            lasf=lasf,
            on_layer=on_layer,
            shared=shared,
            defer=defer,
            corpora=first_texts,
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

    rep = reporter.current(sections=section_keys())
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
    if not CHECKPOINT_ID.fullmatch(checkpoint_id):
        raise HeadscopeError(f"malformed checkpoint id {checkpoint_id!r}")
    found = reporter.store().checkpoint_file(checkpoint_id)
    if found is None:
        raise HeadscopeError(f"checkpoint {checkpoint_id} is no longer available; upload it again")
    return found


def lasf_model(name: str, *, conn: Redis | None) -> Any:
    """The LasF layer ``name``: a shipped one (``lasf-minilm``, ``lasf-minilm-paper``) or an uploaded checkpoint id."""
    from workers.analyses.lasf.checkpoint import shipped_path
    from workers.analyses.lasf.fields import load_lasf

    path = shipped_path(name)
    if path is None:
        if conn is None or not CHECKPOINT_ID.fullmatch(name):
            raise HeadscopeError(
                f"unknown LasF model {name!r}; use {' or '.join(LASF_MODELS)} or an uploaded LasF checkpoint id"
            )
        path = checkpoint_file(name, conn=conn)[0]
    return load_lasf(path, name=name)


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
        report = jsonable(pe_report(E, reference=ref, partition=part, metric=req.metric))
        reports.append({**report, "id": ck.id, "name": name, "tensor": tensor, "shape": [n, d]})
    progress(1.0, "done")
    return {"checkpoints": reports, "reference": req.reference.model_dump(mode="json")}


def run_pe_analysis(request: dict[str, Any]) -> dict[str, Any]:
    """RQ job: a positional-encoding analysis (``PEAnalysisRequest``)."""
    rep = reporter.current()
    rep.start()
    try:
        req = PEAnalysisRequest.model_validate(request)
        result = compute_pe(req, conn=rep.conn, progress=rep.progress)
    except HeadscopeError as exc:
        return rep.fail(exc)
    return {"bytes": rep.finish(result)}
