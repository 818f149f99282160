"""Figures of the circuits page (docs/circuits.md): pure functions, result JSON -> plotly Figure, and the
graphs as JSON and GraphML.

They read the sections ``edge-attribution`` (the circuit and its faithfulness curve), ``attribution-
patching`` (AtP against real patching) and ``information-flow`` (the routes over the tokens) of a result
(docs/results.md).

    >>> circuit_figure(result, n_top=50)   # the pruned top-50 circuit, layers bottom to top
    >>> flow_figure(flow_result)           # positions x layers, edges ≥ τ from the chosen position
"""

from __future__ import annotations

from typing import Any
from xml.sax.saxutils import quoteattr

import numpy as np
import plotly.graph_objects as go

from frontend.figures.base import empty_figure
from frontend.figures.causal import labels, titled_layout
from frontend.figures.circuit_graph import (  # noqa: F401 - the circuit's figure, offered here too
    HEAD_CLICK,
    LAYOUTS,
    NEGATIVE,
    POSITIVE,
    WIDTH_BINS,
    binned_lines,
    circuit_edges,
    circuit_figure,
    circuit_sizes,
    faithfulness_at,
    opening_size,
    prune,
)
from frontend.figures.tokens import display_text, token_ticks
from frontend.kit.atlas_labels import Labels, format_label, label_grid
from workers.analyses.circuits.spec import ATTRIBUTION_PATCHING, EDGE_ATTRIBUTION, INFORMATION_FLOW

# ----------------------------------------------------------------------------- the circuit (EAP)


def faithfulness_figure(result: dict[str, Any], *, n_top: int | None = None) -> go.Figure:
    """Faithfulness of the pruned top-N circuit against N (log axis), the chosen N marked."""
    sec = result.get(EDGE_ATTRIBUTION)
    if not sec or not sec.get("curve"):
        return empty_figure("No faithfulness curve yet.")
    curve = np.asarray(sec["curve"], dtype=np.float64)  # [size, 2]
    fig = go.Figure(
        go.Scatter(
            x=curve[:, 0].tolist(),
            y=curve[:, 1].tolist(),
            mode="lines+markers",
            name="faithfulness",
            hovertemplate="top %{x:.0f} edges: faithfulness %{y:.3f}<extra></extra>",
        )
    )
    n = int(n_top or sec["circuit"]["n_top"])
    f = faithfulness_at(result, n)
    if f is not None:
        fig.add_trace(
            go.Scatter(
                x=[n],
                y=[f],
                mode="markers",
                marker={"size": 13, "color": "#d62728"},
                name=f"N = {n}",
                hovertemplate="N = %{x}: %{y:.3f}<extra>chosen</extra>",
            )
        )
    for level in (0.0, 1.0):
        fig.add_hline(y=level, line={"color": "#999", "width": 1, "dash": "dot"})
    fig.update_layout(
        xaxis={"type": "log", "title": {"text": "edges N"}},
        yaxis={"title": {"text": "(m_circuit − m_K) / (m_C − m_K)"}},
        showlegend=False,
    )
    total = sec.get("n_edges")
    of = f" of {total:,}" if total else ""
    return titled_layout(
        fig, f"Faithfulness of the top-N circuit (edge-patched runs; N{of} edges)", height=380
    )


# ------------------------------------------------------------------------------ AtP vs real patching


