"""Figures of a comparison of two models (docs/compare.md): pure functions, result JSON -> Figure.

Heads are flat indices ``layer * n_heads + head`` in the result; here they are labelled ``L1H9``::

    similarity_figure(result)            # heads of A (rows) x heads of B, layer boundaries drawn
    word_map_figure(section, layer=2, head=5, title="minilm L2H5")
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from frontend.figures.base import empty_figure
from frontend.figures.tokens import display_text
from frontend.kit.atlas_labels import Labels, format_label
from workers.core.notation import head_label as label_of

COLOUR_A, COLOUR_B = "#1f77b4", "#d62728"


def head_label(flat: int, n_heads: int) -> str:
    """A flat head index (``layer * n_heads + head``) as ``L1H9`` (workers/core/notation.py)."""
    return label_of(flat // n_heads, flat % n_heads)


def labels(side: dict[str, Any]) -> list[str]:
    return [
        head_label(i, int(side["n_heads"]))
        for i in range(int(side["n_layers"]) * int(side["n_heads"]))
    ]


def parse_cell(cell: Any) -> tuple[int, int] | None:
    """``[a, b]`` flat head indices of a selected cell, or None."""
    if (
        isinstance(cell, list | tuple)
        and len(cell) == 2
        and all(isinstance(x, int) and x >= 0 for x in cell)
    ):
        return int(cell[0]), int(cell[1])
    return None


def clicked_cell(point: dict[str, Any]) -> tuple[int, int] | None:
    """The (a, b) of a click on the similarity matrix: its x (head of B) and y (head of A). Dash does
    not pass a heatmap cell's customdata on (its point number is a pair), so the axes are indices."""
    x, y = point.get("x"), point.get("y")
    return _cell(y, x)


def _cell(a: Any, b: Any) -> tuple[int, int] | None:
    return parse_cell([a, b]) if isinstance(a, int) and isinstance(b, int) else None


def similarity_figure(
    result: dict[str, Any], *, selected: tuple[int, int] | None = None
) -> go.Figure:
    """The head-similarity matrix: rows heads of A, columns heads of B, lines at layer boundaries,
    the Hungarian pairs as dots; x and y are head indices, so a click selects the pair (``clicked_cell``)."""
    sim = np.array(result["similarity"], dtype=float)
    a, b = result["model_a"], result["model_b"]
    la, lb = labels(a), labels(b)
    fig = go.Figure(
        go.Heatmap(
            z=sim,
            x=list(range(sim.shape[1])),
            y=list(range(sim.shape[0])),
            colorscale="Viridis",
            colorbar={"title": "1 − JSD"},
            text=[
                [f"A {la[i]} · B {lb[j]}" for j in range(sim.shape[1])] for i in range(sim.shape[0])
            ],
            hovertemplate="%{text}<br>similarity %{z:.3f}<extra></extra>",
        )
    )
    pairs = result["matching"]["pairs"]
    fig.add_trace(
        go.Scatter(
            x=[p["b"] for p in pairs],
            y=[p["a"] for p in pairs],
            mode="markers",
            marker={"size": 4, "color": "white", "line": {"color": "black", "width": 0.5}},
            name="Hungarian pairs",
            hoverinfo="skip",
        )
    )
    shapes = []
    for layer in range(1, int(a["n_layers"])):
        y = layer * int(a["n_heads"]) - 0.5
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "y",
                "x0": -0.5,
                "x1": sim.shape[1] - 0.5,
                "y0": y,
                "y1": y,
                "line": {"color": "white", "width": 1},
            }
        )
    for layer in range(1, int(b["n_layers"])):
        x = layer * int(b["n_heads"]) - 0.5
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "y",
                "y0": -0.5,
                "y1": sim.shape[0] - 0.5,
                "x0": x,
                "x1": x,
                "line": {"color": "white", "width": 1},
            }
        )
    if selected is not None:
        i, j = selected
        shapes.append(
            {
                "type": "rect",
                "x0": j - 0.5,
                "x1": j + 0.5,
                "y0": i - 0.5,
                "y1": i + 0.5,
                "line": {"color": "#ff7f0e", "width": 3},
            }
        )

    def ticks(side: dict[str, Any]) -> dict[str, Any]:
        h = int(side["n_heads"])
        return {
            "tickvals": [k * h + (h - 1) / 2 for k in range(int(side["n_layers"]))],
            "ticktext": [f"L{k}" for k in range(int(side["n_layers"]))],
        }

    fig.update_layout(
        shapes=shapes,
        height=520,
        showlegend=False,
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
        title=f"Head similarity over {result['n_texts']} text(s): {a['name']} (rows) × {b['name']} (columns)",
        xaxis={"title": f"{b['name']} heads by layer", **ticks(b)},
        yaxis={"title": f"{a['name']} heads by layer", "autorange": "reversed", **ticks(a)},
    )
    return fig


