"""Figures of the corpus page (docs/corpus.md): pure functions, result JSON -> Figure or rows.

A corpus result has ``statistics`` and ``counts`` ({statistic: [layer][head]}), ``histograms``
({statistic: {"range", "bins", "counts" [layer][head][bin]}}), ``top_pairs`` [layer][head][pair],
``head_map`` ({"xy" [layer][head][2], "explained", ...}); a joint map has ``xy`` (queries then keys),
``token``, ``context``, ``position``, ``text``, ``sampled``, ``n_tokens``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from frontend.figures.base import empty_figure
from frontend.kit.atlas_labels import Labels, format_label
from workers.core.notation import display_token, head_label, parse_head  # noqa: F401 - parse_head: the page's

STAT_LABELS = {
    "entropy": "entropy (nats)",
    "entropy_normalised": "entropy / ln #keys",
    "sink": "first token (sink)",
    "previous": "previous token",
    "self": "self",
    "distance": "mean distance",
    "induction": "induction",
    "duplicate": "duplicate token",
}
SELECTED = "#d62728"


head_key = head_label  # the page's head ids ``L2H5``: the one formatter (workers/core/notation.py)


def statistics_of(result: dict[str, Any]) -> list[str]:
    return [s for s in STAT_LABELS if s in (result.get("statistics") or {})]


def _grid(result: dict[str, Any], stat: str) -> np.ndarray:
    return np.array(result["statistics"][stat], dtype=float)  # None -> nan


def table_rows(result: dict[str, Any], head_labels: Labels | None = None) -> list[dict[str, Any]]:
    """One row per head: ``head`` ("L2H5"), ``layer``, ``index`` and each statistic (4 digits; None
    where it applies to no query); with ``head_labels`` (the stored atlas', ``kit.atlas_labels``)
    also ``atlas``, the head's label (``induction``, ``induction?`` tentative, ``""`` none)."""
    stats = statistics_of(result)
    if not stats:
        return []
    grids = {s: _grid(result, s) for s in stats}
    n_layers, n_heads = grids[stats[0]].shape
    rows = []
    for layer in range(n_layers):
        for head in range(n_heads):
            row: dict[str, Any] = {"head": head_key(layer, head)}
            if head_labels:  # beside the head, as in the columns
                row["atlas"] = format_label(head_labels.get((layer, head)))
            row.update(layer=layer, index=head)
            for s in stats:
                v = grids[s][layer, head]
                row[s] = None if not np.isfinite(v) else round(float(v), 4)
            rows.append(row)
    return rows


def table_columns(
    result: dict[str, Any], head_labels: Labels | None = None
) -> list[dict[str, Any]]:
    """The table's AG Grid column definitions: the head's name (text filter), its atlas label where
    ``head_labels`` are given, then numbers (a number typed in a column's filter keeps the rows
    above it; the filter's menu picks another condition)."""
    number = {
        "filter": "agNumberColumnFilter",
        "type": "numericColumn",
        "filterParams": {"defaultOption": "greaterThan", "buttons": ["reset"]},
    }
    cols = [
        {
            "field": "head",
            "headerName": "head",
            "filter": "agTextColumnFilter",
            "pinned": "left",
            "comparator": {"function": "headOrder"},
        },
        *(
            [
                {
                    "field": "atlas",
                    "headerName": "atlas label",
                    "filter": "agTextColumnFilter",
                    "pinned": "left",
                    "headerTooltip": "the head atlas' label (? tentative)",
                }
            ]
            if head_labels
            else []
        ),  # fmt: skip
        {
            "field": "layer",
            "headerName": "layer",
            **number,
            "filterParams": {"defaultOption": "equals"},
        },
        {
            "field": "index",
            "headerName": "index",
            **number,
            "filterParams": {"defaultOption": "equals"},
        },
    ]
    return cols + [
        {"field": s, "headerName": STAT_LABELS[s], **number} for s in statistics_of(result)
    ]


def head_map_figure(
    result: dict[str, Any], *, color_by: str = "layer", selected: tuple[int, int] | None = None
) -> go.Figure:
    """Every head at its 2-D position (PCA of standardised statistics), coloured by layer or by a
    statistic; ``customdata`` is the head id, so a click selects it."""
    hm = result.get("head_map")
    if not hm:
        return empty_figure("The map of heads appears when the job finishes.")
    xy = np.array(hm["xy"], dtype=float)  # [layer, head, 2]
    n_layers, n_heads = xy.shape[:2]
    layers, heads = np.meshgrid(np.arange(n_layers), np.arange(n_heads), indexing="ij")
    ids = [head_key(int(a), int(b)) for a, b in zip(layers.ravel(), heads.ravel(), strict=True)]
    if color_by in (result.get("statistics") or {}):
        colour, title = _grid(result, color_by).ravel(), STAT_LABELS.get(color_by, color_by)
    else:
        colour, title = layers.ravel().astype(float), "layer"
    hover = [
        f"head {i}<br>{title}: {c:.3f}" if np.isfinite(c) else f"head {i}<br>{title}: n/a"
        for i, c in zip(ids, colour, strict=True)
    ]
    fig = go.Figure(
        go.Scatter(
            x=xy[..., 0].ravel(),
            y=xy[..., 1].ravel(),
            mode="markers+text",
            text=ids,
            textposition="top center",
            textfont={"size": 9},
            customdata=ids,
            hovertext=hover,
            hoverinfo="text",
            marker={
                "size": 11,
                "color": np.nan_to_num(
                    colour, nan=np.nanmin(colour) if np.isfinite(colour).any() else 0
                ),
                "colorscale": "Viridis",
                "showscale": True,
                "colorbar": {"title": title},
            },
        )
    )
    if selected is not None and selected[0] < n_layers and selected[1] < n_heads:
        fig.add_trace(
            go.Scatter(
                x=[xy[selected][0]],
                y=[xy[selected][1]],
                mode="markers",
                hoverinfo="skip",
                marker={
                    "size": 20,
                    "color": "rgba(0,0,0,0)",
                    "line": {"color": SELECTED, "width": 3},
                },
                showlegend=False,
            )
        )
    ex = hm.get("explained") or [0, 0]
    fig.update_layout(
        height=460,
        showlegend=False,
        margin={"l": 40, "r": 20, "t": 40, "b": 40},
        title=f"Map of heads (PCA of standardised statistics; {100 * sum(ex[:2]):.0f}% of variance)",
        xaxis_title=f"PC1 ({100 * ex[0]:.0f}%)",
        yaxis_title=f"PC2 ({100 * ex[1]:.0f}%)",
    )
    return fig


def head_compare_figure(result: dict[str, Any], *, layer: int, head: int) -> go.Figure:
    """Each statistic of every head (grey) with the selected head marked, standardised per statistic
    so statistics of different scales share one axis; hover shows the raw values."""
    stats = statistics_of(result)
    if not stats:
        return empty_figure("No statistics yet.")
    fig = go.Figure()
    for s in stats:
        g = _grid(result, s)
        flat = g.ravel()
        finite = flat[np.isfinite(flat)]
        mu, sd = (finite.mean(), finite.std()) if finite.size else (0.0, 1.0)
        z = (flat - mu) / (sd if sd > 1e-12 else 1.0)
        fig.add_trace(
            go.Box(
                y=z,
                name=STAT_LABELS[s],
                boxpoints="all",
                jitter=0.4,
                pointpos=0,
                marker={"size": 4, "color": "#999"},
                line={"color": "#bbb"},
                hoverinfo="skip",
                showlegend=False,
            )
        )
        v = g[layer, head]
        if np.isfinite(v):
            zs = (v - mu) / (sd if sd > 1e-12 else 1.0)
            fig.add_trace(
                go.Scatter(
                    x=[STAT_LABELS[s]],
                    y=[zs],
                    mode="markers",
                    showlegend=False,
                    marker={"size": 14, "color": SELECTED, "symbol": "diamond"},
                    hovertext=f"{STAT_LABELS[s]}: {v:.4f} (heads' mean {mu:.4f})",
                    hoverinfo="text",
                )
            )
    fig.update_layout(
        height=360,
        title=f"Head {head_key(layer, head)} against every head (standardised)",
        yaxis_title="z-score over heads",
        margin={"l": 50, "r": 20, "t": 40, "b": 80},
    )
    return fig


def histogram_figure(result: dict[str, Any], *, stat: str, layer: int, head: int) -> go.Figure:
    """The selected head's histogram of per-text means of ``stat``."""
    hist = (result.get("histograms") or {}).get(stat)
    if not hist:
        return empty_figure("Histograms appear when the job finishes.", height=260)
    lo, hi = hist["range"]
    bins = int(hist["bins"])
    edges = np.linspace(lo, hi, bins + 1)
    counts = hist["counts"][layer][head]
    fig = go.Figure(
        go.Bar(
            x=(edges[:-1] + edges[1:]) / 2,
            y=counts,
            width=(hi - lo) / bins * 0.95,
            marker={"color": SELECTED},
        )
    )
    fig.update_layout(
        height=260,
        title=f"Head {head_key(layer, head)}: {STAT_LABELS.get(stat, stat)}, per-text means",
        xaxis_title=STAT_LABELS.get(stat, stat),
        yaxis_title="texts",
        margin={"l": 50, "r": 20, "t": 40, "b": 40},
    )
    return fig


def joint_map_figure(joint: dict[str, Any] | None, *, color_by: str = "kind") -> go.Figure:
    """Queries (circles) and keys (diamonds) of one head in one 2-D embedding; coloured query/key or
    by position; hover shows the token and its context."""
    if not joint or not joint.get("xy"):
        return empty_figure("Press “Joint query–key map” for the selected head.")
    xy = np.array(joint["xy"], dtype=float)
    n = len(joint["token"])
    fig = go.Figure()
    for kind, sl, symbol, colour in (
        ("query", slice(0, n), "circle", "#1f77b4"),
        ("key", slice(n, 2 * n), "diamond", "#ff7f0e"),
    ):
        hover = [  # raw pieces, the context's joined by spaces: shown as every page shows tokens
            f"{kind} “{display_token(t)}” (text {tx}, position {p})<br>"
            + " ".join(display_token(x) for x in str(c).split(" "))
            for t, tx, p, c in zip(
                joint["token"], joint["text"], joint["position"], joint["context"], strict=True
            )
        ]
        marker: dict[str, Any] = {"size": 5, "symbol": symbol, "opacity": 0.7}
        if color_by == "position":
            marker.update(
                color=joint["position"],
                colorscale="Viridis",
                showscale=kind == "query",
                colorbar={"title": "position"},
            )
        else:
            marker["color"] = colour
        fig.add_trace(
            go.Scattergl(
                x=xy[sl, 0],
                y=xy[sl, 1],
                mode="markers",
                name="queries" if kind == "query" else "keys",
                marker=marker,
                hovertext=hover,
                hoverinfo="text",
            )
        )
    note = (
        f"{n:,} of {joint['n_tokens']:,} tokens, sampled"
        if joint.get("sampled")
        else f"all {n:,} tokens"
    )
    fig.update_layout(
        height=480,
        title=f"Joint query–key map of head {head_key(joint['layer'], joint['head'])} "
        f"({joint.get('method', 'tsne')}; {note})",
        margin={"l": 40, "r": 20, "t": 50, "b": 40},
        legend={"orientation": "h"},
    )
    return fig


def context_parts(pair: dict[str, Any]) -> list[tuple[str, str]]:
    """A top pair's context as (token, role) with role ``query``, ``key``, ``both`` or ``""``; each
    token as every page shows tokens (``Ġtook`` -> ``␣took``: workers/core/notation.py), the ``…``
    between two windows as it is."""
    out = []
    for i, tok in enumerate(pair.get("tokens") or []):
        role = (
            "both"
            if i == pair.get("q_at") == pair.get("k_at")
            else ("query" if i == pair.get("q_at") else "key" if i == pair.get("k_at") else "")
        )
        out.append((str(tok) if tok == "…" else display_token(str(tok)), role))
    return out
