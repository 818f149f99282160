"""The analysis core: pure functions on numpy/torch arrays, one module per analysis of docs/analyses.md.

Nothing here imports FastAPI, Dash, Redis or RQ (tests/test_layering.py proves it), so every view of
the dashboard is also a notebook call::

    from workers.models import load_model, run_text
    from workers.analysis import max_attention, head_tsne
    run = run_text(load_model("minilm"), "some text")
    ma = max_attention(run.attentions)            # [layer, head, token]
    res = head_tsne(run.attentions, layers=[2], heads=[5])
"""

from workers.analysis.attention import attention_reduce, max_attention, mean_attention
from workers.analysis.tsne import TSNEOptions, TSNEResult, embed_affinities, head_tsne
from workers.analysis.tsne.affinities import head_affinities, kl_divergence, perplexity_affinities

__all__ = [
    "TSNEOptions",
    "TSNEResult",
    "attention_reduce",
    "embed_affinities",
    "head_affinities",
    "head_tsne",
    "kl_divergence",
    "max_attention",
    "mean_attention",
    "perplexity_affinities",
]
