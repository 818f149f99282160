"""Models: the catalogue of names users may pick, the cached loader and the architecture adapters."""

from workers.models.adapters import Encoded, ModelRun, encode, pooled_states, run_text
from workers.models.catalogue import DEFAULT_MODEL, Catalogue, ModelSpec, get_catalogue, set_catalogue
from workers.models.loader import LoadedModel, clear_cache, load_model

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
