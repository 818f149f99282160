"""Figures of the positional-encoding explorer (docs/positional.md): pure functions, result JSON -> Figure.

A PE result is ``{"checkpoints": [report, ...], "reference": {...}}``; a report has ``name``,
``tensor``, ``shape``, ``distance_matrix`` [n][n], ``order``, ``labels`` (partition or None),
``coords_2d`` [n][2], ``procrustes_distance``, ``procrustes_distance_normalised``,
``modularity``, ``clustering``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from frontend.figures.base import empty_figure, scatter_axes

METRICS = (
    ("procrustes_distance", "Procrustes |EΩ − R|_F"),
    ("procrustes_distance_normalised", "Procrustes, normalised"),
    ("modularity", "modularity Q"),
    ("clustering", "clustering C"),
)
COLOUR_BY = ("row", "column", "partition", "position")


def report_title(report: dict[str, Any]) -> str:
    shape = report.get("shape") or ["?", "?"]
    tensor = f" [{report['tensor']}]" if report.get("tensor") else ""
    return f"{report.get('name', 'checkpoint')}{tensor} ({shape[0]}x{shape[1]})"


def _reports(result: dict[str, Any] | None) -> list[dict[str, Any]]:
    return list((result or {}).get("checkpoints") or [])


def pe_distance_figure(
    result: dict[str, Any], *, reorder: bool = True, shared_scale: bool = False
) -> go.Figure:
    """The token-by-token distance matrix of each checkpoint, side by side, reordered by partition.

    Each panel has its own colour scale (its own min to max, colour bar beside it) unless
    ``shared_scale``: then one scale spans every panel, so a narrow-ranged matrix next to a
    wide-ranged one looks flat.
    """
    reports = _reports(result)
    if not reports:
        return empty_figure("Run an analysis to see distance matrices.")
    k = len(reports)
    spacing = (0.06 if shared_scale else 0.1) if k > 1 else 0.1
    fig = make_subplots(
        rows=1,
        cols=k,
        subplot_titles=[report_title(r) for r in reports],
        horizontal_spacing=spacing,
    )
    for c, rep in enumerate(reports, start=1):
        d = np.asarray(rep["distance_matrix"], dtype=np.float64)  # [pos, pos]
        n = d.shape[0]
        order = [int(i) for i in rep.get("order") or range(n)] if reorder else list(range(n))
        labels = rep.get("labels")
        d = d[np.ix_(order, order)]
        names = [str(i) for i in order]
        text = [
            [
                f"{order[i]} ({labels[order[i]]}) – {order[j]} ({labels[order[j]]})"
                if labels
                else f"{order[i]} – {order[j]}"
                for j in range(n)
            ]
            for i in range(n)
        ]
        axis = "coloraxis" if shared_scale or c == 1 else f"coloraxis{c}"
        if not shared_scale:
            domain = fig.layout[f"xaxis{c if c > 1 else ''}"].domain
            fig.update_layout(
                {
                    axis: {
                        "colorscale": "Viridis",
                        "cmin": float(d.min()),
                        "cmax": float(d.max()),
                        "colorbar": {
                            "title": {"text": "D"},
                            "thickness": 10,
                            "x": domain[1] + 0.005,
                            "xanchor": "left",
                            "len": 0.9,
                        },
                    }
                }
            )
        fig.add_trace(
            go.Heatmap(
                z=d.tolist(),
                x=list(range(n)),
                y=list(range(n)),
                text=text,
                coloraxis=axis,
                hovertemplate="positions %{text}<br>distance %{z:.4g}<extra></extra>",
                name=rep.get("name", ""),
            ),
            row=1,
            col=c,
        )
        step = max(1, math.ceil(n / 32))
        ticks = {
            "tickmode": "array",
            "tickvals": list(range(0, n, step)),
            "ticktext": names[::step],
            "tickfont": {"size": 9},
        }
        fig.update_xaxes(
            **ticks, row=1, col=c, title_text="position" + (" (by partition)" if reorder else "")
        )
        fig.update_xaxes(constrain="domain", row=1, col=c)
        fig.update_yaxes(
            **ticks,
            row=1,
            col=c,
            autorange="reversed",
            scaleanchor=f"x{c if c > 1 else ''}",
            constrain="domain",
        )
    metric = reports[0].get("metric", "euclidean")
    if shared_scale:
        fig.update_layout(
            coloraxis={
                "colorscale": "Viridis",
                "colorbar": {"title": {"text": "D"}, "thickness": 12},
            }
        )
    scale = "one colour scale for all" if shared_scale else "each panel its own colour scale"
    fig.update_layout(
        title={"text": f"{metric} distance between positions ({scale})", "font": {"size": 14}},
        height=420 if k <= 2 else 360,
        margin={"l": 50, "r": 20, "t": 80, "b": 60},
        plot_bgcolor="white",
    )
    return fig


def position_colours(
    report: dict[str, Any], *, colour_by: str, grid: tuple[int, int] | None
) -> tuple[list[Any], str, bool]:
    """Colour values for each position, their title, and whether they are categorical."""
    n = int((report.get("shape") or [len(report.get("coords_2d") or [])])[0])
    pos = np.arange(n)
    if colour_by in ("row", "column") and grid and grid[0] * grid[1] == n:
        h, w = grid
        return (
            ((pos // w) if colour_by == "row" else (pos % w)).tolist(),
            f"grid {colour_by}",
            False,
        )
    if colour_by == "partition" and report.get("labels"):
        return [str(x) for x in report["labels"]], "partition", True
    return pos.tolist(), "position", False


def pe_map_figure(
    result: dict[str, Any],
    *,
    colour_by: str = "row",
    grid: tuple[int, int] | None = (4, 4),
    rescale: bool = True,
    aligned: bool = False,
) -> go.Figure:
    """A 2-D map of the positions of each checkpoint (PCA), labelled and coloured, QER optional."""
    reports = _reports(result)
    if not reports:
        return empty_figure("Run an analysis to see the 2-D maps.")
    k = len(reports)
    fig = make_subplots(
        rows=1,
        cols=k,
        subplot_titles=[report_title(r) for r in reports],
        horizontal_spacing=0.08 if k > 1 else 0.1,
    )
    palette = [
        "#1f77b4",
        "#ff7f0e",
        "#2ca02c",
        "#d62728",
        "#9467bd",
        "#8c564b",
        "#e377c2",
        "#7f7f7f",
        "#bcbd22",
        "#17becf",
    ]
    for c, rep in enumerate(reports, start=1):
        key = "coords_2d_aligned" if aligned and rep.get("coords_2d_aligned") else "coords_2d"
        xy = np.asarray(rep[key], dtype=np.float64).reshape(-1, 2)  # [pos, 2]
        px, py, xaxis, yaxis = scatter_axes(xy[:, 0], xy[:, 1], rescale=rescale)
        colours, ctitle, categorical = position_colours(rep, colour_by=colour_by, grid=grid)
        custom = [[i, float(a), float(b), str(colours[i])] for i, (a, b) in enumerate(xy)]
        marker: dict[str, Any] = {"size": 11, "line": {"width": 0.5, "color": "#333"}}
        if categorical:
            cats = sorted(set(colours), key=str)
            marker["color"] = [palette[cats.index(v) % len(palette)] for v in colours]
        else:
            marker.update(
                color=colours,
                colorscale="Viridis",
                showscale=(c == k),
                colorbar={"title": {"text": ctitle}, "thickness": 12},
            )
        fig.add_trace(
            go.Scatter(
                x=px,
                y=py,
                mode="markers+text",
                text=[str(i) for i in range(len(xy))],
                textposition="top center",
                textfont={"size": 9},
                cliponaxis=False,  # the labels of the top row show whole, in the margin
                marker=marker,
                customdata=custom,
                hovertemplate="position %{customdata[0]}<br>" + ctitle + " %{customdata[3]}"
                "<br>x = %{customdata[1]:.4g}<br>y = %{customdata[2]:.4g}<extra></extra>",
                name=rep.get("name", ""),
                showlegend=False,
            ),
            row=1,
            col=c,
        )
        xaxis["title"] = {"text": "PC 1" + (" (QER, original units)" if rescale else "")}
        yaxis["title"] = {"text": "PC 2" + (" (QER, original units)" if rescale else "")}
        fig.update_xaxes(**xaxis, row=1, col=c)
        fig.update_yaxes(**yaxis, row=1, col=c)
    fig.update_layout(
        title={"text": f"2-D map of the positions (coloured by {colour_by})", "font": {"size": 14}},
        height=440,
        margin={"l": 60, "r": 20, "t": 80, "b": 60},
        plot_bgcolor="white",
    )
    fig.update_xaxes(gridcolor="#eee", zeroline=False)
    fig.update_yaxes(gridcolor="#eee", zeroline=False)
    return fig


def pe_metrics_rows(result: dict[str, Any]) -> list[dict[str, str]]:
    """One table row per checkpoint: name, shape, Procrustes distances, Q, C (— when not defined)."""

    def fmt(v: Any) -> str:
        return "—" if v is None else f"{float(v):.4g}"

    rows = []
    for rep in _reports(result):
        shape = rep.get("shape") or ["?", "?"]
        rows.append(
            {
                "checkpoint": report_title(rep),
                "shape": f"{shape[0]} x {shape[1]}",
                **{label: fmt(rep.get(key)) for key, label in METRICS},
            }
        )
    return rows


def pe_sweep_figure(result: dict[str, Any]) -> go.Figure:
    """Distance to the reference, Q and C per checkpoint (e.g. a σ sweep), one panel each."""
    reports = _reports(result)
    shown = [(key, label) for key, label in METRICS if any(r.get(key) is not None for r in reports)]
    if len(reports) < 2 or not shown:
        return empty_figure("Compare two or more checkpoints to see them side by side.", height=200)
    names = [
        f"{i + 1}. {r.get('name', 'checkpoint')}" for i, r in enumerate(reports)
    ]  # unique bars
    fig = make_subplots(rows=1, cols=len(shown), subplot_titles=[label for _, label in shown])
    for c, (key, label) in enumerate(shown, start=1):
        fig.add_trace(
            go.Bar(
                x=names,
                y=[r.get(key) for r in reports],
                name=label,
                showlegend=False,
                hovertemplate="%{x}: %{y:.4g}<extra></extra>",
            ),
            row=1,
            col=c,
        )
    fig.update_layout(
        title={"text": "Checkpoints side by side", "font": {"size": 14}},
        height=320,
        margin={"l": 50, "r": 20, "t": 80, "b": 80},
        plot_bgcolor="white",
    )
    fig.update_yaxes(gridcolor="#eee", zeroline=True, zerolinecolor="#999")
    return fig
