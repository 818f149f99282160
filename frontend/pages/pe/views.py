"""The PE explorer's figures (docs/positional.md): the metrics table, the distance heatmaps, the 2-D
map and the sweep, drawn on the grid of the request or of the controls."""

from __future__ import annotations

from typing import Any

from dash import html

from frontend.figures import positional as P


def metrics_table(result: dict[str, Any]) -> html.Table | html.Div:
    """The metrics of every checkpoint as a table (a hint before there are any)."""
    rows = P.pe_metrics_rows(result)
    if not rows:
        return html.Div("No metrics yet.", className="hint")
    cols = list(rows[0])
    return html.Table(
        id="pe-metrics-table",
        className="metrics-table",
        children=[
            html.Thead(html.Tr([html.Th(c) for c in cols])),
            html.Tbody([html.Tr([html.Td(r[c]) for c in cols]) for r in rows]),
        ],
    )


def grid_of(request: dict[str, Any] | None, rows: Any, cols: Any) -> tuple[int, int]:
    """The grid of a request's reference or partition, else the controls' rows and columns."""
    for part in ((request or {}).get("reference") or {}, (request or {}).get("partition") or {}):
        if part.get("grid"):
            return int(part["grid"][0]), int(part["grid"][1])
    return int(rows or 4), int(cols or 4)


def page_figures(
    result: dict[str, Any],
    reorder: Any,
    colour: Any,
    view_opts: Any,
    rows: Any,
    cols: Any,
    shared: Any = None,
) -> list[Any]:
    grid = grid_of(None, rows, cols)
    opts = view_opts or []
    return [
        P.pe_distance_figure(result, reorder=bool(reorder), shared_scale=bool(shared)),
        P.pe_map_figure(
            result,
            colour_by=colour or "row",
            grid=grid,
            rescale="rescale" in opts,
            aligned="aligned" in opts,
        ),
        P.pe_sweep_figure(result),
    ]
