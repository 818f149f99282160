"""Comparisons of two models (docs/compare.md, docs/api.md): ``/api/compare`` queues, reports and
cancels one (the job routes, ``backend.api.jobs``). Everything checkable without a model is checked
before queueing: both names in the catalogue, a text with a word or a stored corpus, and the memory
plan (model A's word maps of every text, or of a part's texts when the comparison is split, plus the
larger model) within the budget — each a 422 naming the problem."""

from __future__ import annotations

from fastapi import APIRouter

from backend.api.corpora import check_corpus
from backend.api.jobs import job_routes
from backend.api.models import check_model
from backend.queue import JobQueue
from backend.store import Store
from workers.analyses.compare.plan import compare_ranges, plan_of
from workers.core.contracts import CompareRequest
from workers.inputs.corpora import shipped_corpus

router = APIRouter(tags=["compare"])


def check_compare(req: CompareRequest, queue: JobQueue, store: Store) -> None:
    """Both models, the corpus, and the memory plan of the comparison (per part when split)."""
    check_model(req.model_a)
    check_model(req.model_b)
    if req.corpus is not None:
        check_corpus(req.corpus, store)
    if req.text is not None:
        texts = [req.text]
    elif req.corpus is not None and req.corpus.startswith("builtin-"):
        shipped = shipped_corpus(req.corpus)
        texts = shipped.texts if shipped is not None else []  # check_corpus refused an unknown one
    elif req.corpus is not None:
        texts = store.corpus_texts(req.corpus) or []
    else:
        texts = []
    ranges = compare_ranges(len(texts)) if req.corpus is not None else None  # a split one: per part
    plan_of(req.model_a, req.model_b, texts, max_tokens=req.max_tokens, ranges=ranges).check(
        what=f"comparing {req.model_a} and {req.model_b} on {len(texts)} texts"
    )


job_routes(
    router,
    path="/api/compare",
    kind="compare",
    request_model=CompareRequest,
    check=check_compare,
    what="comparison",
    names=("submit_compare", "get_compare", "cancel_compare"),
    docs=(
        """Queue a comparison of two models; identical requests share one job.""",
        """Status, progress and, when finished, the result (docs/results.md, "compare").""",
        """Cancel a queued or running comparison (a finished one is left as it is).""",
    ),
)
