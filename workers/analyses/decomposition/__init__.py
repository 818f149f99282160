"""Exact additive decomposition of every hidden state (docs/decomposition.md): a package whose
modules import downward only: ``model`` (where a model keeps its parts, the recording hooks) ->
``terms`` (the decomposition itself) -> ``stats`` (importance curves, model comparison, the
result section) -> this entry.

Notebook use::

    from workers.models import load_model
    from workers.analyses.decomposition import decompose
    dec = decompose(load_model("minilm", dtype="float64"), "The cat sat on the mat.")
"""

from workers.analyses.decomposition.stats import (
    ImportanceCurves,
    decomposition_section,
    importance_curves,
    importance_spearman,
    kept_tokens,
    spearman_per_state,
)
from workers.analyses.decomposition.terms import (
    CONVENTION,
    TERM_LABELS,
    Decomposition,
    decompose,
    decompose_batch,
    decompose_encoded,
)

__all__ = [
    "CONVENTION",
    "TERM_LABELS",
    "Decomposition",
    "ImportanceCurves",
    "decompose",
    "decompose_batch",
    "decompose_encoded",
    "decomposition_section",
    "importance_curves",
    "importance_spearman",
    "kept_tokens",
    "spearman_per_state",
]
