"""The /circuits page's export bar (docs/circuits.md): the figures' image format, both results as
JSON, the page as HTML, and the circuit and the flow graph as JSON and GraphML."""

from __future__ import annotations

import json

from dash import ClientsideFunction, Dash, Input, Output, State, no_update

from frontend.figures import circuits as F
from frontend.figures.base import graph_config, standalone_html
from frontend.kit.atlas_labels import atlas_labels
from frontend.kit.data import ResultStore
from frontend.pages.circuits.views import GRAPHS, page_figures
from workers.analyses.circuits.spec import EDGE_ATTRIBUTION, INFORMATION_FLOW


def register_circuit_exports(app: Dash, store: ResultStore) -> None:
    """Image format (PNG/SVG), the results as JSON, the page as HTML, the graphs as JSON and GraphML."""

    @app.callback(
        *[Output(g, "config") for g in GRAPHS],
        Input("circuits-image-format", "value"),
        prevent_initial_call=True,
    )
    def _format(fmt):  # type: ignore[no-untyped-def]
        return tuple(graph_config(f"headscope-{g}", image_format=fmt or "png") for g in GRAPHS)

    app.clientside_callback(
        ClientsideFunction(namespace="headscope_export", function_name="setImageFormat"),
        Output("circuits-image-format-applied", "data"),
        Input("circuits-image-format", "value"),
        State("circuits-graph-ids", "data"),
        prevent_initial_call=True,
    )

    @app.callback(
        Output("circuits-download", "data"),
        Input("circuits-export-json", "n_clicks"),
        Input("circuits-export-html", "n_clicks"),
        State("circuits-source", "data"),
        State("circuits-pair-source", "data"),
        State("circuits-n", "data"),
        State("circuits-layout", "value"),
        prevent_initial_call=True,
    )
    def _download(_j, _h, source, pair, n, layout):  # type: ignore[no-untyped-def]
        from dash import ctx

        flow, pst = store.status(source), store.status(pair)
        if flow["status"] != "finished":
            return no_update
        name = f"headscope-circuits-{source['id']}"
        if ctx.triggered_id == "circuits-export-json":
            payload = {
                "flow": {"request": flow.get("request"), "result": flow["result"]},
                "pair": {"request": pst.get("request"), "result": pst["result"]} if pair else None,
            }
            return {
                "content": json.dumps(payload),
                "filename": f"{name}.json",
                "type": "application/json",
            }
        html_doc = standalone_html(
            page_figures(
                flow["result"],
                pst["result"],
                n,
                layout,
                atlas_labels(
                    store.client,
                    (pst.get("request") or flow.get("request") or {}).get("model"),
                ),
            ),
            title="headscope — circuits",
            notes="Exported from headscope; figures are interactive and need no network.",
        )
        return {"content": html_doc, "filename": f"{name}.html", "type": "text/html"}

    @app.callback(
        Output("circuits-graph-download", "data"),
        Output("circuits-error", "children", allow_duplicate=True),
        *[
            Input(f"circuits-dl-{k}", "n_clicks")
            for k in ("circuit-json", "circuit-graphml", "flow-json", "flow-graphml")
        ],
        State("circuits-source", "data"),
        State("circuits-pair-source", "data"),
        State("circuits-n", "data"),
        prevent_initial_call=True,
    )
    def _graph_download(_a, _b, _c, _d, source, pair, n):  # type: ignore[no-untyped-def]
        from dash import ctx

        which = str(ctx.triggered_id).removeprefix("circuits-dl-")
        src = pair if which.startswith("circuit") else source
        st = store.status(src)
        key = EDGE_ATTRIBUTION if which.startswith("circuit") else INFORMATION_FLOW
        if st["status"] != "finished" or not st["result"].get(key):
            return (
                no_update,
                f"no {'circuit' if key == EDGE_ATTRIBUTION else 'flow graph'} to download yet",
            )
        g = (
            F.circuit_graph(  # head nodes carry their atlas labels where one is stored
                st["result"],
                n_top=n,
                head_labels=atlas_labels(
                    store.client,
                    st["result"].get("model") or (st.get("request") or {}).get("model"),
                ),
            )
            if key == EDGE_ATTRIBUTION
            else F.flow_graph(st["result"])
        )
        stem = f"headscope-{which.split('-')[0]}-{src['id']}"
        if which.endswith("json"):
            return {
                "content": json.dumps(g),
                "filename": f"{stem}.json",
                "type": "application/json",
            }, ""
        return {
            "content": F.graphml(g),
            "filename": f"{stem}.graphml",
            "type": "application/xml",
        }, ""
