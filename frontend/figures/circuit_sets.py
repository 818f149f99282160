"""A circuit found on a task data set, scored as MIB scores it (docs/circuits.md, "Circuits on a task
data set"): pure functions, the ``circuits-set`` result (docs/results.md) -> plotly Figures and text.

The faithfulness curve is drawn on MIB's axis (k, the fraction of the edges, on a log scale) with the
random circuits' band (their mean ± the sd over seeds); CPR and CMD sit beside random's; the
stability is the bootstrap Jaccard per size; the circuit at a size reuses the pair view's labelled
graph (``frontend/figures/circuit_graph.py``) on the set's listed edges.

    >>> faithfulness_figure(result); scores_line(result); circuit_at(result, 0.01)
"""

from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go

from frontend.figures.base import empty_figure
from frontend.figures.circuit_graph import circuit_figure
from workers.analyses.circuits.spec import DRAWN_EDGES, EDGE_ATTRIBUTION

FOUND, ABS, RANDOM = "#2166ac", "#5aae61", "#888888"
BAND = "rgba(136, 136, 136, 0.25)"
STABLE = 0.8  # a proposed bar for a stable circuit (docs/circuits.md)


def _fmt(value: Any, digits: int = 2) -> str:
    return "—" if value is None else f"{float(value):.{digits}f}"


def accuracy_line(result: dict[str, Any]) -> str:
    """``accuracy 94% · mean logit difference 3.21 · 100 discovery + 100 held-out examples``."""
    n = result.get("n_examples") or {}
    return (
        f"accuracy {float(result['accuracy']):.0%} · mean logit difference "
        f"{float(result['logit_diff']):.2f} · {n.get('discovery', '?')} discovery + "
        f"{n.get('evaluation', '?')} held-out examples · {result.get('method', '')}"
    ).rstrip(" ·")


def scores_line(result: dict[str, Any]) -> str:
    """CPR and CMD beside random's: ``CPR 1.85 (random 0.25 ± 0.03; higher is better) · CMD 0.03
    (random 0.75 ± 0.02; nearer 0 is better)``."""
    rnd = result.get("random") or {}
    spread = rnd.get("spread") or {}

    def beside(key: str) -> str:
        if rnd.get(key) is None:
            return "no random circuits"
        return f"random {_fmt(rnd[key])} ± {_fmt(spread.get(key))}"

    return (
        f"CPR {_fmt(result['cpr'])} ({beside('cpr')}; higher is better) · "
        f"CMD {_fmt(result['cmd'])} ({beside('cmd')}; nearer 0 is better)"
    )


def faithfulness_figure(result: dict[str, Any]) -> go.Figure:
    """Faithfulness against k (the fraction of the edges, log x): the found circuit by signed score
    (CPR's curve) and by |score| (CMD's), the random circuits' mean with a band of ± their sd."""
    curve = result.get("curve") or []
    if not curve:
        return empty_figure("No faithfulness curve in this result.")
    fig = go.Figure()
    rnd = result.get("random") or {}
    rc = rnd.get("curve") or []
    if rc:
        sd = {float(k): float(s or 0.0) for k, s in (rnd.get("spread") or {}).get("curve") or []}
        ks = [float(k) for k, _ in rc]
        lo = [float(v) - sd.get(k, 0.0) for k, (_, v) in zip(ks, rc, strict=True)]
        hi = [float(v) + sd.get(k, 0.0) for k, (_, v) in zip(ks, rc, strict=True)]
        fig.add_trace(
            go.Scatter(
                x=ks + ks[::-1],
                y=hi + lo[::-1],
                fill="toself",
                fillcolor=BAND,
                line={"width": 0},
                hoverinfo="skip",
                name="random ± sd",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=ks,
                y=[float(v) for _, v in rc],
                mode="lines+markers",
                line={"color": RANDOM, "dash": "dot"},
                name=f"random (mean of {rnd.get('seeds', '?')})",
                hovertemplate="k = %{x}<br>random faithfulness %{y:.3f}<extra></extra>",
            )
        )
    for points, name, colour in (
        (result.get("curve_abs") or [], "circuit by |score| (CMD)", ABS),
        (curve, "circuit by score (CPR)", FOUND),
    ):
        if points:
            fig.add_trace(
                go.Scatter(
                    x=[float(k) for k, _ in points],
                    y=[float(v) for _, v in points],
                    mode="lines+markers",
                    line={"color": colour},
                    name=name,
                    hovertemplate="k = %{x}<br>faithfulness %{y:.3f}<extra></extra>",
                )
            )
    fig.add_hline(y=1.0, line={"color": "#444", "width": 1, "dash": "dash"})
    fig.update_layout(
        title=f"Faithfulness on the {(result.get('n_examples') or {}).get('evaluation', '')} held-out "
        "examples at MIB's sizes",
        title_font_size=12,
        xaxis={"type": "log", "title": "k: fraction of the edges in the circuit"},
        yaxis={"title": "faithfulness"},
        legend={"orientation": "h", "y": -0.25},
        margin={"t": 50, "l": 60, "r": 20, "b": 80},
        height=420,
    )
    return fig