def pair_rows(
    result: dict[str, Any], labels_a: Labels | None = None, labels_b: Labels | None = None
) -> list[dict[str, Any]]:
    """The matched pairs as table rows: each pair's heads and similarity, and each head's best partner;
    with a model's atlas labels (``kit.atlas_labels``) its heads' labels (``label_a``, ``label_b``;
    ``""`` for an unlabelled head), which the table's CSV export carries."""
    a, b, m = result["model_a"], result["model_b"], result["matching"]
    la, lb = labels(a), labels(b)
    ha, hb = int(a["n_heads"]), int(b["n_heads"])
    rows = []
    for p in m["pairs"]:
        best_a, best_b = m["best_of_a"][p["a"]], m["best_of_b"][p["b"]]
        row = {
            "id": f"{p['a']}-{p['b']}",
            "head_a": la[p["a"]],
            "head_b": lb[p["b"]],
            "similarity": round(p["similarity"], 4),
            "best_of_a": lb[best_a["b"]],
            "best_of_a_sim": round(best_a["similarity"], 4),
            "best_of_b": la[best_b["a"]],
            "best_of_b_sim": round(best_b["similarity"], 4),
            "mutual": "yes" if best_a["b"] == p["b"] and best_b["a"] == p["a"] else "",
        }
        if labels_a:
            row["label_a"] = format_label(labels_a.get(divmod(p["a"], ha)))
        if labels_b:
            row["label_b"] = format_label(labels_b.get(divmod(p["b"], hb)))
        rows.append(row)
    return sorted(rows, key=lambda r: -r["similarity"])


PAIR_COLUMNS = [
    ("head_a", "A head"),
    ("head_b", "B head"),
    ("similarity", "similarity"),
    ("mutual", "mutual best"),
    ("best_of_a", "A's best partner"),
    ("best_of_a_sim", "its similarity"),
    ("best_of_b", "B's best partner"),
    ("best_of_b_sim", "its similarity "),
]


def pair_columns(
    labels_a: Labels | None = None, labels_b: Labels | None = None
) -> list[dict[str, Any]]:
    """The pairs table's column definitions: a model's ``label`` column follows its head's where its
    default atlas is stored (``labels_a``, ``labels_b`` not empty)."""
    cols: list[dict[str, Any]] = []
    for k, n in PAIR_COLUMNS:
        cols.append({"field": k, "headerName": n})
        if k == "head_a" and labels_a:
            cols.append({"field": "label_a", "headerName": "A label"})
        if k == "head_b" and labels_b:
            cols.append({"field": "label_b", "headerName": "B label"})
    return cols


