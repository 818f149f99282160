"""Memory of a comparison (docs/compare.md), estimated before it is queued: torch-free, so the API
checks it and the job decides with the same numbers whether both models may be loaded at once.

What a comparison holds: model A's word-level maps of every text (float32, ``heads of A x words^2``
per text) until model B has read that text, the weights of one model or of both, one text's forward
pass and the runtime (``workers.core.memory.RUNTIME``). A comparison split into parts of texts
(``compare_ranges``, docs/scaling.md) holds A's maps of one part's texts at a time, so its plan is
that of its heaviest part.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from workers.core.memory import GIB, RUNTIME, MemoryBudgetError, memory_budget


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
    parts: int = 1  # a split comparison: the plan of its heaviest part

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
                estimate=self.one_at_a_time,
                budget=self.budget,
                what=what,
                parts={
                    (
                        "model A's word maps of every text"
                        if self.parts == 1
                        else f"model A's word maps of the largest of {self.parts} parts' texts"
                    ): self.maps,
                    "the larger model's weights": max(self.weights_a, self.weights_b),
                    "one text's forward pass": self.forward,
                    "runtime": RUNTIME,
                },
                advice="use fewer or shorter texts (max_tokens) or models with fewer heads as model A",
            )


def compare_ranges(n_texts: int) -> list[tuple[int, int]]:
    """The parts ``[start, stop)`` of a comparison over a corpus of ``n_texts`` texts: one range below
    ``split_compare_min_texts``, else whole multiples of ``split_compare_part_texts`` (its window)."""
    from workers.core.settings import get_settings

    s = get_settings()
    window = s.split_compare_part_texts
    if n_texts < s.split_compare_min_texts:
        return [(0, n_texts)]
    per = window * max(1, math.ceil(math.ceil(n_texts / s.split_max_parts) / window))
    if n_texts <= per:
        return [(0, n_texts)]
    return [(a, min(a + per, n_texts)) for a in range(0, n_texts, per)]


def compare_window() -> int:
    """Texts a comparison sorts into padded batches together: a part's texts are whole windows."""
    from workers.core.settings import get_settings

    return get_settings().split_compare_part_texts


def plan_compare(
    word_counts: list[int],
    *,
    heads_a: int,
    heads_b: int,
    weights_a: int,
    weights_b: int,
    max_tokens: int,
    budget: int | None = None,
    ranges: list[tuple[int, int]] | None = None,
) -> ComparePlan:
    """The plan of comparing two models on texts with ``word_counts`` words each; ``ranges``: the
    parts of a split comparison (A's maps of the heaviest part's texts), default one piece."""
    words = [min(u, max_tokens) for u in word_counts]
    ranges = ranges or [(0, len(words))]
    maps = 4 * heads_a * max(sum(u * u for u in words[a:b]) for a, b in ranges)
    forward = 8 * max(heads_a, heads_b) * max_tokens * max_tokens * 4 + 16 * max(
        words, default=0
    ) ** 2 * max(heads_a, heads_b)
    return ComparePlan(
        maps,
        weights_a,
        weights_b,
        forward,
        memory_budget() if budget is None else budget,
        parts=len(ranges),
    )


def plan_of(
    model_a: str,
    model_b: str,
    texts: Iterable[str],
    *,
    max_tokens: int,
    ranges: list[tuple[int, int]] | None = None,
) -> ComparePlan:
    """The plan of comparing two catalogue models on ``texts`` from their configs (no model loaded);
    ``ranges``: the parts of a split comparison (``compare_ranges``)."""
    from workers.models.catalogue import get_catalogue

    cat = get_catalogue()
    a, b = cat.get(model_a), cat.get(model_b)
    fa, fb = a.summary(), b.summary()
    return plan_compare(
        [len(t.split()) for t in texts],
        heads_a=int(fa["n_layers"]) * int(fa["n_heads"]),
        heads_b=int(fb["n_layers"]) * int(fb["n_heads"]),
        weights_a=weight_bytes(fa, a.config()),
        weights_b=weight_bytes(fb, b.config()),
        max_tokens=max_tokens,
        ranges=ranges,
    )


def describe(plan: ComparePlan) -> str:
    """One line for progress messages and the CLI."""
    how = "both models loaded together" if plan.together else "one model at a time"
    if plan.parts > 1:
        how += f", per part of {plan.parts}"
    return f"about {plan.one_at_a_time / GIB:.2f} GiB at peak, {how} (budget {plan.budget / GIB:.1f} GiB)"
