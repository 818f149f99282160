"""Models: the catalogue of names users may pick, the cached loader and the architecture adapters.

The catalogue is imported eagerly (it needs no torch, so the backend can list models); the loader
and adapters (torch, transformers) load on first use of their names (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from workers.models.catalogue import (
    DEFAULT_MODEL,
    Catalogue,
    ModelSpec,
    get_catalogue,
    set_catalogue,
)

if TYPE_CHECKING:
    from workers.models.adapters import Encoded, ModelRun, encode, pooled_states, run_text
    from workers.models.loader import LoadedModel, clear_cache, load_model

_LAZY = {
    "Encoded": "workers.models.adapters",
    "ModelRun": "workers.models.adapters",
    "encode": "workers.models.adapters",
    "pooled_states": "workers.models.adapters",
    "run_text": "workers.models.adapters",
    "LoadedModel": "workers.models.loader",
    "clear_cache": "workers.models.loader",
    "load_model": "workers.models.loader",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_MODEL",
    "Catalogue",
    "Encoded",
    "LoadedModel",
    "ModelRun",
    "ModelSpec",
    "clear_cache",
    "encode",
    "get_catalogue",
    "load_model",
    "pooled_states",
    "run_text",
    "set_catalogue",
]
