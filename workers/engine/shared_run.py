"""One forward pass of a text shared by the ``analyze`` calls of one job (docs/dashboard.md).

The service computes a text explorer request in stages (``workers.queue.jobs``): max attention and the
chosen head first, then every head's t-SNE (the gallery), then the hidden states' t-SNE. Each stage
is an ``analyze`` call with its own options; without this object each ran the model again. With it
the first stage's pass keeps the hidden states (always) and, when a later stage reads attention and
the maps fit, every layer's attention maps; later stages replay them to their consumers layer by
layer, so the job runs the model once. The replayed tensors are the very ones the forward handed
out, so every consumer computes what it would have computed in the pass itself, bit for bit.

When the maps do not fit (``layers x heads x n^2`` float32 over ``KEEP_MAX_BYTES``, or over what the
memory budget leaves), the later stage runs the model again and ``why_again`` says so in its
progress line. Notebook use::

    shared = SharedRun(keep_maps=True)
    analyze(loaded, text, [MAX_ATTENTION], shared=shared)
    analyze(loaded, text, [HEAD_TSNE], {"layer": "all", "head": "all"}, shared=shared)   # no new forward
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

logger = logging.getLogger(__name__)

KEEP_MAX_BYTES = (
    1024**3
)  # at most 1 GiB of float32 maps (SmolLM2 at 452 tokens: 0.21 GiB; at 2048: 4.2)
GIB = 1024**3


@dataclass
class SharedRun:
    """The hidden states (and, when kept, the attention maps) of the first pass over a text.

    ``key`` is what decides the pass: (model, text, truncate, chat). ``maps[layer]`` holds the
    tensor ``[1, head, query, key]`` the model produced, on its device.
    """

    keep_maps: bool = False
    max_bytes: int | None = None  # default KEEP_MAX_BYTES
    key: tuple[Any, ...] | None = None
    encoded: Any = None
    hidden: np.ndarray | None = None  # [layer + 1, token, dim]
    maps: dict[int, torch.Tensor] = field(default_factory=dict)
    why_again: str | None = None  # why a later stage's consumers need the model again
    forwards: int = 0  # passes run through the model (the tests count them)

    def has_states(self, key: tuple[Any, ...]) -> bool:
        return self.key == key and self.hidden is not None

    def has_maps(self, key: tuple[Any, ...], n_layers: int) -> bool:
        return self.has_states(key) and len(self.maps) == n_layers

    def keeper(self, *, n_layers: int, n_heads: int, n: int) -> Any:
        """The consumer that keeps every layer's maps, or None when they are not wanted or too large."""
        if not self.keep_maps:
            return None
        size = n_layers * n_heads * n * n * 4
        budget = KEEP_MAX_BYTES if self.max_bytes is None else self.max_bytes
        try:
            from workers.engine.memory import memory_budget

            budget = min(budget, memory_budget() // 4)  # what the rest of the job leaves, roughly
        except Exception:  # pragma: no cover - settings unavailable in a bare notebook
            pass
        if size > budget:
            self.why_again = (
                f"{n_layers} x {n_heads} maps at {n} tokens, {size / GIB:.1f} GiB, are more than the "
                f"{budget / GIB:.1f} GiB kept between stages"
            )
            return None
        self.maps.clear()

        def keep(layer: int, weights: torch.Tensor) -> None:
            self.maps[layer] = weights.detach()

        return keep

    def store(self, key: tuple[Any, ...], encoded: Any, hidden: np.ndarray) -> None:
        self.key, self.encoded, self.hidden = key, encoded, hidden
        self.forwards += 1

    def replay(self, sink: Any) -> None:
        """Hand the kept maps to ``sink(layer, weights)`` in layer order, as the forward did."""
        for layer in sorted(self.maps):
            sink(layer, self.maps[layer])

    def release(self) -> None:
        """Drop the maps (the job's last stage that reads attention has them)."""
        self.maps.clear()
