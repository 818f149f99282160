"""Queue job of the comparison of two models (docs/compare.md): one text or a stored corpus.

As ``workers.jobs_corpus``: the request is parsed, the models come from this process' cache (model A
is dropped from it before model B loads when the memory budget cannot hold both,
``workers.compare_plan``), progress goes to ``job.meta`` and the result to the store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from workers.contracts import CompareRequest
from workers.jobs import _current
from workers.jobs_corpus import _run, corpus_texts

logger = logging.getLogger(__name__)


def request_texts(req: CompareRequest, *, store: Any = None) -> list[str]:
    """The texts of a comparison: its one text, or its corpus's."""
    return [req.text] if req.text is not None else corpus_texts(req.corpus or "", store=store)


def compute_compare(req: CompareRequest, *, texts: list[str], progress: Callable[[float, str], None]) -> dict[str, Any]:
    """The result of a comparison (docs/results.md, "compare"); no queue needed (the CLI calls it)."""
    from workers.analysis.compare import compare_models
    from workers.compare_plan import describe, plan_of
    from workers.models import load_model
    from workers.models.loader import release_model

    plan = plan_of(req.model_a, req.model_b, texts, max_tokens=req.max_tokens)
    plan.check(what=f"comparing {req.model_a} and {req.model_b} on {len(texts)} texts")
    progress(0.0, describe(plan))
    release = None
    if not plan.together and req.model_a != req.model_b:
        release = lambda: release_model(req.model_a)  # noqa: E731 - never both loaded
    result = compare_models(lambda: load_model(req.model_a), lambda: load_model(req.model_b), texts,
                            max_tokens=req.max_tokens, release=release, progress=progress)
    return {**result, "text": req.text, "corpus": req.corpus, "texts": texts if req.corpus is not None else None,
            "one_at_a_time": release is not None}


def run_compare(request: dict[str, Any]) -> dict[str, Any]:
    """RQ job: a comparison of two models (``CompareRequest``)."""
    rep = _current()
    rep.start()

    def work() -> dict[str, Any]:
        req = CompareRequest.model_validate(request)
        return compute_compare(req, texts=request_texts(req), progress=rep.progress)

    return _run(rep, work)
