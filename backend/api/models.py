"""``GET /api/models``: the catalogue (names only come from here; no paths from users), and
``check_model``, the check of a name (and a head) that jobs on any model make before queueing."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from backend.api.analyses import model_facts
from workers.core.contracts import LASF_ABOUT
from workers.core.errors import HeadscopeError
from workers.models.catalogue import DEFAULT_MODEL, get_catalogue

router = APIRouter(tags=["models"])


@router.get("/api/models")
def list_models() -> dict:
    cat = get_catalogue()
    models = []
    for name in cat.names_available():
        summary = cat.get(name).summary()
        summary.pop("source", None)
        models.append(summary)
    lasf = [
        {"name": n, "base_model": "minilm", "description": f"{about} (docs/lasf.md)"}
        for n, about in LASF_ABOUT.items()
    ]
    return {"default": DEFAULT_MODEL, "models": models, "lasf_models": lasf}


def check_model(model: str, *, layer: int | None = None, head: int | None = None) -> None:
    """``model`` is in the catalogue and ``layer`` / ``head`` in its ranges; a 422 names what is
    not."""
    try:
        spec = get_catalogue().get(model)
    except HeadscopeError as exc:
        raise HTTPException(422, str(exc)) from None
    facts = model_facts(spec)
    n_layers, n_heads = facts.get("n_layers"), facts.get("n_heads")
    if layer is not None and n_layers and layer >= n_layers:
        raise HTTPException(
            422, f"layer {layer} is out of range: {model} has layers 0-{n_layers - 1}"
        )
    if head is not None and n_heads and head >= n_heads:
        raise HTTPException(422, f"head {head} is out of range: {model} has heads 0-{n_heads - 1}")
