"""Figures and rows of the head atlas (docs/atlas.md): pure functions of the atlas section.

The grid is layers x heads, one cell per head coloured by its label, confident labels saturated and
tentative ones pale; heads without a label are light grey. ``table_rows`` gives the sortable table's
rows (scores, intervals, evidence)."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from frontend.figures.base import empty_figure
from workers.core.notation import head_label

# one colour per type (colour-blind-safe Okabe–Ito order), none light grey
COLOURS: dict[str, str] = {
    "previous-token": "#0072B2",
    "induction": "#D55E00",
    "duplicate-token": "#CC79A7",
    "first-token": "#009E73",
    "self": "#E69F00",
    "local": "#56B4E9",
    "broad": "#999999",
}
NONE_COLOUR = "#f2f2f2"
TENTATIVE_ALPHA = 0.35  # a tentative label's saturation against a confident one's


def _rgba(hex_colour: str, alpha: float) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    # blended on white, so the cell stays opaque and the colour pale
    mix = [round(255 - alpha * (255 - c)) for c in (r, g, b)]
    return f"rgb({mix[0]},{mix[1]},{mix[2]})"


def cell_colour(label: str | None, confident: bool) -> str:
    if label is None:
        return NONE_COLOUR
    return _rgba(COLOURS[label], 1.0 if confident else TENTATIVE_ALPHA)


def evidence_text(evidence: dict[str, Any]) -> str:
    """One line on a head's ablation evidence ("" when it has none)."""
    if not evidence:
        return ""
    backed = "backed" if evidence.get("backed") else "not backed"
    if evidence.get("effect") == "loss":
        return (
            f"{backed}: repeat loss {evidence['loss_rise']:+.3f} nats when ablated "
            f"(rank {evidence['rank']}, z {evidence['z']:.1f})"
        )
    return (
        f"{backed}: induction score {-evidence['induction_fall']:+.3f} when ablated "
        f"(rank {evidence['rank']}, z {evidence['z']:.1f})"
    )


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}"


def head_hover(h: dict[str, Any]) -> str:
    label = h["label"] or "no label"
    sure = "" if h["label"] is None else (" (confident)" if h["confident"] else " (tentative)")
    lines = [f"<b>{head_label(h['layer'], h['head'])}</b>: {label}{sure}"]
    for t, v in h["scores"].items():
        lo, hi = h["intervals"][t]
        lines.append(f"{t}: {_fmt(v)} [{_fmt(lo)}, {_fmt(hi)}]")
    ev = evidence_text(h.get("evidence") or {})
    if ev:
        lines.append(ev)
    return "<br>".join(lines)


def atlas_grid_figure(section: dict[str, Any] | None, *, model: str = "") -> go.Figure:
    """Layers (rows, layer 0 at the bottom) x heads (columns), coloured by label; a click on a cell
    gives ``customdata`` [layer, head]."""
    if not section or not section.get("heads"):
        return empty_figure("Press Analyze.")
    n_layers, n_heads = int(section["n_layers"]), int(section["n_heads"])
    fig = go.Figure()
    by_label: dict[tuple[str | None, bool], list[dict[str, Any]]] = {}
    for h in section["heads"]:
        by_label.setdefault((h["label"], bool(h["confident"])), []).append(h)
    order = [*COLOURS, None]
    for (label, confident), heads in sorted(
        by_label.items(), key=lambda kv: (order.index(kv[0][0]), not kv[0][1])
    ):
        name = (
            "no label"
            if label is None
            else f"{label} ({'confident' if confident else 'tentative'})"
        )
        fig.add_trace(
            go.Scatter(
                x=[h["head"] for h in heads],
                y=[h["layer"] for h in heads],
                mode="markers",
                name=name,
                marker={
                    "symbol": "square",
                    "size": max(8, min(28, 520 // max(n_heads, n_layers))),
                    "color": cell_colour(label, confident),
                    "line": {"width": 1, "color": "#888" if label is None else COLOURS[label]},
                },
                customdata=[[h["layer"], h["head"]] for h in heads],
                hovertext=[head_hover(h) for h in heads],
                hoverinfo="text",
            )
        )
    title = f"Head atlas of {model}" if model else "Head atlas"
    fig.update_layout(
        title=f"{title}: {n_layers} layers x {n_heads} heads (pale: tentative)",
        xaxis={"title": "head", "range": [-0.6, n_heads - 0.4], "dtick": 1, "showgrid": False},
        yaxis={"title": "layer", "range": [-0.6, n_layers - 0.4], "dtick": 1, "showgrid": False},
        height=max(320, 22 * n_layers + 160),
        legend={"orientation": "v", "x": 1.02, "y": 1},
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
        plot_bgcolor="white",
    )
    return fig


def type_counts(section: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per type: heads labelled, of which confident, and backed by an ablation."""
    out = {t: {"heads": 0, "confident": 0, "backed": 0} for t in (*COLOURS, "none")}
    for h in section.get("heads") or []:
        c = out[h["label"] or "none"]
        c["heads"] += 1
        c["confident"] += int(bool(h["confident"]))
        c["backed"] += int(bool((h.get("evidence") or {}).get("backed")))
    return out


def table_rows(section: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One row per head: its name, label, confidence, the label's score and interval, every type's
    score, the evidence line (the table sorts and filters them)."""
    rows = []
    for h in (section or {}).get("heads") or []:
        label = h["label"]
        lo, hi = h["intervals"][label] if label else (None, None)
        row: dict[str, Any] = {
            "head": head_label(h["layer"], h["head"]),
            "layer": h["layer"],
            "label": label or "",
            "confidence": "" if label is None else ("confident" if h["confident"] else "tentative"),
            "score": None if label is None else h["scores"][label],
            "interval": "" if label is None else f"[{_fmt(lo)}, {_fmt(hi)}]",
            "evidence": evidence_text(h.get("evidence") or {}),
            "effect_z": (h.get("evidence") or {}).get("z"),
        }
        row.update({t: v for t, v in h["scores"].items()})
        rows.append(row)
    return rows


def summary_line(section: dict[str, Any] | None) -> str:
    """Counts per type in words, and what the evidence rests on."""
    if not section or not section.get("heads"):
        return ""
    counts = type_counts(section)
    parts = [
        f"{t}: {c['heads']} ({c['confident']} confident"
        + (f", {c['backed']} backed by ablation" if c["backed"] else "")
        + ")"
        for t, c in counts.items()
        if c["heads"] and t != "none"
    ]
    n = len(section["heads"])
    parts.append(f"no label: {counts['none']['heads']} of {n}")
    loss = section.get("loss_repeated")
    if loss:
        parts.append(f"repeat loss {loss['repeated']:.2f} nats vs first copy {loss['first']:.2f}")
    ev = section.get("evidence")
    tail = (
        f" Evidence: {ev['method']}."
        if ev
        else " No ablation evidence (an encoder, or no language-model head): labels rest on attention alone."
    )
    return "; ".join(parts) + "." + tail
