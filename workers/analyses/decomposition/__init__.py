"""Exact additive decomposition of every hidden state (docs/decomposition.md): a package whose
modules import downward only: ``workers.models.sublayers`` (where a model keeps its parts, the recording hooks) ->
``terms`` (the decomposition itself) -> ``stats`` (importance curves, model comparison, the
result section) -> this entry.

Notebook use::

    from workers.models import load_model
    from workers.analyses.decomposition import decompose
    dec = decompose(load_model("minilm", dtype="float64"), "The cat sat on the mat.")
"""

from __future__ import annotations

import importlib
from typing import Any

_FROM = {
    "CONVENTION": "terms",
    "Decomposition": "terms",
    "ImportanceCurves": "stats",
    "TERM_LABELS": "terms",
    "decompose": "terms",
    "decompose_batch": "terms",
    "decompose_encoded": "terms",
    "decomposition_section": "stats",
    "importance_curves": "stats",
    "importance_spearman": "stats",
    "kept_tokens": "stats",
    "spearman_per_state": "stats",
}
__all__ = sorted(_FROM)


def __getattr__(name: str) -> Any:
    """The package's names load on first use, so reading its spec imports no torch."""
    if name in _FROM:
        return getattr(importlib.import_module(f"{__name__}.{_FROM[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