def atp_scatter_figure(result: dict[str, Any], *, head_labels: Labels | None = None) -> go.Figure:
    """One point per head: AtP's estimate against the real head patching (restored fractions), the
    diagonal where they agree; colour by layer; a click opens the head; the hover names the head's
    atlas label where ``head_labels`` has one (``kit.atlas_labels``)."""
    sec = result.get(ATTRIBUTION_PATCHING)
    if not sec:
        return empty_figure(
            "No attribution patching yet: give a corrupted text of the same token length."
        )
    if not sec.get("real"):
        return empty_figure("Tick 'real patching' to draw AtP against the real head patching.")
    est = np.asarray(sec["heads"], dtype=np.float64)  # [L, H]
    real = np.asarray(sec["real"]["heads"], dtype=np.float64)
    L, H = est.shape
    layer, head = np.meshgrid(np.arange(L), np.arange(H), indexing="ij")
    tags = label_grid(head_labels, L, H)
    custom = [
        [int(la), int(h), tags[la][h]] for la, h in zip(layer.ravel(), head.ravel(), strict=True)
    ]
    lo = float(min(est.min(), real.min(), 0.0))
    hi = float(max(est.max(), real.max(), 0.0))
    fig = go.Figure(
        [
            go.Scatter(
                x=[lo, hi],
                y=[lo, hi],
                mode="lines",
                line={"color": "#999", "dash": "dot"},
                hoverinfo="skip",
                showlegend=False,
            ),
            go.Scatter(
                x=real.ravel().tolist(),
                y=est.ravel().tolist(),
                mode="markers",
                customdata=custom,
                showlegend=False,
                marker={
                    "color": layer.ravel().tolist(),
                    "colorscale": "Viridis",
                    "size": 8,
                    "line": {"width": 0.5},
                    "colorbar": {"title": {"text": "layer"}, "thickness": 12},
                },
                hovertemplate="L%{customdata[0]}H%{customdata[1]}%{customdata[2]}: real %{x:.4f}, "
                "AtP %{y:.4f}"
                f"<extra>{HEAD_CLICK}</extra>",
            ),
        ]
    )
    fig.update_layout(
        xaxis={"title": {"text": "real patching: restored fraction"}},
        yaxis={"title": {"text": "AtP estimate"}},
    )
    r = sec.get("pearson")
    corr = (
        f"Pearson {r:.3f}, Spearman {sec['spearman']:.3f}"
        if r is not None
        else "correlation undefined"
    )
    return titled_layout(
        fig,
        f"AtP against real patching, one point per head ({L * H} heads; {corr}; "
        f"l[{display_text(sec['a_token'])}] − l[{display_text(sec['b_token'])}])",
        height=440,
    )


# ------------------------------------------------------------------------------ information flow


def _flow_xy(node: dict[str, Any]) -> tuple[float, float]:
    """States X[l] at (token, l); the stream after attention half a layer up; the feed-forward beside it."""
    i, layer = float(node["position"]), float(node["layer"])
    return {
        "state": (i, layer),
        "attention": (i, layer + 0.5),
        "feedforward": (i + 0.25, layer + 0.75),
    }[node["kind"]]


def _shade(scale: str, w: float) -> str:
    from plotly.colors import sample_colorscale

    return str(sample_colorscale(scale, [0.35 + 0.65 * min(1.0, max(0.0, w))])[0])


