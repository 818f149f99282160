"""headscope's workers: the analysis core, the engine that runs it, and the queue service.

What a notebook needs is importable from here, loaded on first use so ``import workers`` stays
light (the backend imports torch-free parts of this package and never torch)::

    from workers import analyze, decompose, head_tsne, load_model, max_attention, run_text
    loaded = load_model("minilm")
    result = analyze(loaded, "some text", kinds)   # the service's result JSON; kinds: registry.kinds()
    run = run_text(loaded, "some text")
    ma = max_attention(run.attentions)            # [layer, head, token]
    res = head_tsne(run.attentions, layers=[2], heads=[5])                   # HeadTSNEResult
    dec = decompose(load_model("minilm", dtype="float64"), "some text")     # Decomposition
    at = atlas("minilm")                          # the head atlas (docs/atlas.md); or a saved JSON
    label_of(at, 0, 2)                            # "previous-token"; None: no label

The layout (one folder per idea, imports pointing one way) is in docs/architecture.md.
"""

from typing import Any

_LAZY = {
    "analyze": "workers.engine.pipeline",
    "atlas": "workers.engine.atlas",
    "head_labels": "workers.engine.atlas",
    "label_of": "workers.engine.atlas",
    "attention_result": "workers.engine.external",
    "attention_reduce": "workers.analyses.attention.maps",
    "max_attention": "workers.analyses.attention.maps",
    "mean_attention": "workers.analyses.attention.maps",
    "HeadTSNEResult": "workers.analyses.tsne",
    "TSNEOptions": "workers.analyses.tsne",
    "TSNEResult": "workers.analyses.tsne",
    "embed_affinities": "workers.analyses.tsne",
    "head_tsne": "workers.analyses.tsne",
    "head_affinities": "workers.analyses.tsne.affinities",
    "kl_divergence": "workers.analyses.tsne.affinities",
    "perplexity_affinities": "workers.analyses.tsne.affinities",
    "decompose": "workers.analyses.decomposition",
    "decompose_batch": "workers.analyses.decomposition",
    "Decomposition": "workers.analyses.decomposition",
    "load_model": "workers.models",
    "run_text": "workers.models",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'workers' has no attribute {name!r}")
