"""The analysis core: pure functions on numpy/torch arrays, one module per analysis of docs/analyses.md.

Nothing here imports FastAPI, Dash, Redis or RQ (tests/test_layering.py proves it), so every view of
the dashboard is also a notebook call, and what a notebook needs is importable from here::

    from workers.models import load_model, run_text
    from workers.analysis import analyze, decompose, head_tsne, max_attention
    loaded = load_model("minilm")
    result = analyze(loaded, "some text", ["max-attention", "head-tsne"])   # the service's result JSON
    run = run_text(loaded, "some text")
    ma = max_attention(run.attentions)            # [layer, head, token]
    res = head_tsne(run.attentions, layers=[2], heads=[5])                   # HeadTSNEResult
    dec = decompose(load_model("minilm", dtype="float64"), "some text")     # Decomposition

``analyze`` and the decomposition load on first use (``__getattr__``), so importing this package
stays as light as its t-SNE and attention parts.
"""

from typing import Any

from workers.analysis.attention import attention_reduce, max_attention, mean_attention
from workers.analysis.tsne import (
    HeadTSNEResult,
    TSNEOptions,
    TSNEResult,
    embed_affinities,
    head_tsne,
)
from workers.analysis.tsne.affinities import head_affinities, kl_divergence, perplexity_affinities

_LAZY = {
    "analyze": "workers.analysis.pipeline",
    "decompose": "workers.analysis.decomposition",
    "decompose_batch": "workers.analysis.decomposition",
    "Decomposition": "workers.analysis.decomposition",
    "attention_result": "workers.analysis.external",
}

__all__ = [
    "Decomposition",
    "HeadTSNEResult",
    "TSNEOptions",
    "TSNEResult",
    "analyze",
    "attention_reduce",
    "attention_result",
    "decompose",
    "decompose_batch",
    "embed_affinities",
    "head_affinities",
    "head_tsne",
    "kl_divergence",
    "max_attention",
    "mean_attention",
    "perplexity_affinities",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'workers.analysis' has no attribute {name!r}")