def flow_figure(result: dict[str, Any]) -> go.Figure:
    """The information-flow graph over the tokens: positions across, layers up. Attention edges (token j
    into token i) in blue, width and shade by importance; the residual in light grey; each feed-forward a
    green square sized by its importance. Hover on an attention edge's middle, a feed-forward or a state
    shows the importances; a click on an attention edge opens its strongest head."""
    sec = result.get(INFORMATION_FLOW)
    if not sec:
        return empty_figure("No information-flow graph yet.")
    nodes = {nd["id"]: nd for nd in sec["nodes"]}
    xy = {k: _flow_xy(nd) for k, nd in nodes.items()}
    lab = labels(result)
    edges = sec["edges"]
    att = [e for e in edges if e["kind"] == "attention"]
    top_att = max([float(e["importance"]) for e in att] or [1.0])
    traces: list[Any] = binned_lines(
        [
            (*xy[e["source"]], *xy[e["target"]], float(e["importance"]))
            for e in edges
            if e["kind"] == "residual"
        ],
        colour_of=lambda w: "#c7c7c7",
        name="residual",
        width_max=2.5,
        top=1.0,
    )
    traces += binned_lines(
        [(*xy[e["source"]], *xy[e["target"]], float(e["importance"])) for e in att],
        colour_of=lambda w: _shade("Blues", w / top_att),
        name="attention",
        width_max=5.0,
        top=top_att,
    )
    into: dict[str, list[str]] = {}
    for e in edges:
        if e["kind"] in ("residual", "feedforward"):
            into.setdefault(e["target"], []).append(f"{e['kind']} {e['importance']:.3f}")
    ff = [e for e in edges if e["kind"] == "feedforward"]
    traces.append(
        go.Scatter(
            x=[xy[e["source"]][0] for e in ff],
            y=[xy[e["source"]][1] for e in ff],
            mode="markers",
            name="feed-forward",
            marker={
                "symbol": "square",
                "color": "#2ca02c",
                "size": [4 + 10 * float(e["importance"]) for e in ff],
            },
            text=[
                f"layer {e['layer']} feed-forward at token {e['to']} ({lab[e['to']]}): {e['importance']:.3f}"
                for e in ff
            ],
            hovertemplate="%{text}<extra></extra>",
            showlegend=False,
        )
    )
    text, custom = [], []
    for e in att:
        heads = e.get("heads") or []
        order = sorted(range(len(heads)), key=lambda h: -heads[h])[:3]
        split = (
            ("; heads " + ", ".join(f"H{h} {heads[h]:.3f}" for h in order if heads[h] > 0))
            if heads
            else ""
        )
        text.append(
            f"layer {e['layer']}: token {e['from']} ({lab[e['from']]}) → token {e['to']} ({lab[e['to']]}) "
            f"via attention: {e['importance']:.3f}{split}"
        )
        custom.append([int(e["layer"]), int(np.argmax(heads)) if heads else -1])
    traces.append(
        go.Scatter(
            x=[(xy[e["source"]][0] + xy[e["target"]][0]) / 2 for e in att],
            y=[(xy[e["source"]][1] + xy[e["target"]][1]) / 2 for e in att],
            mode="markers",
            text=text,
            customdata=custom,
            showlegend=False,
            name="attention edges",
            marker={
                "size": 6,
                "color": [float(e["importance"]) for e in att],
                "colorscale": "Blues",
                "cmin": 0,
                "cmax": top_att,
                "colorbar": {"title": {"text": "attention<br>importance"}, "thickness": 12},
                "line": {"width": 0.5, "color": "#08306b"},
            },
            hovertemplate="%{text}<extra>click: open the strongest head</extra>",
        )
    )
    p, L = (
        int(sec["position"]),
        max([nd["layer"] for nd in nodes.values() if nd["kind"] == "state"] or [0]),
    )
    states = [k for k, nd in nodes.items() if nd["kind"] != "feedforward"]
    top = f"X{L}_{p}"
    traces.append(
        go.Scatter(
            x=[xy[k][0] for k in states],
            y=[xy[k][1] for k in states],
            mode="markers",
            showlegend=False,
            name="nodes",
            marker={
                "size": [
                    13
                    if k == top
                    else 6
                    if nodes[k]["layer"] == 0 and nodes[k]["kind"] == "state"
                    else 3
                    for k in states
                ],
                "symbol": ["star" if k == top else "circle" for k in states],
                "color": [
                    "#d62728" if k == top else "#444" if nodes[k]["kind"] == "state" else "#999"
                    for k in states
                ],
            },
            text=[
                f"{'X[' + str(nodes[k]['layer']) + ']' if nodes[k]['kind'] == 'state' else 'after attention of layer ' + str(nodes[k]['layer'])}"
                f" at token {nodes[k]['position']} ({lab[nodes[k]['position']]})"
                + (f"; into it: {', '.join(into[k])}" if k in into else "")
                for k in states
            ],
            hovertemplate="%{text}<extra></extra>",
        )
    )
    fig = go.Figure(traces)
    fig.update_layout(
        xaxis={**token_ticks(lab), "range": [-0.5, len(lab) - 0.5]},
        yaxis={
            "title": {"text": "layer (state X[l]; 0 = embedding)"},
            "dtick": 1 if L <= 40 else 4,
            "range": [-0.5, L + 0.7],
        },
    )
    title = (
        f"Information flow into token {p} ({lab[p]}) at the last layer: edges of importance ≥ "
        f"{sec['threshold']:g} ({len(att)} attention edges in blue, the residual in grey, feed-forwards "
        "as green squares)"
    )
    return titled_layout(fig, title, height=max(460, 16 * L + 200))


def clicked_head(click: dict[str, Any] | None) -> tuple[int, int] | None:
    """(layer, head) of a click on a circuit node, an AtP point or a flow attention edge; None elsewhere."""
    try:
        point = click["points"][0]  # type: ignore[index]
        data = point["customdata"]
    except (TypeError, KeyError, IndexError):
        return None
    if isinstance(data, list) and len(data) in (5, 6) and isinstance(data[0], str):
        # a circuit node: [id, kind, layer, head, weight, atlas label tag]
        return (int(data[2]), int(data[3])) if data[1] == "head" else None
    if isinstance(data, list) and len(data) in (2, 3) and int(data[1]) >= 0:
        # an AtP point [layer, head, atlas label tag] or a flow edge [layer, head]
        return int(data[0]), int(data[1])
    return None


