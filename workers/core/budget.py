"""The memory budget a request must fit and the error naming it: torch-free, below the analysis core
(``workers.engine.memory`` estimates text requests with it; the API checks a comparison's plan,
``workers.analyses.compare.plan``, before queueing)."""

from __future__ import annotations

import os

from workers.core.errors import HeadscopeError

GIB = 1024**3
RUNTIME = GIB // 2  # Python, torch and transformers themselves (measured: ~0.45 GiB resident)


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
