"""Memory of a comparison (docs/compare.md), estimated before it is queued: torch-free, so the API
checks it and the job decides with the same numbers whether both models may be loaded at once.

What a comparison holds: model A's word-level maps of every text (float32, ``heads of A x words^2``
per text) until model B has read that text, the weights of one model or of both, one text's forward
pass and the runtime (``workers.budget.RUNTIME``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workers.budget import GIB, RUNTIME, MemoryBudgetError, memory_budget


def weight_bytes(facts: dict[str, Any], cfg: dict[str, Any] | None = None) -> int:
    """About the float32 weights of a model from its config facts (embedding + layers)."""
    cfg = cfg or {}
    d = int(facts.get("hidden") or cfg.get("hidden_size") or cfg.get("n_embd") or 768)
    inter = int(cfg.get("intermediate_size") or cfg.get("n_inner") or 4 * d)
    vocab = int(cfg.get("vocab_size") or 50_000)
    layers = int(facts.get("n_layers") or 12)
    return 4 * (vocab * d + layers * (4 * d * d + 3 * d * inter))


@dataclass(frozen=True)
class ComparePlan:
    """The estimate: ``together`` True when both models fit beside A's kept maps."""

    maps: int
    weights_a: int
    weights_b: int
    forward: int
    budget: int

    @property
    def together(self) -> bool:
        return RUNTIME + self.weights_a + self.weights_b + self.maps + self.forward <= self.budget

    @property
    def one_at_a_time(self) -> int:
        return RUNTIME + max(self.weights_a, self.weights_b) + self.maps + self.forward

    def check(self, *, what: str) -> None:
        """Raise ``MemoryBudgetError`` (a 422) when even one model at a time does not fit."""
        if self.one_at_a_time > self.budget:
            raise MemoryBudgetError(
                estimate=self.one_at_a_time, budget=self.budget, what=what,
                parts={"model A's word maps of every text": self.maps,
                       "the larger model's weights": max(self.weights_a, self.weights_b),
                       "one text's forward pass": self.forward, "runtime": RUNTIME},
                advice="use fewer or shorter texts (max_tokens) or models with fewer heads as model A")


def plan_compare(word_counts: list[int], *, heads_a: int, heads_b: int, weights_a: int, weights_b: int,
                 max_tokens: int, budget: int | None = None) -> ComparePlan:
    """The plan of comparing two models on texts with ``word_counts`` words each."""
    words = [min(u, max_tokens) for u in word_counts]
    maps = 4 * heads_a * sum(u * u for u in words)
    forward = 8 * max(heads_a, heads_b) * max_tokens * max_tokens * 4 + 16 * max(words, default=0) ** 2 * max(heads_a, heads_b)
    return ComparePlan(maps, weights_a, weights_b, forward, memory_budget() if budget is None else budget)


def plan_of(model_a: str, model_b: str, texts: list[str], *, max_tokens: int) -> ComparePlan:
    """The plan of comparing two catalogue models on ``texts`` from their configs (no model loaded)."""
    from workers.models.catalogue import get_catalogue

    cat = get_catalogue()
    a, b = cat.get(model_a), cat.get(model_b)
    fa, fb = a.summary(), b.summary()
    return plan_compare([len(t.split()) for t in texts], heads_a=int(fa["n_layers"]) * int(fa["n_heads"]),
                        heads_b=int(fb["n_layers"]) * int(fb["n_heads"]), weights_a=weight_bytes(fa, a.config()),
                        weights_b=weight_bytes(fb, b.config()), max_tokens=max_tokens)


def describe(plan: ComparePlan) -> str:
    """One line for progress messages and the CLI."""
    how = "both models loaded together" if plan.together else "one model at a time"
    return f"about {plan.one_at_a_time / GIB:.2f} GiB at peak, {how} (budget {plan.budget / GIB:.1f} GiB)"
