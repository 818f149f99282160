"""``GET /api/models``: the catalogue (names only come from here; no paths from users)."""

from __future__ import annotations

from fastapi import APIRouter

from workers.core.contracts import LASF_ABOUT
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
