"""The circuit of edge attribution drawn as a graph (docs/circuits.md, "The circuit on the page"): pure
functions, result JSON -> plotly Figure.

The page opens at a readable circuit: the smallest size of the faithfulness curve whose faithfulness
reaches ``FAITHFUL`` (``opening_size``), and draws at most its ``DRAWN_EDGES`` strongest edges, saying
so when it holds more. Every size of the curve can be drawn: a size within the listed edges
(``edges``) is pruned here, a larger one comes with its strongest edges (``curve_edges``). Nodes are
named as everywhere (``L17H5``, ``FF12``, ``embeddings``, ``logits``) and laid out by head (x = head,
y = layer) or by token position (x = the token where patching the node matters most, AtP by
position).

    >>> circuit_figure(result, n_top=opening_size(result), layout="position")
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from frontend.figures.base import empty_figure
from frontend.figures.causal import labels, titled_layout
from frontend.figures.tokens import token_ticks
from frontend.kit.atlas_labels import Labels, format_label
from workers.analyses.circuits.spec import (
    ATTRIBUTION_PATCHING,
    DRAWN_EDGES,
    EDGE_ATTRIBUTION,
    FAITHFUL,
)

POSITIVE, NEGATIVE = "#2166ac", "#b2182b"  # helps the metric / hurts it (as the causal page's maps)
WIDTH_BINS = 6  # edges drawn in this many widths (one trace each: thousands of edges stay fast)
HEAD_CLICK = "click: open this head in the text explorer and on the causal page"
LAYOUTS = {"head": "by head", "position": "by token position"}
NODE_NAMES = {"input": "embeddings"}  # the input node is the token embeddings
SYMBOLS = {"head": "circle", "feedforward": "square", "input": "diamond", "logits": "star"}


def circuit_sizes(result: dict[str, Any]) -> list[int]:
    """The circuit sizes the page's slider offers, ascending: every size of the faithfulness curve
    and the circuit's own N (its whole range; what is drawn of each: ``circuit_edges``)."""
    sec = result.get(EDGE_ATTRIBUTION) or {}
    have = len(sec.get("edges") or [])
    sizes = {int(n) for n, _ in sec.get("curve") or [] if int(n) > 0}
    if sec.get("circuit") and have:
        sizes.add(min(have, int(sec["circuit"]["n_top"])))
    return sorted(sizes)


def opening_size(result: dict[str, Any], level: float = FAITHFUL) -> int | None:
    """The smallest offered size whose faithfulness reaches ``level`` (the largest when none does)."""
    sizes = circuit_sizes(result)
    faithful = [s for s in sizes if (faithfulness_at(result, s) or 0.0) >= level]
    return faithful[0] if faithful else (sizes[-1] if sizes else None)


def prune(edges: list[dict[str, Any]], n_top: int) -> list[int]:
    """Indices of the first ``n_top`` edges on a path from ``input`` to ``logits`` using only them
    (docs/results.md, ``circuit``)."""
    top = edges[:n_top]
    fwd, back = {"input"}, {"logits"}
    changed = True
    while changed:  # reachability over at most n_top edges: a few sweeps
        changed = False
        for e in top:
            if e["source"] in fwd and e["target"] not in fwd:
                fwd.add(e["target"])
                changed = True
            if e["target"] in back and e["source"] not in back:
                back.add(e["source"])
                changed = True
    return [i for i, e in enumerate(top) if e["source"] in fwd and e["target"] in back]


def faithfulness_at(result: dict[str, Any], n_top: int) -> float | None:
    """The faithfulness of the pruned top-``n_top`` circuit: the circuit's own or the curve's point."""
    sec = result.get(EDGE_ATTRIBUTION) or {}
    if sec.get("circuit") and int(sec["circuit"]["n_top"]) == n_top:
        return float(sec["faithfulness"])
    for n, f in sec.get("curve") or []:
        if int(n) == n_top:
            return float(f)
    return None


