"""``POST /api/pe-analyses`` and ``GET /api/pe-analyses/{id}`` (the job routes,
``backend.api.jobs``; no cancel: a PE analysis takes seconds)."""

from __future__ import annotations

from fastapi import APIRouter

from backend.api.checkpoints import known_checkpoint
from backend.api.jobs import job_routes
from backend.queue import JobQueue
from backend.store import Store
from workers.core.contracts import PEAnalysisRequest
from workers.core.errors import HeadscopeError, NotFoundError

router = APIRouter(tags=["positional encodings"])


def check_pe(req: PEAnalysisRequest, queue: JobQueue, store: Store) -> None:
    """Every checkpoint named is known and has the tensor named; uploads in use restart their
    expiry clock."""
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


job_routes(
    router,
    path="/api/pe-analyses",
    kind="pe",
    request_model=PEAnalysisRequest,
    check=check_pe,
    what="PE analysis",
    names=("submit_pe", "get_pe", None),
    docs=("""Queue a PE analysis of one or more checkpoints (docs/positional.md).""", None, None),
)
