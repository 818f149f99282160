"""Max and mean attention, and every head's map packed as bytes, reduced layer by layer as the
streamed forward pass reaches each layer (``workers.models.streaming``)."""

from __future__ import annotations

import numpy as np
import torch

from workers.analyses.tsne import select_indices
from workers.models.streaming import kept_index


def visible_counts(idx: np.ndarray, *, causal: bool, window: int | None = None) -> np.ndarray:
    """[key]: how many kept queries can see each kept key (all of them; ``i >= j`` when causal;
    ``j <= i < j + window`` in a sliding-window layer)."""
    m = idx.size
    if causal and window:
        return (np.searchsorted(idx, idx + window, side="left") - np.arange(m)).astype(np.float64)
    return np.arange(m, 0, -1, dtype=np.float64) if causal else np.full(m, float(m))


class AttentionStats:
    """Max and mean attention each key receives (docs/analyses.md#maximum-attention), per layer and head.

    ``max[l, h, j] = max_i A[l, h, i, j]`` and ``mean[l, h, j] = mean_i A[l, h, i, j]`` over the kept
    queries ``i`` that can see key ``j``: every query for an encoder, the queries ``i >= j`` for a
    causal decoder (a later query is the only kind that sees j; the others' zeros are not averaged in),
    the queries ``j <= i < j + w`` in a layer with a sliding window ``w`` (``windows``, per layer).
    Reduced on the model's device; only [layer, head, key] comes back.
    """

    def __init__(
        self,
        n_layers: int,
        n_heads: int,
        *,
        keep: np.ndarray | None = None,
        causal: bool = False,
        windows: list[int | None] | None = None,
    ):
        self.keep = keep
        self.causal = causal
        self.windows = windows or []
        self.max: np.ndarray | None = None  # [layer, head, key]
        self.mean: np.ndarray | None = None
        self.n_layers, self.n_heads = n_layers, n_heads

    def __call__(self, layer: int, weights: torch.Tensor) -> None:
        a = weights[0]  # [head, query, key]
        idx = kept_index(a.shape[-1], self.keep)
        if idx.size < a.shape[-1]:
            it = torch.as_tensor(idx, device=a.device)
            a = a.index_select(1, it).index_select(2, it)
        if self.max is None:
            shape = (self.n_layers, self.n_heads, idx.size)
            self.max, self.mean = np.zeros(shape), np.zeros(shape)
        assert self.mean is not None
        window = self.windows[layer] if layer < len(self.windows) else None
        counts = visible_counts(idx, causal=self.causal, window=window)
        self.max[layer] = a.amax(dim=1).double().cpu().numpy()
        self.mean[layer] = a.double().sum(dim=1).cpu().numpy() / counts


class PackedAttention:
    """The chosen heads' maps as bytes (``workers.core.packing``), quantised layer by layer as they arrive:
    the dashboard's head and model views for every embedded head, without holding float maps."""

    def __init__(self, n_layers: int, n_heads: int, *, layers: int | str | list[int] | None = "all",
                 heads: int | str | list[int] | None = "all", keep: np.ndarray | None = None):  # fmt: skip
        self.layers = select_indices(layers, n_layers, "layer")
        self.heads = select_indices(heads, n_heads, "head")
        self.keep = keep
        self.bytes: dict[int, np.ndarray] = {}  # layer -> [head, m, m] uint8
        self.omitted: str | None = None

    def __call__(self, layer: int, weights: torch.Tensor) -> None:
        from workers.core.packing import packed_shape, quantise

        if layer not in self.layers:
            return
        idx = kept_index(weights.shape[-1], self.keep)
        if self.omitted is None:
            _, self.omitted = packed_shape(self.layers, self.heads, idx)
        if self.omitted:
            return
        a = weights[0, self.heads].double().cpu().numpy()[np.ix_(range(len(self.heads)), idx, idx)]
        self.bytes[layer] = quantise(a)

    def fields(self) -> dict[str, object]:
        """``workers.core.packing.pack_attention``'s fields for what arrived."""
        from workers.core.packing import encode_packed

        if self.omitted:
            return {"attention_omitted": self.omitted}
        return encode_packed(np.stack([self.bytes[lay] for lay in self.layers]))
