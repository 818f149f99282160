"""The /circuits/sets page's export bar (docs/circuits.md, "Export"): Share, the figures' image format,
the result as JSON and the page as HTML (``frontend.kit.page``'s bar, as every page has), and the
circuit at the chosen size k as the export JSON and GraphML (``workers.analyses.circuits.export``, the
documents ``headscope circuits --circuit-json / --graphml`` writes)."""

from __future__ import annotations

import json
import math
from typing import Any

from dash import Dash, Input, Output, State, dcc, html, no_update

from frontend.figures import circuit_sets as F
from frontend.kit.data import ResultStore
from frontend.kit.page import export_bar, register_exports
from workers.analyses.circuits.export import circuit_document, graphml
from workers.analyses.circuits.spec import CIRCUITS_SET

GRAPHS = ["cs-curve-graph", "cs-stability-graph", "cs-circuit-graph", "cs-nodes-graph"]
DOWNLOADS = (("circuit-json", "circuit JSON"), ("circuit-graphml", "circuit GraphML"))


def exports_row() -> html.Div:
    """The bar (Share, image format, JSON, HTML) and the circuit's JSON / GraphML buttons."""
    bar = export_bar("cs", GRAPHS)
    return html.Div(
        children=[
            bar,
            html.Div(
                className="control-row",
                children=[
                    html.Span("the circuit at k:", className="label"),
                    *[
                        html.Button(label, id=f"cs-dl-{key}", className="button secondary")
                        for key, label in DOWNLOADS
                    ],
                    html.Span(id="cs-export-error", className="error"),
                    dcc.Download(id="cs-circuit-download"),
                ],
            ),
        ]
    )


def circuit_file(status: dict[str, Any], k: float | None, which: str) -> dict[str, Any] | str:
    """The download of the circuit of size ``k`` (``which``: ``circuit-json`` or ``circuit-graphml``)
    of a finished job's status, or why there is none."""
    res = (status.get("result") or {}).get(CIRCUITS_SET)
    if status.get("status") != "finished" or not res:
        return "no circuit to download yet: run the analysis first"
    sizes = [o["value"] for o in F.size_options(res)]
    if not sizes:
        return "the result lists too few edges for MIB's smallest size"
    k = float(k) if k is not None and float(k) in sizes else sizes[-1]
    model = status["result"].get("model") or (status.get("request") or {}).get("model")
    doc = circuit_document({**res, "model": model}, math.ceil(k * int(res["n_edges_total"])), k)
    stem = f"headscope-circuit-set-{model}-k{k:g}"
    if which.endswith("json"):
        return {"content": json.dumps(doc), "filename": f"{stem}.json", "type": "application/json"}
    return {"content": graphml(doc), "filename": f"{stem}.graphml", "type": "application/xml"}


def _figures(result: dict[str, Any], k: float | None) -> list[Any]:
    res = result.get(CIRCUITS_SET) or {}
    return [
        F.faithfulness_figure(res),
        F.stability_figure(res),
        F.circuit_at(res, k),
        F.node_figure(res),
    ]


def register_circuit_exports(app: Dash, store: ResultStore) -> None:
    register_exports(
        app,
        store,
        "cs",
        source="cs-source",
        graphs=GRAPHS,
        figures=_figures,
        view_states=[State("cs-size", "value")],
        title="headscope — circuits on a task set",
    )

    @app.callback(
        Output("cs-circuit-download", "data"),
        Output("cs-export-error", "children"),
        *[Input(f"cs-dl-{key}", "n_clicks") for key, _ in DOWNLOADS],
        State("cs-source", "data"),
        State("cs-size", "value"),
        prevent_initial_call=True,
    )
    def _circuit(_a, _b, source, k):  # type: ignore[no-untyped-def]
        from dash import ctx

        which = str(ctx.triggered_id).removeprefix("cs-dl-")
        got = circuit_file(store.status(source), k, which)
        return (no_update, got) if isinstance(got, str) else (got, "")
