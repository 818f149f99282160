"""The /circuits page's figures (docs/circuits.md): the circuit at N, the faithfulness curve, AtP
against real patching and the flow graph, and the slider and note that say which N is shown."""

from __future__ import annotations

from typing import Any

from frontend.figures import circuits as F
from frontend.kit.atlas_labels import Labels
from workers.analyses.circuits.spec import FAITHFUL

GRAPHS = [
    "circuits-circuit-graph",
    "circuits-curve-graph",
    "circuits-atp-graph",
    "circuits-flow-graph",
]
HEAD_GRAPHS = ["circuits-circuit-graph", "circuits-atp-graph", "circuits-flow-graph"]


def slider_marks(sizes: list[int]) -> dict[int, str]:
    """Slider marks: every size a stop, a few labelled (the ends among them) so labels never crowd."""
    step = max(1, round(len(sizes) / 6))
    shown = set(range(0, len(sizes), step)) | {len(sizes) - 1}
    return {i: (f"{s:,}" if i in shown else "") for i, s in enumerate(sizes)}


def n_note(result: dict[str, Any], n: int | None) -> str:
    """Which circuit is shown and why the page opened where it did."""
    opening = F.opening_size(result)
    if opening is None:
        return ""
    n = n or opening
    f = F.faithfulness_at(result, n)
    shown = f"N = {n:,} edges" + (f", faithfulness {f:.3f}" if f is not None else "")
    reached = (F.faithfulness_at(result, opening) or 0.0) >= FAITHFUL
    why = (
        f"the smallest circuit on the curve with faithfulness ≥ {FAITHFUL:g}"
        if reached
        else f"the largest on the curve: none reaches faithfulness {FAITHFUL:g}"
    )
    return (
        f"{shown}: {why}" if n == opening else f"{shown} (the page opens at N = {opening:,}, {why})"
    )


def page_figures(
    flow: dict[str, Any],
    pair: dict[str, Any],
    n: int | None,
    layout: str = "head",
    head_labels: Labels | None = None,
) -> list[Any]:
    return [
        F.circuit_figure(pair, n_top=n, layout=layout or "head", head_labels=head_labels),
        F.faithfulness_figure(pair, n_top=n),
        F.atp_scatter_figure(pair, head_labels=head_labels),
        F.flow_figure(flow),
    ]