def stability_figure(result: dict[str, Any]) -> go.Figure:
    """The bootstrap Jaccard of each resample's circuit with the full set's, per size (mean ± sd)."""
    rows = result.get("stability") or []
    if not rows:
        return empty_figure("No stability: run with bootstrap resamples B > 0.")
    fig = go.Figure(
        go.Scatter(
            x=[float(k) for k, _, _ in rows],
            y=[float(m) for _, m, _ in rows],
            error_y={"type": "data", "array": [float(s) for _, _, s in rows], "visible": True},
            mode="lines+markers",
            line={"color": FOUND},
            name="Jaccard (mean ± sd)",
            hovertemplate="k = %{x}<br>Jaccard %{y:.3f}<extra></extra>",
        )
    )
    fig.add_hline(
        y=STABLE,
        line={"color": "#b2182b", "width": 1, "dash": "dash"},
        annotation_text=f"{STABLE} (a proposed bar)",
    )
    fig.update_layout(
        title=f"Stability: {result.get('bootstrap', '?')} bootstrap resamples of the discovery examples",
        title_font_size=12,
        xaxis={"type": "log", "title": "k: fraction of the edges"},
        yaxis={"title": "Jaccard with the full set's circuit", "range": [0, 1.05]},
        margin={"t": 50, "l": 60, "r": 20, "b": 50},
        height=360,
        showlegend=False,
    )
    return fig


def size_options(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The sizes the circuit can be drawn at: MIB's fractions whose edge count is within the listed
    edges (``edges``), as dropdown options ``{label, value}`` (value: the fraction)."""
    listed = len(result.get("edges") or [])
    total = int(result.get("n_edges_total") or 0)
    out = []
    for k in result.get("sizes") or []:
        n = math.ceil(float(k) * total) if total else 0
        if 0 < n <= listed:
            out.append({"label": f"k = {k:g} ({n:,} edges)", "value": float(k)})
    return out


def circuit_at(result: dict[str, Any], k: float | None, *, layout: str = "head") -> go.Figure:
    """The circuit of the top ``ceil(k E)`` edges by |score| (pruned to paths from the embeddings to
    the logits, labelled), drawn as the pair view draws one; None: the largest listed size."""
    opts = size_options(result)
    if not opts:
        return empty_figure("No circuit: the result lists too few edges for MIB's smallest size.")
    k = (
        float(k)
        if k is not None and any(o["value"] == float(k) for o in opts)
        else opts[-1]["value"]
    )
    n = math.ceil(k * int(result["n_edges_total"]))
    faithful = {float(a): float(f) for a, f in result.get("curve_abs") or []}
    sec: dict[str, Any] = {
        "edges": result["edges"],
        "nodes": result["nodes"],
        "method": result.get("method", "EAP"),
    }
    if k in faithful:  # the top-k by |score| circuit's faithfulness (CMD's curve) in the title
        sec.update(circuit={"n_top": n}, faithfulness=faithful[k])
    fig = circuit_figure({EDGE_ATTRIBUTION: sec}, n_top=n, layout=layout, max_edges=DRAWN_EDGES)
    fig.update_layout(title={"text": f"k = {k:g}. {fig.layout.title.text}", "font": {"size": 12}})
    return fig


def example_rows(result: dict[str, Any], limit: int = 50) -> list[dict[str, Any]]:
    """The first ``limit`` examples with whether each found the circuit (``discovery``) or scored it."""
    disc = set(result.get("discovery_examples") or [])
    return [
        {"index": i, "split": "discovery" if i in disc else "held out", **ex}
        for i, ex in enumerate((result.get("examples") or [])[:limit])
    ]


def node_figure(result: dict[str, Any], top: int = 15) -> go.Figure:
    """The ``top`` AtP node scores (``node_scores.top``: heads ``L17H5``, feed-forwards ``FF12``) as
    horizontal bars, the strongest at the top, signed (blue restores the answer, red works against it)."""
    nodes = ((result.get("node_scores") or {}).get("top") or [])[:top]
    if not nodes:
        return empty_figure("No node scores in this result.")
    rows = nodes[::-1]  # plotly draws the first bar at the bottom
    n = (result.get("node_scores") or {}).get("n_examples")
    fig = go.Figure(
        go.Bar(
            x=[nd["score"] for nd in rows],
            y=[nd["id"] for nd in rows],
            orientation="h",
            marker_color=[FOUND if nd["score"] >= 0 else "#b2182b" for nd in rows],
            hovertemplate="%{y}: %{x:.4f}<extra></extra>",
            name="AtP",
        )
    )
    fig.update_layout(
        title={
            "text": f"AtP node scores: the top {len(nodes)} by |score| (mean over {n} discovery "
            "examples, a fraction of the mean logit difference)",
            "font": {"size": 12},
        },
        xaxis_title="score",
        height=max(260, 22 * len(nodes) + 90),
        margin={"l": 70, "r": 20, "t": 50, "b": 40},
    )
    return fig
