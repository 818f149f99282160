"""Queue job of the comparison of two models (docs/compare.md): one text or a stored corpus.

As ``workers.queue.jobs_corpus``: the request is parsed, the models come from this process' cache (model A
is dropped from it before model B loads when the memory budget cannot hold both,
``workers.analyses.compare.plan``), progress goes to ``job.meta`` and the result to the store.

A corpus of ``split_compare_min_texts`` texts or more is split (``workers.queue.parts``, docs/scaling.md):
the job becomes the coordinator that enqueues one part per range of texts (``compare_part``: both
models over its texts, ``workers.analyses.compare.parts``) and the merge job after them
(``compare_merge``: adds the partials in part order, matches and profiles once, stores the result
under the job's id).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from workers.core.contracts import CompareRequest
from workers.core.errors import HeadscopeError
from workers.queue import parts, reporter
from workers.queue.jobs_corpus import corpus_texts, fan_out_texts, open_texts
from workers.queue.reporter import Reporter

logger = logging.getLogger(__name__)
PART = "workers.queue.jobs_compare.compare_part"
MERGE = "workers.queue.jobs_compare.compare_merge"
PART_PROGRESS_EVERY_S = 0.25


def request_texts(req: CompareRequest, *, store: Any = None) -> list[str]:
    """The texts of a comparison: its one text, or its corpus's."""
    return [req.text] if req.text is not None else corpus_texts(req.corpus or "", store=store)


def _release(req: CompareRequest, together: bool) -> Callable[[], None] | None:
    """What drops model A before B loads when the plan cannot hold both (None: both stay)."""
    from workers.models.loader import release_model

    if together or req.model_a == req.model_b:
        return None

    def release() -> None:
        release_model(req.model_a)

    return release


def compute_compare(
    req: CompareRequest, *, texts: list[str], progress: Callable[[float, str], None]
) -> dict[str, Any]:
    """The result of a comparison (docs/results.md, "compare"); no queue needed (the CLI calls it)."""
    from workers.analyses.compare.comparison import compare_models
    from workers.analyses.compare.plan import compare_window, describe, plan_of
    from workers.models import load_model

    plan = plan_of(req.model_a, req.model_b, texts, max_tokens=req.max_tokens)
    plan.check(what=f"comparing {req.model_a} and {req.model_b} on {len(texts)} texts")
    progress(0.0, describe(plan))
    release = _release(req, plan.together)
    result = compare_models(
        lambda: load_model(req.model_a),
        lambda: load_model(req.model_b),
        texts,
        max_tokens=req.max_tokens,
        release=release,
        progress=progress,
        window=compare_window(),
    )
    return {
        **result,
        "text": req.text,
        "corpus": req.corpus,
        "texts": texts if req.corpus is not None else None,
        "one_at_a_time": release is not None,
    }


def split_compare(
    rep: Reporter, req: CompareRequest, request: dict[str, Any], *, part: str = PART
) -> parts.Split | None:
    """Hand a comparison over ``split_compare_min_texts`` corpus texts or more to parts (docs/scaling.md);
    None: one job. The memory plan is checked per part, the corpus read in batches to count words."""
    from workers.analyses.compare.plan import compare_ranges, describe, plan_of

    if req.corpus is None:
        return None
    source = open_texts(req.corpus)
    ranges = compare_ranges(len(source))
    if len(ranges) < 2:
        return None
    texts = (
        t for b in source.batches(batch=1000) for t in b
    )  # word counts only: never whole in memory
    plan = plan_of(req.model_a, req.model_b, texts, max_tokens=req.max_tokens, ranges=ranges)
    plan.check(what=f"comparing {req.model_a} and {req.model_b} on {len(source)} texts")
    split = fan_out_texts(rep, request, ranges, part=part, merge=MERGE, what="the comparison")
    rep.progress(
        0.0,
        f"split into {len(ranges)} parts of up to {ranges[0][1] - ranges[0][0]} texts; {describe(plan)}",
    )
    logger.info("compare job %s: %d texts in %d parts", rep.job.id, len(source), len(ranges))
    return split


def run_compare(request: dict[str, Any], *, part: str = PART) -> dict[str, Any]:
    """RQ job: a comparison of two models (``CompareRequest``); a large corpus is split into parts
    (``part``: the part function's dotted path; tests hold parts with their own)."""
    rep = reporter.current()
    rep.start()

    def work() -> dict[str, Any] | parts.Split:
        req = CompareRequest.model_validate(request)
        handed = split_compare(rep, req, request, part=part)
        if handed is not None:
            return handed
        return compute_compare(req, texts=request_texts(req), progress=rep.progress)

    return rep.run(work)


def compare_part(payload: dict[str, Any], ctx: parts.PartContext) -> dict[str, Any]:
    """A part of a split comparison: both models over texts ``[start, stop)`` (one after the other when
    this part's memory plan says so), their partials (``compare_parts.compare_partial``)."""
    from workers.analyses.compare.parts import compare_partial
    from workers.analyses.compare.plan import compare_window, plan_of
    from workers.models import load_model

    req = CompareRequest.model_validate(payload["request"])
    start, stop = int(payload["start"]), int(payload["stop"])
    texts = [
        t for b in open_texts(req.corpus or "").batches(start, stop, batch=stop - start) for t in b
    ]
    plan = plan_of(req.model_a, req.model_b, texts, max_tokens=req.max_tokens)
    plan.check(what=f"comparing {req.model_a} and {req.model_b} on texts {start}-{stop}")
    release = _release(req, plan.together)
    last = [0.0]

    def progress(
        fraction: float, message: str
    ) -> None:  # texts done of this part, both models counted
        now = time.monotonic()
        if now - last[0] >= PART_PROGRESS_EVERY_S:
            last[0] = now
            ctx.items(int(fraction * (stop - start)))

    out = compare_partial(
        lambda: load_model(req.model_a),
        lambda: load_model(req.model_b),
        texts,
        first=start,
        max_tokens=req.max_tokens,
        window=compare_window(),
        release=release,
        progress=progress,
        should_stop=ctx.cancelled,
    )
    return {**out, "one_at_a_time": release is not None}


def compare_merge(partials: parts.Partials, context: dict[str, Any]) -> dict[str, Any]:
    """The merge job of a split comparison: add the partials in part order, match and profile once,
    store the result under the whole job's id."""
    from workers.analyses.compare.parts import CompareMerge

    job_id = context["job_id"]
    rep = reporter.current(result_id=job_id)
    plan = parts.plan(rep.conn, job_id) or {}
    try:
        req = CompareRequest.model_validate(context["request"])
        merge = CompareMerge()
        one_at_a_time = False
        for i, partial in enumerate(partials):
            merge.add(partial)
            one_at_a_time = one_at_a_time or bool(partial.get("one_at_a_time"))
            rep.progress(
                0.99 + 0.01 * (i + 1) / len(partials), f"merging part {i + 1}/{len(partials)}"
            )
        seconds = time.time() - float(plan.get("started", time.time()))
        result = {
            **merge.result(seconds=seconds),
            "text": None,
            "corpus": req.corpus,
            "texts": merge.texts,
            "one_at_a_time": one_at_a_time,
            "split": {
                "parts": len(partials),
                "part_texts": max(plan.get("sizes") or [0]),
                "part_seconds": round(merge.part_seconds, 3),
            },
        }
    except HeadscopeError as exc:
        return rep.fail(exc)
    return {"bytes": rep.finish(result)}