def circuit_edges(result: dict[str, Any], n_top: int) -> tuple[list[dict[str, Any]], int, bool]:
    """The edges of the pruned top-``n_top`` circuit, strongest first, as far as the result holds
    them: ``(edges, edges on the circuit, exact)``. Within the listed edges all of them; past them
    the strongest the job kept (``curve_edges``); both exact (the circuit's strongest edges, in
    order). A result from before those were kept: the listed edges' own pruned circuit, not exact
    (a subset of the circuit's edges: more edges only join more paths)."""
    sec = result[EDGE_ATTRIBUTION]
    edges = sec["edges"]
    if n_top <= len(edges):
        kept = [edges[i] for i in prune(edges, n_top)]
        return kept, len(kept), True
    sizes = [int(n) for n, _ in sec.get("curve") or []]
    total = (
        sec["curve_kept"][sizes.index(n_top)] if n_top in sizes and sec.get("curve_kept") else None
    )
    for entry in sec.get("curve_edges") or []:
        if int(entry["n_top"]) == n_top:
            got = list(entry["edges"])
            return got, total or len(got), True
    kept = [edges[i] for i in prune(edges, len(edges))]
    return kept, total or len(kept), False


def _tag(node: dict[str, Any], head_labels: Labels | None) -> str:
    """`` · induction`` for a head node the atlas labels, else ``""``."""
    if node.get("head") is None or node.get("layer") is None:
        return ""
    tag = format_label((head_labels or {}).get((int(node["layer"]), int(node["head"]))))
    return f" · {tag}" if tag else ""


def node_name(node_id: str) -> str:
    """How a node is labelled: ``L17H5``, ``FF12``, ``logits``, ``embeddings``."""
    return NODE_NAMES.get(node_id, node_id)


def binned_lines(
    segments: list[tuple[float, float, float, float, float]],
    *,
    colour_of: Any,
    name: str,
    width_max: float = 7.0,
    top: float | None = None,
) -> list[go.Scatter]:
    """Line traces for (x0, y0, x1, y1, weight) segments: one trace per width bin (|weight| over
    ``top``, default the largest) and colour."""
    if not segments:
        return []
    top = top or max(abs(s[4]) for s in segments) or 1.0
    groups: dict[tuple[int, str], list[float | None]] = {}
    for x0, y0, x1, y1, w in segments:
        b = min(WIDTH_BINS - 1, int(abs(w) / top * WIDTH_BINS))
        xs = groups.setdefault((b, colour_of(w)), [])
        xs.extend([x0, x1, None, y0, y1, None])
    out = []
    for (b, colour), flat in sorted(groups.items()):
        xs = [v for k, v in enumerate(flat) if k % 6 < 3]
        ys = [v for k, v in enumerate(flat) if k % 6 >= 3]
        out.append(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                hoverinfo="skip",
                showlegend=False,
                name=name,
                line={"color": colour, "width": 0.6 + width_max * (b + 1) / WIDTH_BINS},
                opacity=0.35 + 0.6 * (b + 1) / WIDTH_BINS,
            )
        )
    return out


def _shape(sec: dict[str, Any]) -> tuple[int, int]:
    nodes = sec.get("nodes") or []
    L = 1 + max([int(n["layer"]) for n in nodes if n["kind"] in ("head", "feedforward")] or [0])
    H = 1 + max([int(n["head"]) for n in nodes if n["kind"] == "head"] or [0])
    return L, H


