"""What ``headscope analyze`` prints for the circuits views (``workers.core.report``): the routes'
size and strongest edges, attribution patching's strongest heads, a circuit's size and
faithfulness."""

from __future__ import annotations

from typing import Any

from workers.analyses.causal.report import pair_line
from workers.analyses.circuits.spec import FAITHFUL
from workers.core.report import num, shown_tokens, signed, strongest_heads


def information_flow(section: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """The graph's size and its strongest attention edges (token to token, by layer)."""
    tokens = shown_tokens(result)
    p = int(section.get("position", 0))
    edges = section.get("edges") or []

    def tok(i: int) -> str:
        return tokens[i] if 0 <= i < len(tokens) else str(i)

    lines = [
        f"routes into position {p} ({tok(p)}) at τ = {num(section.get('threshold'))}: "
        f"{len(section.get('nodes') or [])} nodes, {len(edges)} edges"
    ]
    attention = sorted(
        (e for e in edges if e.get("kind") == "attention"), key=lambda e: -e["importance"]
    )
    if attention:
        lines.append(
            "strongest attention edges: "
            + ", ".join(
                f"{tok(e['from'])} -> {tok(e['to'])} in layer {e['layer']} {num(e['importance'], 2)}"
                for e in attention[:4]
            )
        )
    return lines


def attribution_patching(section: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """The metric, AtP's strongest heads and, with ``real``, its agreement with real patching."""
    method = "AtP*" if section.get("qk_fix") else "AtP"
    lines = [
        pair_line(section),
        f"strongest heads by {method} (fraction of the metric): {strongest_heads(section['heads'])}",
    ]
    if section.get("real"):
        lines.append(
            f"against real patching: Pearson {num(section.get('pearson'))}, Spearman {num(section.get('spearman'))}"
        )
    return lines


def edge_attribution(section: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """The circuit's size and faithfulness, the smallest faithful size on the curve, its top edges."""
    circuit = section.get("circuit") or {}
    lines = [
        pair_line(section),
        f"circuit of the top {circuit.get('n_top')} of {section.get('n_edges')} edges "
        f"({section.get('method')}): {circuit.get('n_edges')} edges on a path, "
        f"faithfulness {num(section.get('faithfulness'))}",
    ]
    curve = section.get("curve") or []
    if curve:
        reach = next((int(n) for n, f in curve if f is not None and f >= FAITHFUL), None)
        lines.append(
            "faithfulness curve: "
            + ", ".join(f"{int(n)} {num(f, 2)}" for n, f in curve)
            + (
                f"; {FAITHFUL:g} first reached at {reach} edges"
                if reach
                else f"; never {FAITHFUL:g}"
            )
        )
    edges = section.get("edges") or []
    if edges:
        lines.append(
            "strongest edges: "
            + ", ".join(
                f"{e['source']} -> {e['target']}{'.' + e['input'] if e.get('input') else ''} {signed(e['score'])}"
                for e in edges[:4]
            )
        )
    return lines
