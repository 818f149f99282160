"""Layer-by-layer consumers of attention maps (issue 10): each layer's maps are reduced as the
forward pass reaches them and then dropped, so ``layers x heads x n^2`` is never held at once.

A consumer is called as ``consumer(layer, weights)`` with ``weights`` [1, head, query, key] on the
model's device (``workers.models.adapters.forward_streamed``). The same consumers fed from an
all-at-once ``ModelRun.attentions`` array (``feed``) give the same numbers, bit for bit: the
tests compare both paths.

Notebook use::

    from workers.models import load_model
    from workers.models.adapters import encode, forward_streamed
    from workers.engine.streaming import AttentionStats
    loaded = load_model("minilm"); enc = encode(loaded, "some text")
    stats = AttentionStats(loaded.n_layers, loaded.n_heads, causal=loaded.causal)
    hidden = forward_streamed(loaded, enc, stats)
    stats.max                         # [layer, head, key]
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np
import torch

from workers.analyses.tsne import TSNEOptions, TSNEResult, embed_layer, select_indices
from workers.core.errors import HeadscopeError
from workers.core.progress import Progress, no_progress

logger = logging.getLogger(__name__)

Consumer = Callable[[int, torch.Tensor], None]


def kept_index(n: int, keep: np.ndarray | None) -> np.ndarray:
    """Indices of the kept tokens (all when ``keep`` is None); an error when none is left."""
    if keep is None:
        return np.arange(n)
    idx = np.flatnonzero(np.asarray(keep, dtype=bool))
    if idx.size == 0:
        raise HeadscopeError("no tokens left after removing special tokens")
    return idx


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


class HeadKeeper:
    """Keeps the full maps of a few (layer, head) pairs, float64 on the host: ``maps[(l, h)]`` [n, n]."""

    def __init__(self, pairs: Sequence[tuple[int, int]]):
        self.pairs = set(pairs)
        self.maps: dict[tuple[int, int], np.ndarray] = {}

    def __call__(self, layer: int, weights: torch.Tensor) -> None:
        for lay, head in self.pairs:
            if lay == layer:
                self.maps[(lay, head)] = weights[0, head].double().cpu().numpy()


class LayerHeadTSNE:
    """Attention-head t-SNE (docs/analyses.md#attention-head-t-sne) of the chosen heads, embedded layer by layer as the maps arrive.

    Only one layer's P (float64, [head, m, m]) is alive at a time. Results are gathered in layer order:
    ``embedding`` [layer, head, token, 2], ``kl`` [layer, head], ``kl_restarts`` [layer, head, restart].
    """

    def __init__(
        self,
        n_layers: int,
        n_heads: int,
        *,
        layers: int | str | list[int] | None = "all",
        heads: int | str | list[int] | None = "all",
        keep: np.ndarray | None = None,
        options: TSNEOptions | None = None,
        progress: Progress | None = None,
    ):
        self.layers = select_indices(layers, n_layers, "layer")
        self.heads = select_indices(heads, n_heads, "head")
        self.keep = keep
        self.options = options or TSNEOptions()
        self.progress = progress or no_progress
        self.results: dict[int, TSNEResult] = {}

    def __call__(self, layer: int, weights: torch.Tensor) -> None:
        if layer not in self.layers:
            return
        from workers.analyses.tsne.chain import device_path

        if self.options.engine == "fast" and device_path(
            weights.device
        ):  # a GPU worker: P stays there
            from workers.analyses.tsne.engines import embed_layer_on_device

            self.results[layer] = embed_layer_on_device(
                weights[0, self.heads], keep=self.keep, options=self.options
            )
        else:
            a = weights[0, self.heads].double().cpu().numpy()  # [head, n, n]
            self.results[layer] = embed_layer(a, keep=self.keep, options=self.options)
        done = len(self.results)
        self.progress(
            done / len(self.layers), f"head t-SNE: layer {layer} ({done}/{len(self.layers)} layers)"
        )

    def backends(self) -> dict[str, object]:
        """Which fast engine embedded the layers (``"cpu"``, ``"triton-wide"``, or several joined by
        ``+`` in layer order) and every fallback note, for the result."""
        ran = [self.results[lay].extra.get("backend") for lay in self.layers if lay in self.results]
        notes = [
            n
            for lay in self.layers
            if lay in self.results
            for n in self.results[lay].extra.get("fallback", [])
        ]
        names = list(dict.fromkeys(r for r in ran if r))
        return {"backend": "+".join(names) or None, "fallback": list(dict.fromkeys(notes))}

    def gather(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """(embedding [L, H, m, 2], kl [L, H], kl_restarts [L, H, k], seconds) in layer order."""
        missing = [lay for lay in self.layers if lay not in self.results]
        if missing:
            raise RuntimeError(f"head t-SNE: no attention arrived for layers {missing}")
        res = [self.results[lay] for lay in self.layers]
        return (
            np.stack([r.embedding for r in res]),
            np.stack([r.kl for r in res]),
            np.stack([r.kl_restarts for r in res]),
            float(sum(r.tsne_s for r in res)),
        )


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


class LayerParts:
    """Hands each finished layer of a grid head t-SNE to ``publish(layer, part)`` (``workers.core.partials``):
    registered after the t-SNE and packing consumers, so that layer's map, KL and bytes are ready."""

    def __init__(self, tsne: LayerHeadTSNE, packed: PackedAttention | None, *,
                 publish: Callable[[int, dict[str, object]], None]):  # fmt: skip
        self.tsne, self.packed, self.publish = tsne, packed, publish

    def __call__(self, layer: int, weights: torch.Tensor) -> None:
        from workers.core.packing import encode_packed
        from workers.core.partials import part_fields

        if layer not in self.tsne.results:
            return
        r, packed = self.tsne.results[layer], self.packed
        attention: dict[str, object] = {}
        if packed is not None and packed.omitted:
            attention = {"attention_omitted": packed.omitted}
        elif packed is not None and layer in packed.bytes:
            attention = encode_packed(packed.bytes[layer][None])
        kept = kept_index(weights.shape[-1], self.tsne.keep)
        self.publish(layer, part_fields(layer=layer, layers=self.tsne.layers, heads=self.tsne.heads,
                                        kept=kept.tolist(), embedding=r.embedding, kl=r.kl,
                                        kl_restarts=r.kl_restarts, engine=self.tsne.options.engine,
                                        attention=attention))  # fmt: skip


def feed(attentions: np.ndarray, *consumers: Consumer) -> None:
    """Feed an all-at-once [layer, head, query, key] array to consumers, layer by layer."""
    for layer in range(attentions.shape[0]):
        w = torch.from_numpy(np.ascontiguousarray(attentions[layer]))[None]
        for c in consumers:
            c(layer, w)
