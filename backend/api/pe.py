"""``POST /api/pe-analyses`` and ``GET /api/pe-analyses/{id}``."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from backend.api.checkpoints import known_checkpoint
from backend.api.common import PARTIAL_QUERY, job_status
from backend.deps import QueueDep, StoreDep, WriteAccess
from backend.errors import error_responses
from workers.core.contracts import JobStatus, PEAnalysisRequest
from workers.core.errors import HeadscopeError, NotFoundError
from workers.core.ids import JOB_ID

router = APIRouter(tags=["positional encodings"])


@router.post(
    "/api/pe-analyses", status_code=202, dependencies=[WriteAccess], responses=error_responses(404)
)
def submit_pe(req: PEAnalysisRequest, queue: QueueDep, store: StoreDep) -> JSONResponse:
    """Queue a PE analysis of one or more checkpoints (docs/positional.md)."""
    refs = list(req.checkpoints)
    if req.reference.checkpoint is not None:
        refs.append(req.reference.checkpoint)
    for ref in refs:
        ck = known_checkpoint(ref.id, queue.conn, store)
        if ck is None:
            raise NotFoundError.of("checkpoint", ref.id, "upload it first")
        names = [c["name"] for c in ck.get("candidates", [])]
        if ref.tensor is not None and ref.tensor not in names:
            raise HeadscopeError(
                f"checkpoint {ck.get('filename', ref.id)} has no 2-D tensor {ref.tensor!r}; "
                f"candidates: {', '.join(names) or 'none'}"
            )
    for ref in refs:
        if not ref.id.startswith("demo-"):
            store.touch_checkpoint(ref.id)  # in use: its expiry clock restarts
    job_id = req.job_id()
    state = queue.submit("pe", job_id, req.normalised())
    return JSONResponse({"id": job_id, "status": state.status}, status_code=202)


@router.get("/api/pe-analyses/{job_id}", response_model=JobStatus, responses=error_responses(404))
def get_pe(job_id: str, queue: QueueDep, partial: str = PARTIAL_QUERY):
    return job_status(queue, job_id, kind="pe", what="PE analysis", pattern=JOB_ID, partial=partial)
