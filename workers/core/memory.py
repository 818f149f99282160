"""Memory of a request: the model's shapes, what every analysis' estimate adds to, and the budget.

Torch-free, below the analysis core: each analysis' spec estimates its own peak from a ``Base``
(``Footprint``), the engine's memory plan (``workers.engine.memory``) sums them for a text request,
and the API checks a comparison's plan (``workers.analyses.compare.plan``) before queueing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from workers.core.errors import HeadscopeError

GIB = 1024**3
F8 = 8  # float64 bytes (P matrices, t-SNE, host copies)
RUNTIME = (
    GIB // 2
)  # Python, torch and transformers themselves (measured: docs/models.md, "Real sizes")


class MemoryBudgetError(HeadscopeError):
    code = "too_large"

    def __init__(
        self,
        *,
        estimate: int,
        budget: int,
        parts: dict[str, int],
        what: str,
        advice: str = "use a shorter text, one layer or head, fewer views or a smaller model",
    ):
        self.estimate, self.budget, self.parts = estimate, budget, parts
        top = ", ".join(
            f"{k} {v / GIB:.1f}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1])[:4]
        )
        super().__init__(
            f"{what} needs about {estimate / GIB:.1f} GiB of memory ({top} GiB) but the memory budget is "
            f"{budget / GIB:.1f} GiB (HEADSCOPE_MEMORY_BUDGET_GB); {advice}"
        )


def memory_budget() -> int:
    """Bytes a request may use: ``HEADSCOPE_MEMORY_BUDGET_GB`` (GiB) or the machine's memory."""
    from workers.core.settings import get_settings

    budget = get_settings().memory_budget_gb
    if budget is not None:
        return int(budget * GIB)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


@dataclass
class ModelFacts:
    """The shapes the estimate needs (``workers.models.families.config_facts`` + parameter count)."""

    n_layers: int
    n_heads: int
    hidden: int
    intermediate: int
    n_params: int
    dtype_bytes: int = 4
    head_dim: int = 0
    vocab: int = 0

    @classmethod
    def of(cls, loaded: Any) -> ModelFacts:
        cfg = loaded.config
        hidden = int(cfg.get("hidden_size") or cfg.get("n_embd"))
        inter = int(cfg.get("intermediate_size") or cfg.get("n_inner") or 4 * hidden)
        head_dim = int(cfg.get("head_dim") or hidden // loaded.n_heads)
        return cls(
            loaded.n_layers,
            loaded.n_heads,
            hidden,
            inter,
            loaded.n_params,
            loaded.dtype.itemsize,
            head_dim,
            int(cfg.get("vocab_size") or 0),
        )


@dataclass
class Base:
    """What every analysis' estimate starts from, on an ``n``-token text.

    ``forward``: one layer's eager attention alive at a time (scores, mask added, softmax in float32,
    cast) plus the MLP's ``n x I`` and the hidden states; ``hidden_states``: HF's tuple, the stack and
    the float32 host copy; ``extra``: tokens an analysis adds to the text first (``continue``);
    ``kinds``: every analysis of the request (an estimate may depend on its companions)."""

    facts: ModelFacts
    n: int
    kinds: frozenset[str] = frozenset()
    extra: int = 0
    weights: int = 0
    hidden_states: int = 0
    forward: int = 0

    @classmethod
    def of(cls, facts: ModelFacts, n: int, kinds: Any = (), extra: int = 0) -> Base:
        L, H, d, b = facts.n_layers, facts.n_heads, facts.hidden, facts.dtype_bytes
        hidden_states = (L + 1) * n * d * (b + 4) * 2
        forward = (
            H * n * n * (3 * b + 4) + 3 * n * facts.intermediate * b + 4 * n * d * b + hidden_states
        )
        return cls(facts, n, frozenset(kinds), extra, facts.n_params * b, hidden_states, forward)


@dataclass
class Footprint:
    """An analysis' peak bytes: ``streamed`` while the forward pass feeds its consumers (they add up
    with the pass), ``stages`` on its own after the pass (the largest stage is the peak), by name."""

    streamed: dict[str, int] = field(default_factory=dict)
    stages: dict[str, int] = field(default_factory=dict)
