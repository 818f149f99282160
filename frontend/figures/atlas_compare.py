"""Two models' head atlases side by side (docs/atlas.md, "On the comparison page"): pure functions of
two atlas sections.

Left: the heads per type, one bar per model. Right: where in depth each type sits, one dot per
labelled head at its **relative depth** ``layer / (n_layers - 1)`` (0 = the first layer, 1 = the
last; a one-layer model's heads sit at 0), model A's dots above model B's on each type's row, each
model's median depth of the type marked by a bar. Relative depth puts models of different depths
(SmolLM2's 30 layers, Gemma 3 270M's 18) on one axis.
"""

from __future__ import annotations

from statistics import median
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from frontend.figures.atlas import COLOURS, type_counts
from frontend.figures.base import EMPTY_PX, empty_figure
from workers.core.notation import head_label

TYPES = list(COLOURS)  # the seven labelled types, in the atlas' own order
COLOUR_A, COLOUR_B = "#1f77b4", "#d62728"  # the comparison page's colours of model A and B
OFFSET = 0.18  # how far above (A) and below (B) its type's row a model's dots sit


def relative_depth(layer: int, n_layers: int) -> float:
    """``layer / (n_layers - 1)``: 0 for the first layer, 1 for the last (0 in a one-layer model)."""
    return 0.0 if n_layers <= 1 else int(layer) / (int(n_layers) - 1)


def type_depths(section: dict[str, Any] | None) -> dict[str, list[tuple[float, str]]]:
    """Per labelled type: ``(relative depth, head name)`` of each head carrying it, layer-major."""
    out: dict[str, list[tuple[float, str]]] = {t: [] for t in TYPES}
    if not section:
        return out
    n_layers = int(section["n_layers"])
    for h in section.get("heads") or []:
        if h.get("label") in out:
            out[h["label"]].append(
                (relative_depth(h["layer"], n_layers), head_label(h["layer"], h["head"]))
            )
    return out


def count_rows(a: dict[str, Any] | None, b: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One row per type (the seven, then ``none``): heads of A and of B carrying it (None for a model
    without an atlas), with how many are confident."""
    ca = type_counts(a) if a else None
    cb = type_counts(b) if b else None
    return [
        {
            "type": t,
            "a": ca[t]["heads"] if ca else None,
            "a_confident": ca[t]["confident"] if ca else None,
            "b": cb[t]["heads"] if cb else None,
            "b_confident": cb[t]["confident"] if cb else None,
        }
        for t in (*TYPES, "none")
    ]


def _side(section: dict[str, Any] | None, name: str, which: str) -> tuple[str, str, float] | None:
    if not section or not section.get("heads"):
        return None
    colour, sign = (COLOUR_A, 1.0) if which == "A" else (COLOUR_B, -1.0)
    return f"{which} {name} ({int(section['n_layers'])} layers)", colour, sign


def atlas_compare_figure(
    a: dict[str, Any] | None,
    b: dict[str, Any] | None,
    *,
    name_a: str = "",
    name_b: str = "",
) -> go.Figure:
    """Counts per type (left) and each type's heads by relative depth (right), A above B; a model
    without an atlas (None) is left out of both panels."""
    sides = [
        (s, section)
        for s, section in ((_side(a, name_a, "A"), a), (_side(b, name_b, "B"), b))
        if s is not None
    ]
    if not sides:
        return empty_figure("No stored head atlas of either model.", height=EMPTY_PX)
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.35, 0.65],
        shared_yaxes=True,
        horizontal_spacing=0.04,
        subplot_titles=("heads per type", "where in depth (0 = first layer, 1 = last)"),
    )
    rows = list(reversed(TYPES))  # the first type at the top
    for (legend, colour, sign), section in sides:
        counts = type_counts(section)
        fig.add_trace(
            go.Bar(
                y=list(range(len(rows))),
                x=[counts[t]["heads"] for t in rows],
                orientation="h",
                width=2 * OFFSET,
                offset=0.0 if sign > 0 else -2 * OFFSET,  # A's bar above B's, beside its dots
                name=legend,
                legendgroup=legend,
                marker={"color": colour},
                customdata=[[t, counts[t]["confident"]] for t in rows],
                hovertemplate="%{customdata[0]}: %{x} heads (%{customdata[1]} confident)"
                + "<extra>"
                + legend
                + "</extra>",
            ),
            row=1,
            col=1,
        )
        depths = type_depths(section)
        xs, ys, names = [], [], []
        mx, my = [], []
        for i, t in enumerate(rows):
            for d, head in depths[t]:
                xs.append(d)
                ys.append(i + sign * OFFSET)
                names.append(f"{head} · {t}")
            if depths[t]:
                mx.append(median(d for d, _ in depths[t]))
                my.append(i + sign * OFFSET)
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="markers",
                name=legend,
                legendgroup=legend,
                showlegend=False,
                marker={"color": colour, "size": 8, "opacity": 0.55},
                text=names,
                hovertemplate="%{text}: depth %{x:.2f}<extra>" + legend + "</extra>",
            ),
            row=1,
            col=2,
        )
        fig.add_trace(
            go.Scatter(
                x=mx,
                y=my,
                mode="markers",
                name=f"{legend}: median",
                legendgroup=legend,
                showlegend=False,
                marker={
                    "color": colour,
                    "symbol": "line-ns-open",
                    "size": 20,
                    "line": {"width": 3},
                },
                hovertemplate="median depth %{x:.2f}<extra>" + legend + "</extra>",
            ),
            row=1,
            col=2,
        )
    fig.update_yaxes(tickmode="array", tickvals=list(range(len(rows))), ticktext=rows, row=1, col=1)
    fig.update_yaxes(range=[-0.6, len(rows) - 0.4], row=1, col=1)
    fig.update_yaxes(range=[-0.6, len(rows) - 0.4], showgrid=True, row=1, col=2)
    fig.update_xaxes(title_text="heads", row=1, col=1)
    fig.update_xaxes(title_text="relative depth", range=[-0.05, 1.05], row=1, col=2)
    fig.update_layout(
        title="Head atlases side by side",
        barmode="overlay",
        height=420,
        margin={"l": 110, "r": 20, "t": 70, "b": 50},
        legend={"orientation": "h", "x": 0, "y": -0.18},
        plot_bgcolor="white",
    )
    return fig