def joint_map_figure(
    result: dict[str, Any], *, selected: tuple[int, int] | None = None
) -> go.Figure:
    """Both models' heads on one map (PCA of the statistics standardised over both), one marker per model."""
    prof = result.get("profiles")
    if not prof:
        return empty_figure("The joint map of heads appears when the comparison finishes.")
    fig = go.Figure()
    for key, side, colour, symbol in (
        ("xy_a", result["model_a"], COLOUR_A, "circle"),
        ("xy_b", result["model_b"], COLOUR_B, "diamond"),
    ):
        xy = np.array(prof[key], dtype=float).reshape(-1, 2)
        names = labels(side)
        fig.add_trace(
            go.Scatter(
                x=xy[:, 0],
                y=xy[:, 1],
                mode="markers",
                name=side["name"],
                marker={"size": 8, "color": colour, "symbol": symbol, "opacity": 0.75},
                hovertext=[f"{side['name']} {n}" for n in names],
                hoverinfo="text",
            )
        )
    if selected is not None:
        for key, idx in (("xy_a", selected[0]), ("xy_b", selected[1])):
            x, y = prof[key][idx]
            fig.add_trace(
                go.Scatter(
                    x=[x],
                    y=[y],
                    mode="markers",
                    showlegend=False,
                    hoverinfo="skip",
                    marker={
                        "size": 18,
                        "color": "rgba(0,0,0,0)",
                        "line": {"color": "#ff7f0e", "width": 3},
                    },
                )
            )
    ex = prof.get("explained") or [0, 0]
    fig.update_layout(
        height=440,
        margin={"l": 40, "r": 20, "t": 50, "b": 40},
        title=f"Heads of both models on one map (PCA of statistics standardised over both; "
        f"{100 * sum(ex[:2]):.0f}% of variance)",
        xaxis_title=f"PC1 ({100 * ex[0]:.0f}%)",
        yaxis_title=f"PC2 ({100 * ex[1]:.0f}%)",
    )
    return fig


def word_map_figure(
    section: dict[str, Any] | None, *, layer: int, head: int, title: str
) -> go.Figure:
    """One head's word-level map (``word-maps`` section): query words down, key words across."""
    if not section or not section.get("maps"):
        return empty_figure("Click a cell of the similarity matrix.")
    words = section["words"]
    z = np.array(section["maps"][layer][head], dtype=float)
    ticks = [f"{i}:{w}" for i, w in enumerate(words)]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=ticks,
            y=ticks,
            colorscale="Blues",
            zmin=0,
            zmax=max(float(z.max()), 1e-9),
            hovertemplate="query %{y}<br>key %{x}<br>%{z:.3f}<extra></extra>",
        )
    )
    fig.update_layout(
        height=460,
        margin={"l": 90, "r": 10, "t": 50, "b": 90},
        title=title,
        yaxis={"autorange": "reversed"},
        xaxis={"tickangle": -60},
    )
    return fig


def surprisal_figure(result: dict[str, Any], *, text: int = 0) -> go.Figure:
    """Both decoders' surprisal per word of one text (bits; a word's is the sum over its tokens)."""
    words = (result.get("words") or [None])[text] if result.get("words") else None
    if not words:
        return empty_figure(
            "Surprisal per word needs a decoder with a language-model head.", height=220
        )
    fig = go.Figure()
    ticks = [f"{i}:{w}" for i, w in enumerate(words["words"])]
    for key, side, colour in (
        ("a", result["model_a"], COLOUR_A),
        ("b", result["model_b"], COLOUR_B),
    ):
        s = words[key].get("surprisal") if words[key] else None
        if s:
            pred = words[key].get("predicted") or [None] * len(s)
            fig.add_trace(
                go.Bar(
                    x=ticks,
                    y=[np.nan if v is None else v for v in s],
                    name=side["name"],
                    marker_color=colour,
                    hovertext=[
                        f"predicted: {display_text(p) if p is not None else '–'}" for p in pred
                    ],
                )
            )
    fig.update_layout(
        barmode="group",
        height=300,
        margin={"l": 50, "r": 10, "t": 50, "b": 90},
        title="Surprisal per word (bits; hover: the model's top prediction for it)",
        yaxis_title="bits",
        xaxis={"tickangle": -60},
    )
    return fig