def _by_head(sec: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Node id -> (x, y): the embeddings at the bottom, layer l's heads in a row at y = l (x = head),
    its feed-forward to their right half a layer up, the logits on top."""
    L, H = _shape(sec)
    pos = {}
    for n in sec.get("nodes") or []:
        if n["kind"] == "input":
            pos[n["id"]] = ((H - 1) / 2, -1.0)
        elif n["kind"] == "logits":
            pos[n["id"]] = ((H - 1) / 2, float(L))
        elif n["kind"] == "head":
            pos[n["id"]] = (float(n["head"]), float(n["layer"]))
        else:
            pos[n["id"]] = (H + 0.5, float(n["layer"]) + 0.4)
    return pos


def _by_position(sec: dict[str, Any], atp: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Node id -> (x, y): x the token position where patching the node moves the metric most (AtP by
    position: ``heads_by_position``, ``feedforward_by_position``, the embeddings' ``residual[0]``),
    the logits at the last token; y as by head. Nodes that share a token and a row sit side by side."""
    L, _ = _shape(sec)
    heads = np.abs(np.asarray(atp["heads_by_position"], dtype=float))  # [layer, head, token]
    ffs = np.abs(np.asarray(atp["feedforward_by_position"], dtype=float))  # [layer, token]
    last = heads.shape[-1] - 1
    spot: dict[str, tuple[float, float]] = {}
    for n in sec.get("nodes") or []:
        if n["kind"] == "input":
            spot[n["id"]] = (float(np.argmax(np.abs(atp["residual"][0]))), -1.0)
        elif n["kind"] == "logits":
            spot[n["id"]] = (float(last), float(L))
        elif n["kind"] == "head":
            spot[n["id"]] = (float(np.argmax(heads[n["layer"], n["head"]])), float(n["layer"]))
        else:
            spot[n["id"]] = (float(np.argmax(ffs[n["layer"]])), float(n["layer"]) + 0.4)
    cells: dict[tuple[float, float], list[str]] = {}
    for node_id, xy in spot.items():
        cells.setdefault(xy, []).append(node_id)
    pos = {}
    for (x, y), ids in cells.items():
        step = min(0.8 / len(ids), 0.3)
        for k, node_id in enumerate(ids):
            pos[node_id] = (x + (k - (len(ids) - 1) / 2) * step, y)
    return pos


def circuit_figure(
    result: dict[str, Any],
    *,
    n_top: int | None = None,
    layout: str = "head",
    max_edges: int = DRAWN_EDGES,
    head_labels: Labels | None = None,
) -> go.Figure:
    """The circuit of the top ``n_top`` edges (None: the result's own N), pruned to paths from the
    embeddings to the logits, at most its ``max_edges`` strongest edges drawn; edge width by |score|,
    colour by sign; the nodes on it labelled. ``layout``: ``"head"`` (x = head, y = layer) or
    ``"position"`` (x = token, y = layer; needs the pair's attribution patching). ``head_labels``: the
    heads' atlas labels, named in the nodes' hover (``kit.atlas_labels``)."""
    sec = result.get(EDGE_ATTRIBUTION)
    if not sec or not sec.get("edges"):
        return empty_figure(
            "No circuit yet: edge attribution needs a clean/corrupted pair on a decoder."
        )
    n = int(n_top or sec["circuit"]["n_top"])
    kept, on_circuit, exact = circuit_edges(result, n)
    drawn = kept[:max_edges]
    atp = result.get(ATTRIBUTION_PATCHING) or {}
    by_position = layout == "position" and bool(atp.get("heads_by_position"))
    pos = _by_position(sec, atp) if by_position else _by_head(sec)
    L, H = _shape(sec)
    segs, mids, mid_text, mid_score = [], ([], []), [], []
    for e in drawn:
        (x0, y0), (x1, y1) = pos[e["source"]], pos[e["target"]]
        segs.append((x0, y0, x1, y1, float(e["score"])))
        mids[0].append((x0 + x1) / 2)
        mids[1].append((y0 + y1) / 2)
        into = f" ({e['input']})" if e.get("input") else ""
        mid_text.append(
            f"{node_name(e['source'])} → {node_name(e['target'])}{into}: {float(e['score']):+.4f}"
        )
        mid_score.append(float(e["score"]))
    fig = go.Figure(
        binned_lines(segs, colour_of=lambda w: POSITIVE if w >= 0 else NEGATIVE, name="edges")
    )
    on = {e["source"] for e in drawn} | {e["target"] for e in drawn}
    weight: dict[str, float] = {}
    for e in drawn:
        for end in (e["source"], e["target"]):
            weight[end] = weight.get(end, 0.0) + abs(float(e["score"]))
    nodes = sec["nodes"]
    custom = [
        [nd["id"], nd["kind"], nd["layer"], -1 if nd.get("head") is None else nd["head"],
         weight.get(nd["id"], 0.0), _tag(nd, head_labels)]
        for nd in nodes
    ]  # fmt: skip
    fig.add_trace(
        go.Scatter(
            x=[pos[nd["id"]][0] for nd in nodes],
            y=[pos[nd["id"]][1] for nd in nodes],
            mode="markers+text",
            text=[node_name(nd["id"]) if nd["id"] in on else "" for nd in nodes],
            # a feed-forward's name beside it: the column of FF nodes is half a layer apart
            textposition=[
                "middle right" if nd["kind"] == "feedforward" else "top center" for nd in nodes
            ],
            textfont={"size": 10, "color": "#222"},
            marker={
                "size": [11 if nd["id"] in on else 5 for nd in nodes],
                "symbol": [SYMBOLS[nd["kind"]] for nd in nodes],
                "color": ["#222" if nd["id"] in on else "#ccc" for nd in nodes],
            },
            customdata=custom,
            name="nodes",
            showlegend=False,
            hovertemplate="%{customdata[0]}%{customdata[5]} (%{customdata[1]}): "
            "Σ|score| drawn %{customdata[4]:.4f}"
            f"<extra>{HEAD_CLICK}</extra>",
        )
    )
    lim = max([abs(s) for s in mid_score] or [1.0])
    fig.add_trace(
        go.Scatter(
            x=mids[0],
            y=mids[1],
            mode="markers",
            text=mid_text,
            name="edge scores",
            showlegend=False,
            marker={
                "size": 6,
                "color": mid_score,
                "colorscale": "RdBu",
                "cmin": -lim,
                "cmax": lim,
                "opacity": 0.8,
                "colorbar": {"title": {"text": "score"}, "thickness": 12},
            },
            hovertemplate="%{text}<extra>edge score (fraction of m_C − m_K)</extra>",
        )
    )
    rows = {
        "tickmode": "array",
        "tickvals": [-1, *range(L), L],
        "ticktext": ["embeddings", *map(str, range(L)), "logits"],
        "title": {"text": "layer"},
        "zeroline": False,
    }
    if by_position:
        tokens = labels(result)
        first = int(np.floor(min(x for x, _ in pos.values()) + 0.5))  # tokens before: no node
        xaxis = {
            **token_ticks(tokens),
            "range": [first - 0.6, len(tokens) - 0.4],
            "title": {"text": "token where patching the node matters most (AtP)"},
        }
    else:
        xaxis = {
            "tickmode": "array",
            "tickvals": [*range(H), H + 0.5],
            "ticktext": [*map(str, range(H)), "FF"],
            "range": [-0.6, H + 1.8],  # room for the feed-forwards' names
            "title": {"text": "head"},
        }
    fig.update_layout(xaxis={**xaxis, "zeroline": False}, yaxis=rows)
    f = faithfulness_at(result, n)
    faith = f", faithfulness {f:.3f}" if f is not None else ""
    title = (
        f"Circuit: the top {n:,} edges by |score| ({sec.get('method', 'EAP')}), {on_circuit:,} on a "
        f"path from the embeddings to the logits{faith}"
    )
    if not exact:
        title += (
            f"; drawn: the {len(drawn):,} of the {len(sec['edges']):,} listed edges on a path among "
            "themselves (this result keeps no more of so large a circuit)"
        )
    elif len(drawn) < on_circuit:
        title += f"; its {len(drawn):,} strongest edges drawn (capped for legibility)"
    if layout == "position" and not by_position:
        title += "; by head: this result has no AtP by position"
    return titled_layout(fig, title, height=max(460, 18 * L + 180))
