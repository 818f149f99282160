"""The head view (attention as lines between two token columns) and the model view (every head's
pattern in one layers x heads grid). Pure functions, result JSON -> Figure, no Dash.

Head view, after bertviz: queries on the left, keys on the right, one line per (head, query, key)
whose weight reaches ``threshold``; line opacity grows with the weight (``OPACITY_BINS`` levels,
one trace per head and level, segments separated by gaps); each head its own colour.
``layout.meta.headview`` lists the (query, key) pairs of every line trace so that
``assets/heads.js`` can keep only a hovered token's lines without a server round trip.

Model view: each head's attention pattern block-averaged to at most ``MODEL_CELLS`` x
``MODEL_CELLS`` cells and scaled by its own maximum, tiled into one heatmap (layers down, heads
across); ``layout.meta.modelview`` maps a clicked cell back to (layer, head).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from frontend.figures.base import EMPTY_PX, empty_figure
from frontend.figures.tokens import token_labels
from frontend.kit.atlas_labels import Labels, head_name
from frontend.kit.heads import gallery_section, grid_attention, head_attention
from workers.core.notation import head_label

HEAD_COLOURS = [
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#9467bd",
    "#ff7f0e",
    "#17becf",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#393b79",
    "#637939",
    "#843c39",
    "#7b4173",
    "#3182bd",
    "#e6550d",
]
OPACITY_BINS = (0.0, 0.1, 0.25, 0.5, 1.0001)  # weight bins; a bin's lines are drawn at its opacity
BIN_OPACITY = (0.25, 0.45, 0.7, 0.95)
MODEL_CELLS = 24


def head_view_lines(
    result: dict[str, Any], *, layer: int, heads: list[int], threshold: float
) -> dict[int, list[tuple[int, int, float]]]:
    """head -> [(query, key, weight)] over kept positions (indices into ``kept``) with weight >= threshold."""
    out: dict[int, list[tuple[int, int, float]]] = {}
    for head in heads:
        hit = head_attention(result, layer, head)
        if hit is None:
            continue
        a = hit[0]  # [query, key]
        qs, ks = np.nonzero(a >= threshold)
        out[head] = [(int(q), int(k), float(a[q, k])) for q, k in zip(qs, ks, strict=True)]
    return out


def head_view_figure(
    result: dict[str, Any],
    *,
    layer: int,
    heads: list[int],
    threshold: float = 0.05,
    labels: Labels | None = None,
) -> go.Figure:
    """Lines from each query (left) to each key (right) it attends to, one colour per head.
    ``labels``: the heads' atlas labels (``kit.atlas_labels``), named in the title and the legend
    (``L17H5 · induction``)."""
    lines = head_view_lines(result, layer=layer, heads=heads, threshold=threshold)
    if not lines:
        return empty_figure(f"No attention weights for layer {layer} in this result.")
    hit = head_attention(result, layer, next(iter(lines)))
    kept = hit[1] if hit else []
    tokens = token_labels(result, kept)
    n = len(kept)
    traces: list[go.Scatter] = []
    pairs_of_trace: list[list[list[int]]] = []
    for i, (head, segs) in enumerate(lines.items()):
        colour = HEAD_COLOURS[i % len(HEAD_COLOURS)]
        weights = np.asarray([w for _, _, w in segs])
        level = np.digitize(weights, OPACITY_BINS[1:-1]) if len(segs) else np.zeros(0, dtype=int)
        for b, opacity in enumerate(BIN_OPACITY):
            chosen = [s for s, lv in zip(segs, level, strict=True) if lv == b]
            x: list[float | None] = []
            y: list[float | None] = []
            for q, k, _w in chosen:
                x += [0.0, 1.0, None]
                y += [float(q), float(k), None]
            traces.append(
                go.Scatter(
                    x=x,
                    y=y,
                    mode="lines",
                    line={"color": colour, "width": 1.0 + b},
                    opacity=opacity,
                    hoverinfo="skip",
                    name=head_name(layer, head, labels),
                    legendgroup=head_label(layer, head),
                    showlegend=b == len(BIN_OPACITY) - 1,
                )
            )
            pairs_of_trace.append([[q, k] for q, k, _w in chosen])
    line_traces = list(range(len(traces)))
    for side, x, pos in (("query", 0.0, "middle left"), ("key", 1.0, "middle right")):
        traces.append(
            go.Scatter(
                x=[x] * n,
                y=list(range(n)),
                mode="markers+text",
                text=tokens,
                textposition=pos,
                textfont={"size": 11},
                marker={"size": 7, "color": "#555"},
                customdata=[[int(t), side] for t in kept],
                hovertemplate="%{text} (#%{customdata[0]}, " + side + ")<extra></extra>",
                showlegend=False,
                name=f"{side}s",
            )
        )
    heads_txt = ", ".join(head_name(layer, h, labels) for h in lines)
    fig = go.Figure(traces)
    fig.update_layout(
        title={
            "text": f"Head view — {heads_txt} (weights ≥ {threshold:g})",
            "font": {"size": 14},
        },
        xaxis={"visible": False, "range": [-0.6, 1.6], "fixedrange": True},
        yaxis={"visible": False, "autorange": "reversed", "fixedrange": True},
        height=max(320, min(2400, 80 + 16 * n)),
        margin={"l": 10, "r": 10, "t": 60, "b": 10},
        plot_bgcolor="white",
        hovermode="closest",
        legend={
            "x": 1.0,
            "y": 1.0,
            "xanchor": "right",
            "yanchor": "top",
            "bgcolor": "rgba(255,255,255,0.8)",
        },
        annotations=[
            {
                "text": "query",
                "x": 0.0,
                "y": 1.0,
                "xref": "x",
                "yref": "paper",
                "yanchor": "bottom",
                "showarrow": False,
                "font": {"color": "#666"},
            },
            {
                "text": "key",
                "x": 1.0,
                "y": 1.0,
                "xref": "x",
                "yref": "paper",
                "yanchor": "bottom",
                "showarrow": False,
                "font": {"color": "#666"},
            },
        ],
        meta={
            "headview": {
                "traces": line_traces,
                "pairs": pairs_of_trace,
                "layer": layer,
                "heads": list(lines),
                "threshold": threshold,
            }
        },
    )
    return fig


def _pool(a: np.ndarray, cells: int) -> np.ndarray:
    """Block means of ``a`` ``[n, n]`` down to at most ``cells`` x ``cells``."""
    n = a.shape[0]
    if n <= cells:
        return a
    edges = np.linspace(0, n, cells + 1).astype(int)
    rows = np.add.reduceat(a, edges[:-1], axis=0) / np.diff(edges)[:, None]
    return np.add.reduceat(rows, edges[:-1], axis=1) / np.diff(edges)[None, :]


MODEL_PX = 720  # the model view's cells take at most this height (docs/dashboard.md)


def model_view_figure(
    result: dict[str, Any], *, layer: int | None = None, head: int | None = None
) -> go.Figure:
    """Every head's attention pattern, layers down and heads across, each scaled to its own maximum.

    The selected (layer, head), when given, is framed. Clicking a cell names its head.
    """
    sec = gallery_section(result)
    grid = grid_attention(sec) if sec else None
    if grid is None:
        why = (sec or {}).get(
            "attention_omitted"
        ) or "The model view appears once every head is computed."
        return empty_figure(why, height=EMPTY_PX)
    layers, heads = list(sec["layers"]), list(sec["heads"])  # type: ignore[index]
    n = grid.shape[2]
    s = min(n, MODEL_CELLS)
    stride = s + 1
    z = np.full((len(layers) * stride - 1, len(heads) * stride - 1), np.nan)
    for li in range(len(layers)):
        for hi in range(len(heads)):
            p = _pool(grid[li, hi].astype(np.float64), s)
            z[li * stride : li * stride + s, hi * stride : hi * stride + s] = p / (p.max() or 1.0)
    fig = go.Figure(
        go.Heatmap(
            z=np.round(z, 3),
            colorscale="Blues",
            zmin=0.0,
            zmax=1.0,
            hoverongaps=False,
            hovertemplate="%{z:.2f} of the head's maximum (queries down, keys across)<extra></extra>",
            colorbar={
                "title": {"text": "A / head max", "side": "right"},
                "thickness": 10,
                "len": 0.8,
            },
        )
    )
    shapes = []
    if layer in layers and head in heads:
        li, hi = layers.index(layer), heads.index(head)
        shapes.append(
            {
                "type": "rect",
                "x0": hi * stride - 0.9,
                "x1": hi * stride + s - 0.1,
                "y0": li * stride - 0.9,
                "y1": li * stride + s - 0.1,
                "line": {"color": "#e6550d", "width": 2},
            }
        )
    fig.update_layout(
        title={
            "text": "Model view — every head's attention; click a head to select it",
            "font": {"size": 14},
        },
        xaxis={
            "tickmode": "array",
            "tickvals": [hi * stride + (s - 1) / 2 for hi in range(len(heads))],
            "ticktext": [f"H{h}" for h in heads],
            "side": "top",
            "showgrid": False,
            "zeroline": False,
            "constrain": "domain",
        },
        yaxis={
            "tickmode": "array",
            "tickvals": [li * stride + (s - 1) / 2 for li in range(len(layers))],
            "ticktext": [f"L{la}" for la in layers],
            "autorange": "reversed",
            "showgrid": False,
            "zeroline": False,
            "scaleanchor": "x",
            "constrain": "domain",
        },
        # square cells in a ~600 px column, at most MODEL_PX tall: a model with few heads a layer
        # (Gemma 3: 18 x 4) gets smaller cells, not a page-long column beside an empty one
        height=int(130 + min(MODEL_PX, 600 * len(layers) / max(1, len(heads)))),
        margin={"l": 50, "r": 20, "t": 70, "b": 10},
        plot_bgcolor="white",
        shapes=shapes,
        meta={"modelview": {"layers": layers, "heads": heads, "stride": stride, "size": s}},
    )
    return fig


def model_view_click(
    click_data: dict[str, Any] | None, meta: dict[str, Any]
) -> tuple[int, int] | None:
    """(layer, head) of a click on ``model_view_figure`` (mirrors ``assets/heads.js``), or None."""
    try:
        point = click_data["points"][0]  # type: ignore[index]
        stride, size = int(meta["stride"]), int(meta["size"])
        x, y = int(round(float(point["x"]))), int(round(float(point["y"])))
        if x % stride >= size or y % stride >= size:
            return None  # a gap between heads
        return int(meta["layers"][y // stride]), int(meta["heads"][x // stride])
    except (TypeError, KeyError, IndexError, ValueError):
        return None
