"""Queue jobs of the corpus analysis (docs/corpus.md): statistics of every head, and one head's joint
query–key map, over a stored (``cp-...``) or shipped (``builtin-...``) corpus.

As ``workers.queue.jobs``: the request is parsed, the model comes from this process' cache, progress goes to
``job.meta`` and partial statistics to ``hs:partial:{id}`` as batches finish, and the result to the
store in one transaction. A running job stops between batches once the API sets ``hs:cancel:{id}``;
a cancelled or failed job clears its partial results, so nothing half-written is left.

A corpus of ``split_min_items`` texts or more is split (``workers.queue.parts``, docs/scaling.md): the job
becomes the coordinator that enqueues one part per ``split_part_items`` texts (``corpus_part``: the
partial statistics of its texts, ``workers.analyses.corpus.merge``) and the merge job after them
(``corpus_merge``: folds the partials in part order and stores the result under the job's id).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from redis import Redis

from workers.core.contracts import CorpusRequest, JointMapRequest
from workers.core.errors import CancelledError, HeadscopeError
from workers.inputs.source import open_corpus
from workers.inputs.texts import TextSource
from workers.queue import keys as protocol
from workers.queue import parts, reporter
from workers.queue.reporter import Reporter

logger = logging.getLogger(__name__)
PARTIAL_EVERY_S = 1.0
PART = "workers.queue.jobs_corpus.corpus_part"
MERGE = "workers.queue.jobs_corpus.corpus_merge"
PART_PROGRESS_EVERY_S = 0.25


def corpus_texts(corpus: str, *, store: Any = None) -> list[str]:
    """Every text of a shipped (``builtin-...``) or stored (``cp-...``) corpus in one list (the joint
    map and comparisons); the statistics read theirs in batches through ``open_corpus``."""
    return [t for b in open_texts(corpus, store=store).batches(batch=4096) for t in b]


def open_texts(corpus: str, *, store: Any = None) -> TextSource:
    """``open_corpus`` with this process' store for a stored corpus (``store``: another one)."""
    if store is None and not corpus.startswith("builtin-"):
        store = reporter.store()
    return open_corpus(corpus, store=store)


def first_texts(corpus: str, n: int, *, store: Any = None) -> list[str]:
    """The first ``n`` texts of a shipped or stored corpus (the atlas' corpus probe reads them through
    the engine's ``corpora``, docs/atlas.md)."""
    return [t for b in open_texts(corpus, store=store).batches(0, n, batch=1000) for t in b]


