"""The max-attention section: the streamed pass's ``AttentionStats`` as JSON (docs/results.md)."""

from __future__ import annotations

from typing import Any

import numpy as np

from workers.analyses.attention.spec import MaxAttentionOptions
from workers.analyses.attention.streaming import AttentionStats
from workers.models.families import layer_windows


def plan(ctx: Any, options: MaxAttentionOptions) -> dict[str, Any]:
    loaded = ctx.loaded
    return {
        "stats": AttentionStats(
            loaded.n_layers,
            loaded.n_heads,
            keep=ctx.keep,
            causal=loaded.causal,
            windows=layer_windows(loaded.config),
        )
    }


def max_attention(ctx: Any, options: MaxAttentionOptions) -> dict[str, Any]:
    stats = ctx.consumers["stats"]
    assert isinstance(stats, AttentionStats)
    ctx.run  # noqa: B018 - the streamed pass fills the consumers
    assert stats.max is not None and stats.mean is not None
    kept = np.arange(ctx.encoded.n) if ctx.keep is None else np.flatnonzero(ctx.keep)
    out = max_attention_section(stats, kept, causal=ctx.loaded.causal)
    windows = layer_windows(ctx.loaded.config)
    if any(
        windows
    ):  # Gemma 2/3: local layers see the last w keys only (zeros beyond; means over them)
        out["windows"] = windows
    return out


def max_attention_section(
    stats: AttentionStats, kept: np.ndarray, *, causal: bool
) -> dict[str, Any]:
    """The max-attention section from a fed ``AttentionStats`` (also ``workers.engine.external``)."""
    assert stats.max is not None and stats.mean is not None
    return {
        "max_attention": stats.max.tolist(),  # [layer][head][token]
        "mean_attention": stats.mean.tolist(),  # [layer][head][token]
        "kept": kept.tolist(),
        "causal": causal,
        "over": "the queries i >= j that can see key j" if causal else "every query",
    }
