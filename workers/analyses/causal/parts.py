"""Ablation of every head and activation patching in parts (docs/scaling.md): plan their forward calls,
run a range of them, merge the ranges.

Both views are a list of forward calls, each a batch of intervened runs (``workers.analyses.
interventions``: at most ``ROW_TOKENS`` tokens a call). A part runs a contiguous range of calls,
exactly the calls the whole view makes (the same runs batched the same way), so the merged view equals
the one computed in one piece bit for bit. A plan lists each call as (runs, run tokens): its cost is
its runs x their tokens.

    plan = ablation_plan(n_layers=6, n_heads=12, position=40)       # (runs, run tokens) per call
    ranges = group_calls([c for _, c in plan], part_cost=20_000)    # [(c0, c1), ...]
    parts = [ablation(m, enc, calls=r) for r in ranges]             # ablation(..., calls=) per part
    section = merge_ablation(parts)                                 # as ablation(m, enc)["map"]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from workers.analyses.causal.interventions import rows_per_call


def _calls(n_runs: int, size: int, width: int) -> list[tuple[int, int]]:
    return [
        (min(size, n_runs - start), min(size, n_runs - start) * width)
        for start in range(0, n_runs, size)
    ]


def ablation_plan(*, n_layers: int, n_heads: int, position: int) -> list[tuple[int, int]]:
    """(runs, run tokens) of each call of every head's ablation read at ``position`` (the base run,
    then each head; every run is ``position + 1`` tokens)."""
    width = position + 1
    return _calls(1 + n_layers * n_heads, rows_per_call(width), width)


def patching_plan(*, n_layers: int, n_heads: int, n: int, first: int) -> list[tuple[int, int]]:
    """(runs, run tokens) of each call of patching over ``n`` tokens whose texts differ first at
    ``first``: per position t >= first the residual stream's L + 1 runs of n - t tokens, then every
    head's run of n - first tokens (calls hold ``rows_per_call(n)`` runs)."""
    size = rows_per_call(n)
    plan = [c for t in range(first, n) for c in _calls(n_layers + 1, size, n - t)]
    return plan + _calls(n_layers * n_heads, size, n - first)


def first_difference(clean_ids: list[int], corrupted_ids: list[int]) -> int:
    """The first position where the two texts' tokens differ (their length if none)."""
    return next(
        (i for i, (x, y) in enumerate(zip(clean_ids, corrupted_ids, strict=True)) if x != y),
        len(clean_ids),
    )


def group_calls(costs: list[int], *, part_cost: int) -> list[tuple[int, int]]:
    """Consecutive calls grouped into ranges ``[c0, c1)`` of about ``part_cost`` run tokens each (a
    call is never cut)."""
    total = sum(costs)
    n_parts = max(1, min(len(costs), math.ceil(total / max(part_cost, 1))))
    target = total / n_parts
    ranges, start, acc = [], 0, 0
    for i, c in enumerate(costs):
        acc += c
        if acc >= target * (len(ranges) + 1) and len(ranges) < n_parts - 1 and i + 1 < len(costs):
            ranges.append((start, i + 1))
            start = i + 1
    ranges.append((start, len(costs)))
    return ranges


def merge_ablation(partials: list[dict[str, Any]]) -> dict[str, Any]:
    """Every head's ablation from its parts (``ablation(..., calls=)``, in call order): ``map`` =
    each head's score minus the base run's, as in one piece. The other keys are the first part's."""
    scores = np.concatenate([np.asarray(p["scores"], dtype=np.float64) for p in partials])
    first = partials[0]
    if first["rows"][0] != 0 or any(
        a["rows"][1] != b["rows"][0] for a, b in zip(partials, partials[1:], strict=False)
    ):
        raise ValueError("ablation parts do not cover the runs in order")
    n_layers, n_heads = first["n_layers"], first["n_heads"]
    if len(scores) != 1 + n_layers * n_heads:
        raise ValueError(f"ablation parts hold {len(scores)} runs, not {1 + n_layers * n_heads}")
    out = {k: v for k, v in first.items() if k not in ("scores", "rows", "n_layers", "n_heads")}
    out["map"] = (scores[1:] - scores[0]).reshape(n_layers, n_heads).tolist()
    return out


def merge_patching(
    partials: list[dict[str, Any]], *, n_layers: int, n_heads: int, n: int
) -> dict[str, Any]:
    """Patching's grids from its parts' cells (``patching(..., calls=)``); zero where nothing was run
    (positions before the first difference), as in one piece. The other keys are the first part's."""
    grids = {"residual": np.zeros((n_layers + 1, n)), "heads": np.zeros((n_layers, n_heads))}
    for p in partials:
        for grid, i, j, f in p["cells"]:
            grids[grid][i, j] = f
    out = {k: v for k, v in partials[0].items() if k not in ("cells", "first")}
    return {"residual": grids["residual"].tolist(), "heads": grids["heads"].tolist(), **out}
