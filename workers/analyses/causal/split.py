"""An ablation of every head, or a patching, in parts that any worker takes (docs/scaling.md).

Each splitter (a spec's ``split``) answers three questions for the queue service, which knows no
analysis: ``plan`` — given the job's context, the parts' inputs (ranges of the view's forward calls,
``workers.analyses.causal.parts``), their sizes in runs and what the merge needs, or None to compute
the section in one piece; ``part`` — one part's output; ``merge`` — the section from every part's
output, equal to the one-piece section bit for bit.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from workers.analyses.causal import parts as cp
from workers.analyses.causal.section import corrupted_of, pair_texts, position_of, target_of
from workers.core.jsonable import jsonable
from workers.core.registry import SectionSplit


def _grouped(plan: list[tuple[int, int]], *, min_run_tokens: int, part_run_tokens: int) -> Any:
    """The plan's calls grouped into parts of ~``part_run_tokens``, or None when it is too small."""
    costs = [tokens for _, tokens in plan]
    if sum(costs) < min_run_tokens:
        return None
    ranges = cp.group_calls(costs, part_cost=part_run_tokens)
    if len(ranges) < 2:
        return None
    runs = [sum(r for r, _ in plan[c0:c1]) for c0, c1 in ranges]  # the parts' progress counts runs
    return ranges, runs


def _base(ctx: Any, options: Any) -> dict[str, Any]:
    return {"model": ctx.loaded.name, "dtype": options.dtype, "target": target_of(options)}


class Ablation:
    """Every head ablated in turn, its forward calls in parts."""

    @staticmethod
    def plan(ctx: Any, options: Any, *, min_run_tokens: int, part_run_tokens: int) -> Any:
        if options.ablate != "each":
            return None
        loaded = ctx.loaded
        p = position_of(ctx, options)
        plan = cp.ablation_plan(n_layers=loaded.n_layers, n_heads=loaded.n_heads, position=p)
        grouped = _grouped(plan, min_run_tokens=min_run_tokens, part_run_tokens=part_run_tokens)
        if grouped is None:
            return None
        ranges, runs = grouped
        base = {
            **_base(ctx, options),
            "encoded": dataclasses.asdict(ctx.encoded),
            "mode": options.ablation,
            "position": p,
        }
        return SectionSplit(
            payloads=[
                {**base, "calls": list(r), "runs": n} for r, n in zip(ranges, runs, strict=True)
            ],
            sizes=runs,
            merge={"n_layers": loaded.n_layers, "n_heads": loaded.n_heads},
        )

    @staticmethod
    def part(loaded: Any, payload: dict[str, Any], progress: Any) -> dict[str, Any]:
        from workers.analyses.causal.interventions import ablation
        from workers.models.adapters import Encoded

        out = ablation(
            loaded, Encoded(**payload["encoded"]), mode=payload["mode"], target=payload["target"],
            position=payload["position"], calls=(int(payload["calls"][0]), int(payload["calls"][1])),
            progress=progress,
        )  # fmt: skip
        return {**jsonable(out), "n_layers": loaded.n_layers, "n_heads": loaded.n_heads}

    @staticmethod
    def merge(partials: list[dict[str, Any]], context: dict[str, Any]) -> dict[str, Any]:
        return {**cp.merge_ablation(partials), "each": True}


class Patching:
    """Activation patching of the residual stream and every head, its forward calls in parts."""

    @staticmethod
    def plan(ctx: Any, options: Any, *, min_run_tokens: int, part_run_tokens: int) -> Any:
        loaded = ctx.loaded
        corrupted = corrupted_of(ctx, options)
        if corrupted.n != ctx.encoded.n:
            return None  # the section itself says why not
        first = cp.first_difference(ctx.encoded.input_ids, corrupted.input_ids)
        plan = cp.patching_plan(
            n_layers=loaded.n_layers, n_heads=loaded.n_heads, n=ctx.encoded.n, first=first
        )
        grouped = _grouped(plan, min_run_tokens=min_run_tokens, part_run_tokens=part_run_tokens)
        if grouped is None:
            return None
        ranges, runs = grouped
        base = {
            **_base(ctx, options),
            "clean": dataclasses.asdict(ctx.encoded),
            "corrupted": dataclasses.asdict(corrupted),
        }
        return SectionSplit(
            payloads=[
                {**base, "calls": list(r), "runs": n} for r, n in zip(ranges, runs, strict=True)
            ],
            sizes=runs,
            merge={
                "n": ctx.encoded.n,
                "extras": pair_texts(ctx, options, {}, corrupted),
                "n_layers": loaded.n_layers,
                "n_heads": loaded.n_heads,
            },
        )

    @staticmethod
    def part(loaded: Any, payload: dict[str, Any], progress: Any) -> dict[str, Any]:
        from workers.analyses.causal.interventions import patching
        from workers.models.adapters import Encoded

        out = patching(
            loaded, Encoded(**payload["clean"]), Encoded(**payload["corrupted"]),
            target=payload["target"], calls=(int(payload["calls"][0]), int(payload["calls"][1])),
            progress=progress,
        )  # fmt: skip
        return jsonable(out)  # type: ignore[no-any-return]

    @staticmethod
    def merge(partials: list[dict[str, Any]], context: dict[str, Any]) -> dict[str, Any]:
        merged = cp.merge_patching(
            partials, n_layers=context["n_layers"], n_heads=context["n_heads"], n=context["n"]
        )
        return {**merged, **context["extras"]}
