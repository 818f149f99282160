"""The memory plan of a text request, estimated before it starts, and the budget it must fit.

The estimate follows what the streamed pipeline holds: the weights; one layer's eager attention at a
time during the forward pass (``workers.core.memory.Base``); per analysis what it keeps, from its
spec's ``memory`` hook (``workers.core.memory.Footprint``): consumers of the streamed pass add up
with the pass, each later stage stands alone and the largest is the peak. A request that cannot fit
fails at once with the estimate and the budget in its message, instead of running out of memory
half-way.

Torch-free, so the backend can call it too. The budget is ``HEADSCOPE_MEMORY_BUDGET_GB`` or,
unset, the machine's physical memory.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from workers.core import registry
from workers.core.memory import (  # noqa: F401 - the budget and its error, re-exported
    GIB,
    RUNTIME,
    Base,
    MemoryBudgetError,
    ModelFacts,
    memory_budget,
)

logger = logging.getLogger(__name__)


@dataclass
class Estimate:
    """Peak bytes of a request: the weights plus the largest stage; ``parts`` names every item."""

    total: int
    parts: dict[str, int] = field(default_factory=dict)

    def check(self, budget: int | None = None, *, what: str = "this request") -> None:
        budget = memory_budget() if budget is None else budget
        if self.total > budget:
            raise MemoryBudgetError(estimate=self.total, budget=budget, parts=self.parts, what=what)


def estimate_text_request(facts: ModelFacts, n: int, analyses: list[str], options: Any) -> Estimate:
    """Peak memory of ``analyze`` on an ``n``-token text (see the module docstring); ``options``:
    the request's flat options (a dict, missing names at their defaults, or the options object)."""
    chosen = [registry.get(k) for k in analyses]
    extra = sum(s.extra_tokens(s.options_of(options)) for s in chosen if s.extra_tokens)
    base = Base.of(facts, n, analyses, extra)
    streamed: dict[str, int] = {"forward": base.forward}
    stages: dict[str, int] = {}
    for spec in chosen:
        if spec.memory is not None:
            got = registry.resolve(spec.memory)(base, spec.options_of(options))
            streamed.update(got.streamed)
            stages.update(got.stages)
    if len(streamed) > 1 or not stages:
        stages["forward"] = sum(streamed.values())
    peak_name = max(stages, key=lambda k: stages[k])
    parts = {
        "weights": base.weights,
        **streamed,
        **{k: v for k, v in stages.items() if k not in streamed and k != "forward"},
    }
    parts["runtime"] = RUNTIME
    logger.debug("memory estimate at n=%d: peak stage %s", n, peak_name)
    return Estimate(RUNTIME + base.weights + stages[peak_name], parts)
