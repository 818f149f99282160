"""``POST /api/analyses`` (202 + id) and ``GET /api/analyses/{id}`` (JobStatus)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from backend.api.common import PARTIAL_QUERY, job_status
from backend.deps import QueueDep, StoreDep, WriteAccess
from backend.errors import error_responses
from backend.store import Store
from backend.tokens import count_tokens, is_blank
from workers.contracts import LASF_MODELS, AnalysisRequest, JobStatus, is_lasf_model
from workers.errors import (
    EmptyTextError,
    HeadscopeError,
    NotFoundError,
    OutOfRangeError,
    TextTooLongError,
)
from workers.models.catalogue import ModelSpec, get_catalogue
from workers.protocol import JOB_ID

router = APIRouter(tags=["analyses"])

WHOLE_TEXT_KINDS = {"max-attention", "decomposition", "head-tsne", "hidden-tsne", "robustness", "lasf"}


@lru_cache(maxsize=64)
def model_facts(spec: ModelSpec) -> dict[str, Any]:
    """Layers, heads, token limit of a catalogue entry (its config.json, read once)."""
    return spec.summary()


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
    """What the API can check without the model: the name, layer/head ranges, the token count."""
    cat = get_catalogue()
    name = req.model
    if is_lasf_model(name):
        if store is None:
            raise HeadscopeError(f"{name}: LasF models need the checkpoint store")
        name = lasf_base(name, store)
    spec = cat.get(name)
    facts = model_facts(spec)
    o = req.options
    n_layers, n_heads = facts.get("n_layers"), facts.get("n_heads")
    kinds = set(req.analyses)
    if isinstance(o.layer, int) and n_layers:
        top = n_layers if kinds <= {"hidden-tsne", "word-tsne"} else n_layers - 1
        if not 0 <= o.layer <= top:
            raise OutOfRangeError(f"layer {o.layer} is out of range: {req.model} has layers 0-{top}")
    if isinstance(o.head, int) and n_heads and not 0 <= o.head < n_heads:
        raise OutOfRangeError(f"head {o.head} is out of range: {req.model} has heads 0-{n_heads - 1}")
    if isinstance(o.hidden_layer, int) and n_layers and not 0 <= o.hidden_layer <= n_layers:
        raise OutOfRangeError(
            f"hidden_layer {o.hidden_layer} is out of range: {req.model} has states 0-{n_layers} "
            f"(0 = embedding output, l + 1 = output of layer l)"
        )
    if is_blank(spec, req.text):
        raise EmptyTextError("the text is empty after normalisation (only invisible or control characters)")
    if not o.truncate and kinds & WHOLE_TEXT_KINDS:
        counted = count_tokens(spec, req.text)
        if counted is not None and counted[0] > counted[1]:
            raise TextTooLongError(count=counted[0], limit=counted[1], model=req.model)


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
def get_analysis(job_id: str, queue: QueueDep, partial: str = PARTIAL_QUERY):
    """Status, progress, partial sections while running (``?partial=`` picks which), the result when finished."""
    return job_status(queue, job_id, kind="analysis", what="analysis", pattern=JOB_ID, partial=partial)