# ------------------------------------------------------------------------------ downloads


def circuit_graph(
    result: dict[str, Any], *, n_top: int | None = None, head_labels: Labels | None = None
) -> dict[str, Any]:
    """The pruned top-N circuit as JSON: ``nodes`` on it and its ``edges``, with the pair and metric.
    With the model's atlas labels (``head_labels``, not empty) every head node gets a ``label``
    (``induction``, ``induction?`` when tentative, ``""`` for none), which GraphML carries too."""
    sec = result[EDGE_ATTRIBUTION]
    n = int(n_top or sec["circuit"]["n_top"])
    edges, on_circuit, exact = circuit_edges(result, n)
    on = {e["source"] for e in edges} | {e["target"] for e in edges}
    nodes = [nd for nd in sec["nodes"] if nd["id"] in on]
    if head_labels:
        nodes = [
            {**nd, "label": format_label(head_labels.get((int(nd["layer"]), int(nd["head"]))))}
            if nd.get("kind") == "head"
            else nd
            for nd in nodes
        ]
    return {
        "model": result.get("model"),
        "text": result.get("text") or None,
        "corrupted_text": sec.get("corrupted_text"),
        "method": sec.get("method"),
        "n_top": n,
        "faithfulness": faithfulness_at(result, n),
        "n_edges": on_circuit,  # edges on the circuit; "edges" holds all of them or its strongest
        "edges_complete": exact and len(edges) == on_circuit,
        "nodes": nodes,
        "edges": edges,
    }


def flow_graph(result: dict[str, Any]) -> dict[str, Any]:
    """The information-flow graph as JSON: its nodes (with their token) and edges."""
    sec = result[INFORMATION_FLOW]
    tokens = list(result.get("token_texts") or result.get("tokens") or [])
    nodes = [
        {**nd, "token": tokens[nd["position"]] if nd["position"] < len(tokens) else None}
        for nd in sec["nodes"]
    ]
    return {
        "model": result.get("model"),
        "position": sec["position"],
        "threshold": sec["threshold"],
        "nodes": nodes,
        "edges": sec["edges"],
    }


def graphml(graph: dict[str, Any]) -> str:
    """A ``circuit_graph`` or ``flow_graph`` as GraphML (directed; every scalar field an attribute,
    a list as its JSON text)."""
    import json

    def attrs(items: list[dict[str, Any]], skip: set[str]) -> dict[str, str]:
        kinds: dict[str, str] = {}
        for it in items:
            for k, v in it.items():
                if k in skip or v is None:
                    continue
                t = (
                    "double"
                    if isinstance(v, float)
                    else "int"
                    if isinstance(v, int) and not isinstance(v, bool)
                    else "boolean"
                    if isinstance(v, bool)
                    else "string"
                )
                kinds[k] = "string" if kinds.get(k, t) != t else t
        return kinds

    def value(v: Any) -> str:
        return (
            json.dumps(v)
            if isinstance(v, list | dict)
            else str(v).lower()
            if isinstance(v, bool)
            else str(v)
        )

    node_keys = attrs(graph["nodes"], {"id"})
    edge_keys = attrs(graph["edges"], {"source", "target"})
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">',
    ]
    for where, keys in (("node", node_keys), ("edge", edge_keys)):
        out += [
            f'  <key id={quoteattr(f"{where}_{k}")} for="{where}" attr.name={quoteattr(k)} attr.type="{t}"/>'
            for k, t in keys.items()
        ]
    out.append('  <graph id="G" edgedefault="directed">')
    for nd in graph["nodes"]:
        data = "".join(
            f"<data key={quoteattr('node_' + k)}>{_xml(value(nd[k]))}</data>"
            for k in node_keys
            if nd.get(k) is not None
        )
        out.append(f"    <node id={quoteattr(str(nd['id']))}>{data}</node>")
    for e in graph["edges"]:
        data = "".join(
            f"<data key={quoteattr('edge_' + k)}>{_xml(value(e[k]))}</data>"
            for k in edge_keys
            if e.get(k) is not None
        )
        out.append(
            f"    <edge source={quoteattr(str(e['source']))} target={quoteattr(str(e['target']))}>{data}</edge>"
        )
    out += ["  </graph>", "</graphml>"]
    return "\n".join(out) + "\n"


def _xml(text: str) -> str:
    from xml.sax.saxutils import escape

    return escape(text)
