"""Comparisons of two models (docs/compare.md, docs/api.md): ``/api/compare`` queues, reports and
cancels one. Everything checkable without a model is checked before queueing: both names in the
catalogue, a text with a word or a stored corpus, and the memory plan (model A's word maps of every
text, or of a part's texts when the comparison is split, plus the larger model) within the budget — each a 422 naming the problem."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from backend.api.common import PARTIAL_QUERY, job_status
from backend.api.corpora import _cancel, _check_corpus, _check_model
from backend.deps import QueueDep, StoreDep, WriteAccess
from backend.errors import error_responses
from workers.analyses.compare.plan import compare_ranges, plan_of
from workers.core.contracts import CompareRequest, JobStatus
from workers.core.ids import JOB_ID
from workers.inputs.corpora import shipped_corpus

router = APIRouter(tags=["compare"])


@router.post(
    "/api/compare", status_code=202, dependencies=[WriteAccess], responses=error_responses(404)
)
def submit_compare(req: CompareRequest, queue: QueueDep, store: StoreDep) -> JSONResponse:
    """Queue a comparison of two models; identical requests share one job."""
    _check_model(req.model_a)
    _check_model(req.model_b)
    if req.corpus is not None:
        _check_corpus(req.corpus, store)
    if req.text is not None:
        texts = [req.text]
    elif req.corpus is not None and req.corpus.startswith("builtin-"):
        texts = shipped_corpus(req.corpus).texts  # type: ignore[union-attr] - checked above
    else:
        texts = store.corpus_texts(req.corpus) or []
    ranges = compare_ranges(len(texts)) if req.corpus is not None else None  # a split one: per part
    plan_of(req.model_a, req.model_b, texts, max_tokens=req.max_tokens, ranges=ranges).check(
        what=f"comparing {req.model_a} and {req.model_b} on {len(texts)} texts"
    )
    job_id = req.job_id()
    state = queue.submit("compare", job_id, req.normalised())
    return JSONResponse({"id": job_id, "status": state.status}, status_code=202)


@router.get("/api/compare/{job_id}", response_model=JobStatus, responses=error_responses(404))
def get_compare(job_id: str, queue: QueueDep, partial: str = PARTIAL_QUERY):
    """Status, progress and, when finished, the result (docs/results.md, "compare")."""
    return job_status(
        queue, job_id, kind="compare", what="comparison", pattern=JOB_ID, partial=partial
    )


@router.delete("/api/compare/{job_id}", dependencies=[WriteAccess], responses=error_responses(404))
def cancel_compare(job_id: str, queue: QueueDep) -> dict:
    """Cancel a queued or running comparison (a finished one is left as it is)."""
    return _cancel(queue, job_id, kind="compare", what="comparison")
