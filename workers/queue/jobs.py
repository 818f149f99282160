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

from workers.core.contracts import ANALYSIS_KINDS, LASF_MODELS, AnalysisRequest, PEAnalysisRequest
from workers.core.errors import HeadscopeError
from workers.core.ids import CHECKPOINT_ID
from workers.core.jsonable import jsonable
from workers.core.partials import part_key
from workers.queue import keys as protocol
from workers.queue import reporter
from workers.queue.reporter import Reporter

logger = logging.getLogger(__name__)

# rough relative cost of each stage, for one progress bar across all of them
WEIGHTS = {
    "max-attention": 1.0,
    "word-maps": 1.0,  # docs/compare.md
    "decomposition": 2.0,
    "head-tsne": 3.0,
    "head-tsne-all": 12.0,
    "hidden-tsne": 3.0,
    "word-tsne": 3.0,
    "robustness": 12.0,
    "lasf": 4.0,
    "continue": 1.0,
    "predictions": 1.0,
    "logit-lens": 1.0,
    "logit-attribution": 2.0,
    "ablation": 6.0,
    "patching": 6.0,
    "information-flow": 1.5,
    "attribution-patching": 2.0,
    "edge-attribution": 8.0,
}
ALL_HEADS_KEY = "head-tsne-all"


def _stages(req: AnalysisRequest) -> list[tuple[str, list[str], dict[str, Any]]]:
    """(result key, kinds, options) per analyze() call, cheap first: max attention, decomposition,
    the requested head's t-SNE, then (``all_heads``) every head, then the rest."""
    options = req.options.model_dump(mode="json")
    all_heads = options.pop("all_heads", False)
    kinds: list[str] = [k for k in ANALYSIS_KINDS if k in req.analyses]
    cut = ANALYSIS_KINDS.index("head-tsne")
    first: list[str] = [k for k in kinds if ANALYSIS_KINDS.index(k) <= cut]
    rest: list[str] = [k for k in kinds if ANALYSIS_KINDS.index(k) > cut]
    stages: list[tuple[str, list[str], dict[str, Any]]] = []
    if first:
        stages.append(("", first, options))
    single = options["layer"] != "all" or options["head"] != "all"
    if all_heads and "head-tsne" in kinds and single:
        stages.append((ALL_HEADS_KEY, ["head-tsne"], {**options, "layer": "all", "head": "all"}))
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
    from workers.engine.pipeline import SECTIONS, analyze
    from workers.models import load_model

    missing = [k for k in req.analyses if k not in SECTIONS]
    if missing:
        raise HeadscopeError(
            f"the {missing[0]} analysis is not available on this worker yet; "
            f"available: {', '.join(k for k in ANALYSIS_KINDS if k in SECTIONS)}"
        )
    progress(0.0, f"loading model {req.model}")
    lasf = lasf_model(req.model, conn=conn) if "lasf" in req.analyses else None
    loaded = load_model(lasf.config["base_model"] if lasf else req.model, dtype=req.options.dtype)
    stages = _stages(req)
    total = sum(WEIGHTS[key or k] for key, kinds, _ in stages for k in kinds)
    done = 0.0
    result: dict[str, Any] = {}
    shared = shared_run(stages)
    for key, kinds, options in stages:
        weight = sum(WEIGHTS[key or k] for k in kinds)

        def on_layer(kind: str, layer: int, part: dict[str, Any], key: str = key) -> None:
            on_partial({part_key(key or kind, layer): part})

        def on_section(
            kind: str, section: dict[str, Any], so_far: dict[str, Any], key: str = key
        ) -> None:
            common = {k: v for k, v in so_far.items() if k not in SECTIONS}
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
    the attention maps when a later stage reads them (the gallery)."""
    from workers.engine.shared_run import SharedRun

    reads = {"max-attention", "head-tsne", "robustness", "lasf"}
    return SharedRun(keep_maps=any(reads & set(kinds) for _, kinds, _ in stages[1:]))


def run_analysis(request: dict[str, Any]) -> dict[str, Any]:
    """RQ job: a text analysis (``AnalysisRequest``), result under ``hs:result:{job id}``."""
    from workers.queue.causal_split import SplitSections

    rep = reporter.current(sections=WEIGHTS)
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
