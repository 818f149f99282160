"""``POST /api/analyses`` (202 + id), ``GET /api/analyses/{id}`` (JobStatus) and ``DELETE``
(cancel): the job routes (``backend.api.jobs``) after the checks the API makes before queueing."""

from __future__ import annotations

from fastapi import APIRouter

from backend.api.jobs import job_routes
from backend.api.task_sets import check_stored_set
from backend.checks import check_text_request, model_facts  # noqa: F401 - model_facts re-exported
from backend.store import Store
from workers.analyses.circuits.spec import CIRCUITS_SET
from workers.core import registry
from workers.core.contracts import LASF_MODELS, AnalysisRequest, is_lasf_model
from workers.core.errors import HeadscopeError, NotFoundError
from workers.inputs.task_sets import KIND as TASK_SET
from workers.inputs.task_sets import is_set_id

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
    of a LasF layer being its base model; an uploaded corpus an analysis reads is in the store."""
    name = req.model
    if is_lasf_model(name):
        if store is None:
            raise HeadscopeError(f"{name}: LasF models need the checkpoint store")
        name = lasf_base(name, store)
    check_text_request(
        model=req.model, name=name, text=req.text, kinds=list(req.analyses), options=req.options
    )
    if CIRCUITS_SET in req.analyses and is_set_id(req.text) and store is not None:
        check_stored_set(req.text, store)  # a stored task set (docs/circuits.md)
    corpus = getattr(req.options, "corpus", None)  # the atlas' corpus probe (docs/atlas.md)
    if store is not None and corpus and not corpus.startswith("builtin-"):
        if registry.reads_corpus(req.analyses):
            meta = store.corpus(corpus)  # as the corpus analysis' check (backend.api.corpora)
            if meta is None:
                raise NotFoundError.of("corpus", corpus, "upload it first")
            if meta.get("kind") == TASK_SET:
                raise HeadscopeError(f"{corpus} is a task set (circuits on a set), not a corpus")
            store.touch_corpus(corpus)  # its expiry clock restarts


job_routes(
    router,
    path="/api/analyses",
    kind="analysis",
    request_model=AnalysisRequest,
    check=lambda req, queue, store: check_request(req, store),
    what="analysis",
    names=("submit_analysis", "get_analysis", "cancel_analysis"),
    docs=(
        """Queue a text analysis; identical requests get the same id, job and result.""",
        """Status, progress, partial sections while running (``?partial=`` picks which), the result when
        finished (``?result=none``: not even then).""",
        """Cancel a queued or running analysis (a finished one is left as it is): a running one stops at its
        next progress step, keeping nothing (edge-attribution: between EAP-IG's layers and circuit batches).""",
    ),
    submit_errors=(),
    result_query=True,
)
