"""``POST /api/analyses`` (202 + id) and ``GET /api/analyses/{id}`` (JobStatus)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from backend.api.common import PARTIAL_QUERY, RESULT_QUERY, job_status, not_found
from backend.checks import check_text_request, model_facts  # noqa: F401 - model_facts re-exported
from backend.deps import QueueDep, StoreDep, WriteAccess
from backend.errors import error_responses
from backend.store import Store
from workers.core.contracts import LASF_MODELS, AnalysisRequest, JobStatus, is_lasf_model
from workers.core.errors import HeadscopeError, NotFoundError
from workers.queue.keys import JOB_ID

router = APIRouter(tags=["analyses"])


def lasf_base(model: str, store: Store) -> str:
    """The base model of a LasF layer name: 404 for an unknown checkpoint id, 422 for one that is
    not a LasF checkpoint."""
    if model in LASF_MODELS:
        return "minilm"
    meta = store.checkpoint(model)
    if meta is None:
        raise NotFoundError.of("checkpoint", model, "upload the LasF checkpoint first")
    if not meta.get("lasf"):
        raise HeadscopeError(f"{model} ({meta.get('filename', 'upload')}) is not a LasF checkpoint")
    return str(meta["lasf"]["base_model"])


def check_request(req: AnalysisRequest, store: Store | None = None) -> None:
    """What the API can check without the model (``backend.checks.check_text_request``), the model
    of a LasF layer being its base model."""
    name = req.model
    if is_lasf_model(name):
        if store is None:
            raise HeadscopeError(f"{name}: LasF models need the checkpoint store")
        name = lasf_base(name, store)
    check_text_request(
        model=req.model, name=name, text=req.text, kinds=list(req.analyses), options=req.options
    )


@router.post(
    "/api/analyses",
    status_code=202,
    dependencies=[WriteAccess],
    responses=error_responses(),
)
def submit_analysis(req: AnalysisRequest, queue: QueueDep, store: StoreDep) -> JSONResponse:
    """Queue a text analysis; identical requests get the same id, job and result."""
    check_request(req, store)
    job_id = req.job_id()
    state = queue.submit("analysis", job_id, req.normalised())
    return JSONResponse({"id": job_id, "status": state.status}, status_code=202)


@router.get("/api/analyses/{job_id}", response_model=JobStatus, responses=error_responses(404))
def get_analysis(
    job_id: str, queue: QueueDep, partial: str = PARTIAL_QUERY, result: str = RESULT_QUERY
):
    """Status, progress, partial sections while running (``?partial=`` picks which), the result when
    finished (``?result=none``: not even then)."""
    return job_status(
        queue,
        job_id,
        kind="analysis",
        what="analysis",
        pattern=JOB_ID,
        partial=partial,
        result=result,
    )


@router.delete("/api/analyses/{job_id}", dependencies=[WriteAccess], responses=error_responses(404))
def cancel_analysis(job_id: str, queue: QueueDep) -> dict:
    """Cancel a queued or running analysis (a finished one is left as it is): a running one stops at its
    next progress step, keeping nothing (edge-attribution: between EAP-IG's layers and circuit batches)."""
    state = queue.cancel(job_id) if JOB_ID.fullmatch(job_id) else None
    if state is None or state.kind != "analysis":
        raise not_found("analysis", job_id)
    return {
        "id": job_id,
        "status": state.status,
        "cancelled": state.status in ("queued", "running"),
    }
