"""The streamed forward pass's consumers: each layer's maps are handed to them as the pass reaches
the layer and then dropped, so ``layers x heads x n^2`` is never held at once.

A consumer is called as ``consumer(layer, weights)`` with ``weights`` [1, head, query, key] on the
model's device (``workers.models.adapters.forward_streamed``). The all-at-once path
(``run_text`` and the analyses' functions on ``ModelRun.attentions``) gives the same numbers:
``tests/test_llm_families.py`` compares both. The analyses' own consumers live beside their maths
(``workers.analyses.attention.streaming``, ``workers.analyses.tsne.streaming``).

Notebook use::

    from workers.models import load_model
    from workers.models.adapters import encode, forward_streamed
    from workers.analyses.attention.streaming import AttentionStats
    loaded = load_model("minilm"); enc = encode(loaded, "some text")
    stats = AttentionStats(loaded.n_layers, loaded.n_heads, causal=loaded.causal)
    hidden = forward_streamed(loaded, enc, stats)
    stats.max                         # [layer, head, key]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from workers.core.errors import HeadscopeError

Consumer = Callable[[int, torch.Tensor], None]


def kept_index(n: int, keep: np.ndarray | None) -> np.ndarray:
    """Indices of the kept tokens (all when ``keep`` is None); an error when none is left."""
    if keep is None:
        return np.arange(n)
    idx = np.flatnonzero(np.asarray(keep, dtype=bool))
    if idx.size == 0:
        raise HeadscopeError("no tokens left after removing special tokens")
    return idx


class HeadKeeper:
    """Keeps the full maps of a few (layer, head) pairs, float64 on the host: ``maps[(l, h)]`` [n, n]."""

    def __init__(self, pairs: Sequence[tuple[int, int]]):
        self.pairs = set(pairs)
        self.maps: dict[tuple[int, int], np.ndarray] = {}

    def __call__(self, layer: int, weights: torch.Tensor) -> None:
        for lay, head in self.pairs:
            if lay == layer:
                self.maps[(lay, head)] = weights[0, head].double().cpu().numpy()