def compute_corpus(
    req: CorpusRequest,
    *,
    texts: Sequence[str] | TextSource,
    progress: Callable[[float, str], None],
    on_partial: Callable[[dict[str, Any]], None],
    should_stop: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """The result of a corpus request (docs/results.md, "corpus"); no queue needed (the CLI calls it).
    ``texts``: a list or a ``TextSource`` (``workers.inputs.source.open_corpus``), read in windows."""
    from workers.analyses.corpus.run import corpus_statistics
    from workers.models import load_model

    progress(0.0, f"loading model {req.model}")
    loaded = load_model(req.model, dtype=req.options.dtype)
    options = _options(req)
    last = [0.0]

    def partial(so_far: dict[str, Any]) -> None:
        now = time.monotonic()
        if now - last[0] >= PARTIAL_EVERY_S:
            last[0] = now
            on_partial(so_far)

    result = corpus_statistics(
        loaded, texts, options=options, progress=progress, on_batch=partial, should_stop=should_stop
    )
    return {**result, "corpus": req.corpus, "dtype": req.options.dtype}


def compute_joint(
    req: JointMapRequest,
    *,
    texts: Sequence[str] | TextSource,
    progress: Callable[[float, str], None],
    should_stop: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """The joint query–key map of one head (docs/results.md, "corpus joint map")."""
    from workers.analyses.corpus.joint_map import joint_map
    from workers.models import load_model

    progress(0.0, f"loading model {req.model}")
    loaded = load_model(req.model)
    if req.layer >= loaded.n_layers or req.head >= loaded.n_heads:
        raise HeadscopeError(
            f"head ({req.layer}, {req.head}) is out of range: {req.model} has "
            f"{loaded.n_layers} layers of {loaded.n_heads} heads"
        )
    out = joint_map(
        loaded,
        texts,
        layer=req.layer,
        head=req.head,
        max_tokens=req.max_tokens,
        keep_special=req.keep_special,
        max_points=req.max_points,
        method=req.method,
        seed=req.seed,
        progress=progress,
        should_stop=should_stop,
    )
    return {**out, "model": req.model, "corpus": req.corpus}


def _stopper(conn: Redis, job_id: str) -> Callable[[], bool]:
    return lambda: bool(conn.exists(protocol.cancel_key(job_id)))


def _options(req: CorpusRequest) -> Any:
    from workers.analyses.corpus.run import CorpusOptions

    o = req.options
    return CorpusOptions(
        max_tokens=o.max_tokens,
        keep_special=o.keep_special,
        statistics=tuple(o.statistics),
        top_k=o.top_k,
        exclude_sink_self=o.exclude_sink_self,
    ).validate()


def split_corpus(
    rep: Reporter, req: CorpusRequest, request: dict[str, Any], *, n_texts: int, part: str = PART
) -> parts.Split | None:
    """Hand a corpus of ``split_min_items`` texts or more to parts (docs/scaling.md); None: one job."""
    settings = reporter.settings()
    n = n_texts
    ranges = parts.split(
        n,
        part_items=settings.split_part_items,
        min_items=settings.split_min_items,
        max_parts=settings.split_max_parts,
    )
    if len(ranges) < 2:
        return None
    _options(req)  # a bad option fails here, once, not in every part
    split = fan_out_texts(rep, request, ranges, part=part, merge=MERGE, what="the corpus job")
    rep.progress(
        0.0, f"split into {len(ranges)} parts of up to {ranges[0][1] - ranges[0][0]} texts"
    )
    logger.info("corpus job %s: %d texts in %d parts", rep.job.id, n, len(ranges))
    return split


def fan_out_texts(
    rep: Reporter,
    request: dict[str, Any],
    ranges: list[tuple[int, int]],
    *,
    part: str,
    merge: str,
    what: str,
) -> parts.Split:
    """Enqueue one part per range of texts (payload: the request, ``start``, ``stop``) and the merge
    after them (a corpus job, a comparison: docs/scaling.md); a job cancelled before or meanwhile ends."""
    if rep.conn.exists(protocol.cancel_key(rep.job.id)):
        raise CancelledError(what)
    merge_job = parts.fan_out(
        rep.conn,
        job_id=rep.job.id,
        part=part,
        merge=merge,
        payloads=[{"request": request, "start": a, "stop": b} for a, b in ranges],
        sizes=[b - a for a, b in ranges],
        unit="texts",
        context={"job_id": rep.job.id, "request": request},
        job_timeout=reporter.settings().job_timeout_s,
    )
    if rep.conn.exists(
        protocol.cancel_key(rep.job.id)
    ):  # cancelled while fanning out: the API saw no plan
        parts.cancel(rep.conn, rep.job.id, len(ranges))
    return parts.Split(merge_job.id, len(ranges))


def run_corpus(request: dict[str, Any], *, part: str = PART) -> dict[str, Any]:
    """RQ job: a corpus analysis (``CorpusRequest``); a large corpus is split into parts (``part``:
    the part function's dotted path; tests hold parts with their own)."""
    rep = reporter.current()
    rep.start()

    def work() -> dict[str, Any] | parts.Split:
        req = CorpusRequest.model_validate(request)
        source = open_corpus(
            req.corpus, store=reporter.store()
        )  # read in windows, never whole (docs/scaling.md)
        handed = split_corpus(rep, req, request, n_texts=len(source), part=part)
        if handed is not None:
            return handed
        return compute_corpus(
            req,
            texts=source,
            progress=rep.progress,
            on_partial=rep.partial,
            should_stop=_stopper(rep.conn, rep.job.id),
        )

    return rep.run(work)


def corpus_part(payload: dict[str, Any], ctx: parts.PartContext) -> dict[str, Any]:
    """A part of a split corpus job: the partial statistics of texts ``[start, stop)``."""
    from workers.analyses.corpus.merge import corpus_partial
    from workers.models import load_model

    req = CorpusRequest.model_validate(payload["request"])
    start, stop = int(payload["start"]), int(payload["stop"])
    source = open_corpus(req.corpus, store=reporter.store())  # only [start, stop) is read
    loaded = load_model(req.model, dtype=req.options.dtype)
    last = [0.0]

    def progress(fraction: float, message: str) -> None:
        now = time.monotonic()
        if now - last[0] >= PART_PROGRESS_EVERY_S:
            last[0] = now
            ctx.items(int(fraction * (stop - start)))

    return corpus_partial(
        loaded,
        source,
        start=start,
        stop=stop,
        options=_options(req),
        progress=progress,
        should_stop=ctx.cancelled,
    )


def corpus_merge(partials: parts.Partials, context: dict[str, Any]) -> dict[str, Any]:
    """The merge job of a split corpus job: fold the partials in part order, store the result under
    the whole job's id."""
    from workers.analyses.corpus.merge import CorpusMerge

    job_id = context["job_id"]
    rep = reporter.current(result_id=job_id)
    plan = parts.plan(rep.conn, job_id) or {}
    try:
        req = CorpusRequest.model_validate(context["request"])
        merge = CorpusMerge()
        for i, partial in enumerate(partials):
            merge.add(partial)
            rep.progress(
                0.99 + 0.01 * (i + 1) / len(partials), f"merging part {i + 1}/{len(partials)}"
            )
        seconds = time.time() - float(plan.get("started", time.time()))
        result = {
            **merge.result(seconds=seconds),
            "corpus": req.corpus,
            "dtype": req.options.dtype,
            "split": {
                "parts": len(partials),
                "part_texts": max(plan.get("sizes") or [0]),
                "part_seconds": round(merge.part_seconds, 3),
            },
        }
    except HeadscopeError as exc:
        return rep.fail(exc)
    return {"bytes": rep.finish(result)}


def run_corpus_joint(request: dict[str, Any]) -> dict[str, Any]:
    """RQ job: one head's joint query–key map (``JointMapRequest``)."""
    rep = reporter.current()
    rep.start()

    def work() -> dict[str, Any]:
        req = JointMapRequest.model_validate(request)
        return compute_joint(
            req,
            texts=open_corpus(req.corpus, store=reporter.store()),
            progress=rep.progress,
            should_stop=_stopper(rep.conn, rep.job.id),
        )

    return rep.run(work)
