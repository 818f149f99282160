"""Attention figures of the text explorer: the max-attention heatmaps (heads x tokens, one per
layer) and one head's attention matrix. Pure functions, result JSON -> plotly Figure.

``max_attention_spec`` builds the heatmaps as plotly JSON without plotly's per-property validation,
and ``typed_arrays`` sends its arrays as plotly.js typed arrays; why, measured: docs/dashboard.md
("What the page server and the job's publishing cost", "Measured costs the code points to").
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from frontend.figures.base import HEAT_SCALE, empty_figure
from frontend.figures.tokens import token_labels, token_ticks
from frontend.kit.heads import head_attention
from workers.analyses.attention.spec import MAX_ATTENTION
from workers.core.notation import head_label


def max_attention_figure(
    result: dict[str, Any], *, reduction: str = "max", layers: list[int] | None = None
) -> go.Figure:
    """One heads x tokens heatmap per layer, stacked; clicking a cell names (layer, head).

    Column j is the token ``layout.meta.tokens[j]``; trace t is the layer ``layout.meta.layers[t]``.
    The figure of ``max_attention_spec``.
    """
    return go.Figure(max_attention_spec(result, reduction=reduction, layers=layers))


GAP_MAX_TOKENS = 128  # above this many tokens the heatmaps' cells are drawn without gaps


def max_attention_spec(
    result: dict[str, Any], *, reduction: str = "max", layers: list[int] | None = None
) -> dict[str, Any]:
    """``max_attention_figure`` as the plotly JSON it sends (``{"data", "layout"}``), built without
    plotly's per-property validation, which validated every cell's hover label and took most of the
    page server's time per draw (docs/dashboard.md, "Measured costs the code points to").
    ``tests/test_figures.py`` holds that plotly's validation leaves it unchanged."""
    section = result.get(MAX_ATTENTION)
    if not section:
        return empty_figure("No maximum-attention result yet.").to_plotly_json()
    key = "max_attention" if reduction == "max" else "mean_attention"
    data = np.asarray(section[key], dtype=np.float64)  # [layer, head, token]
    n_layers, n_heads, n_tok = data.shape
    shown = shown_layers(result, layers)
    if not shown:
        return empty_figure("No layer selected.").to_plotly_json()
    kept = section.get("kept") or list(range(n_tok))
    labels = token_labels(result, kept)
    over = "queries i >= j (causal)" if section.get("causal") else "queries"  # who can see key j
    what = (
        f"max attention (max over {over})"
        if reduction == "max"
        else f"mean attention (mean over {over})"
    )
    windows = section.get("windows") or []

    n_text = len(result.get("tokens") or []) or n_tok  # the whole text's tokens, specials too

    def title(layer: int) -> str:  # a sliding-window layer says so where its window cuts the text
        w = windows[layer] if layer < len(windows) else None
        return (
            f"layer {layer} (local: each query sees the last {w} keys)"
            if w and n_text > w
            else f"layer {layer}"
        )

    layout = _stacked_layout(len(shown), min(0.08, 0.3 / len(shown)))
    for note, layer in zip(layout["annotations"], shown, strict=True):
        note["text"] = title(layer)
    zmax = float(data[shown].max()) or 1.0
    # Nothing per cell but the weight (float32, a typed array on the wire): x is the column's index,
    # the hover names its token through each x axis' labelalias (index -> token, as the attention
    # matrix does) and highlight.js finds a column's token in layout.meta.tokens. Per-cell hover text
    # and [token, layer, head] customdata were ~2 of the 2.7 MB a stored SmolLM2 page's heatmaps sent
    # at 452 tokens, and the hover text ~0.2 s of their drawing (docs/dashboard.md, "A stored result
    # opens from what is stored"); a click names the layer by the trace (layout.meta.layers), the
    # head by the row.
    alias = {str(i): label for i, label in enumerate(labels)}  # the "d" format writes i as str(i)
    hover_axis = {"hoverformat": "d", "labelalias": alias}
    columns = np.arange(n_tok, dtype=np.int32)
    # 1-px gaps between cells only where cells are wide: with any gap plotly.js paints each cell
    # apart (not as one image), a large part of the browser's time on long texts' heatmaps
    # (docs/dashboard.md, "Measured costs the code points to")
    gaps = {"xgap": 1, "ygap": 1} if n_tok <= GAP_MAX_TOKENS else {}
    traces = []
    for row, layer in enumerate(shown, start=1):
        suffix = "" if row == 1 else str(row)
        traces.append({
            "type": "heatmap", "z": data[layer].astype(np.float32), "x": columns,
            "y": list(range(n_heads)), "coloraxis": "coloraxis",
            "hovertemplate": f"L{layer}H%{{y}}<br>token %{{x}}<br>" + reduction
            + " attention %{z:.3f}<br>" + reduction + " over the " + over
            + " that see this token<extra></extra>",
            "name": f"layer {layer}", **gaps,
            "xaxis": f"x{suffix}", "yaxis": f"y{suffix}",
        })  # fmt: skip
        axis = {
            "title": {"text": "head"},
            "autorange": "reversed",
            "tickfont": {"size": 9},
            "ticklabeloverflow": "allow",
        }  # as token_ticks: no measuring of each label again
        if n_heads <= 16:
            axis["dtick"] = 1
        layout[f"yaxis{suffix}"].update(axis)
        layout[f"xaxis{suffix}"].update(hover_axis)
    layout[f"xaxis{'' if len(shown) == 1 else len(shown)}"].update(token_ticks(labels))
    layout.update(
        height=int(90 + len(shown) * (40 + 15 * n_heads)),
        coloraxis={"colorscale": _colorscale(HEAT_SCALE), "cmin": 0.0, "cmax": zmax,
                   "colorbar": {"title": {"text": reduction}, "thickness": 12}},
        margin={"l": 60, "r": 20, "t": 60, "b": 90},
        title={"text": f"{what} per layer: heads x tokens — click a cell to open that head",
               "font": {"size": 14}},
        plot_bgcolor="white",
        meta={"highlight": "columns", "layers": shown, "tokens": [int(k) for k in kept]},
    )  # fmt: skip
    return {"data": traces, "layout": layout}


