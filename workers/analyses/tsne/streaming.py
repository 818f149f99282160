"""Attention-head t-SNE embedded layer by layer as the streamed forward pass reaches each layer
(``workers.models.streaming``), and each finished layer handed on for the gallery."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from workers.analyses.attention.streaming import PackedAttention
from workers.analyses.tsne import TSNEOptions, TSNEResult, embed_layer, select_indices
from workers.core.progress import Progress, no_progress
from workers.models.streaming import kept_index


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


class LayerPartials:
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
