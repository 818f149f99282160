"""t-SNE (docs/tsne.md; the definitions: docs/analyses.md): the engine, its public entry
(``embed``: ``embed_affinities``, ``head_tsne``, ``embed_layer``), and the t-SNE views of a text
(``spec``, ``section``). The names below load on first use, so reading this folder's spec imports
no torch; the engine's modules import only downward (see ``options``).
"""

from __future__ import annotations

import importlib
from typing import Any

_FROM = {
    "embed_affinities": "embed",
    "embed_layer": "embed",
    "head_tsne": "embed",
    "ENGINES": "options",
    "INITS": "options",
    "HeadTSNEResult": "options",
    "TSNEOptions": "options",
    "TSNEResult": "options",
    "select_indices": "options",
    "with_overrides": "options",
}
__all__ = sorted(_FROM)


def __getattr__(name: str) -> Any:
    if name in _FROM:
        return getattr(importlib.import_module(f"{__name__}.{_FROM[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