def typed_arrays(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with its traces' numpy arrays as plotly.js typed arrays (``{"dtype", "bdata", "shape"}``),
    as a ``go.Figure`` sends them: what a Dash callback returns for a figure built as a dict (Dash
    encodes a dict's arrays as nested lists). The arrays are not copied."""
    try:
        from _plotly_utils.utils import to_typed_array_spec
    except ImportError:  # plotly < 6 sends lists either way
        return spec
    data = [{k: to_typed_array_spec(v) if isinstance(v, np.ndarray) else v for k, v in trace.items()}
            for trace in spec.get("data") or []]  # fmt: skip
    return {**spec, "data": data}


@lru_cache(maxsize=32)
def _stacked_layout_json(rows: int, spacing: float) -> str:
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=spacing,
                        subplot_titles=[f"row {r}" for r in range(rows)])  # fmt: skip
    return json.dumps(fig.layout.to_plotly_json())


def _stacked_layout(rows: int, spacing: float) -> dict[str, Any]:
    """A fresh copy of ``make_subplots``' layout of ``rows`` stacked plots sharing their x axis, one
    title annotation per row (made once per shape: docs/dashboard.md, "Measured costs the code
    points to")."""
    return json.loads(_stacked_layout_json(rows, spacing))


def _colorscale(name: str) -> list[list[Any]]:
    """A named colour scale as plotly's validation writes it (``[[0.0, "rgb(...)"], ...]``)."""
    return [list(step) for step in _named_scale(name)]


@lru_cache(maxsize=8)
def _named_scale(name: str) -> tuple[tuple[float, str], ...]:
    return tuple(tuple(step) for step in go.layout.Coloraxis(colorscale=name).colorscale)


def shown_layers(result: dict[str, Any], layers: list[int] | None) -> list[int]:
    """The layers ``max_attention_figure`` draws, in order (all when ``layers`` is empty)."""
    n_layers = len((result.get(MAX_ATTENTION) or {}).get("max_attention") or []) or int(
        result.get("n_layers") or 0
    )
    return [layer for layer in (layers or range(n_layers)) if 0 <= layer < n_layers]


def clicked_head(click_data: dict[str, Any] | None, layers: list[int]) -> tuple[int, int] | None:
    """(layer, head) of a click on ``max_attention_figure`` drawn with ``layers``, or None.

    Dash's clickData of a heatmap carries ``curveNumber`` (the subplot) and ``y`` (the head) but
    not the cell's customdata.
    """
    try:
        point = click_data["points"][0]  # type: ignore[index]
        custom = point.get("customdata")
        if isinstance(custom, list) and len(custom) == 3:
            return int(custom[1]), int(custom[2])
        return int(layers[int(point["curveNumber"])]), int(point["y"])
    except (TypeError, KeyError, IndexError, ValueError):
        return None


def attention_matrix_figure(result: dict[str, Any], *, layer: int, head: int) -> go.Figure:
    """The head's attention matrix, queries as rows (needs the one-head ``attention`` field)."""
    hit = head_attention(result, layer, head)
    if hit is None:
        return empty_figure(f"No attention matrix for {head_label(layer, head)} in this result.")
    a, kept, exact = hit  # [query, key]
    labels = token_labels(result, kept)
    # Nothing per cell but the weight (float32, a typed array on the wire): the hover names the
    # query and key through the axes' labelalias (index -> token, the same map draws the ticks) and
    # highlight.js finds a cell's token in layout.meta.tokens (docs/dashboard.md, "Measured costs the
    # code points to"). Per-cell hover text and customdata made the 452-token matrix ~5 MB.
    fig = go.Figure(
        go.Heatmap(
            z=np.asarray(a, dtype=np.float32),
            x=np.arange(len(kept), dtype=np.int32),
            y=np.arange(len(kept), dtype=np.int32),
            hovertemplate="query → key: %{y} → %{x}<br>attention %{z:.3f}<extra></extra>",
            colorscale=HEAT_SCALE,
            zmin=0.0,
            colorbar={"title": {"text": "A"}, "thickness": 12},
        )
    )
    ticks = token_ticks(labels)
    alias = {str(i): label for i, label in enumerate(labels)}  # the "d" format writes i as str(i)
    ticks = {**{k: v for k, v in ticks.items() if k != "ticktext"}, "tickformat": "d",
             "hoverformat": "d", "labelalias": alias}  # fmt: skip
    fig.update_layout(
        title={
            "text": f"Attention matrix — {head_label(layer, head)} (rows: queries)"
            + ("" if exact else ", weights to 1/255"),
            "font": {"size": 14},
        },
        xaxis={**ticks, "title": {"text": "key"}},
        yaxis={
            **{k: v for k, v in ticks.items() if k != "tickangle"},
            "title": {"text": "query"},
            "autorange": "reversed",
        },
        height=max(360, min(900, 120 + 14 * len(kept))),
        margin={"l": 80, "r": 20, "t": 60, "b": 90},
        meta={"highlight": "matrix", "tokens": [int(k) for k in kept]},
    )
    return fig
