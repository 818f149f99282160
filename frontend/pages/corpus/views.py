"""The corpus page's views of a result (docs/corpus.md): the map of heads, the selected head against
the others and its histogram, and its strongest (query, key) contexts."""

from __future__ import annotations

from typing import Any

from dash import html

from frontend.figures import corpus as C


def page_figures(
    result: dict[str, Any], head: str | None, color: str | None, stat: str | None
) -> list[Any]:
    sel = C.parse_head(head)
    figs = [C.head_map_figure(result, color_by=color or "layer", selected=sel)]
    if sel is not None:
        figs += [
            C.head_compare_figure(result, layer=sel[0], head=sel[1]),
            C.histogram_figure(result, stat=stat or "previous", layer=sel[0], head=sel[1]),
        ]
    return figs


def contexts(result: dict[str, Any], sel: tuple[int, int] | None) -> list[Any]:
    """The selected head's strongest (query, key) pairs across the corpus, each in its context."""
    if sel is None or not result.get("top_pairs"):
        return [
            html.P(
                "Click a head for its strongest (query, key) pairs across the corpus.",
                className="hint",
            )
        ]
    try:
        pairs = result["top_pairs"][sel[0]][sel[1]]
    except (IndexError, KeyError):
        return [html.P("no such head", className="error")]
    items = []
    for p in pairs:
        spans = [
            html.Span(
                tok + " ",
                className=f"ctx-{role}" if role else None,
                style={
                    "query": {"background": "#cfe3f7"},
                    "key": {"background": "#ffd9b3"},
                    "both": {"background": "#e0c8f0"},
                }.get(role),
            )
            for tok, role in C.context_parts(p)
        ]
        items.append(
            html.Li([html.B(f"{p['weight']:.3f} "), html.Span(f"(text {p['text']}) "), *spans])
        )
    return (
        [html.Ol(items, className="context-list")]
        if items
        else [html.P("no pairs", className="hint")]
    )


def head_or_none(value: Any) -> Any:
    """A head as the page names it (``L2H5``), or None for anything else."""
    return value if C.parse_head(value) else None
