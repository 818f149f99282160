"""PE explorer: uploaded positional-encoding checkpoints against a reference and a partition (docs/positional.md).

URL state: ``/pe?analysis=<id>`` (or ``/pe?share=<id>``) plus ``colour`` (row / column /
partition / position), ``rescale``, ``reorder``, ``aligned`` and ``shared`` (1/0: one colour scale for
all distance heatmaps instead of one per panel).
"""

from __future__ import annotations

from typing import Any

from dash import ALL, Dash, Input, Output, State, dcc, html, no_update

from frontend.figures import positional as P
from frontend.figures.base import empty_figure
from frontend.kit.api_client import ApiError
from frontend.kit.data import ResultStore
from frontend.kit.frontdoor import page_header
from frontend.kit.page import (
    PageView,
    export_bar,
    register_exports,
    register_poll,
    register_view,
)
from frontend.pages.pe.checkpoints import register_checkpoints
from frontend.pages.pe.layout import controls, panels
from frontend.pages.pe.requests import (  # noqa: F401 - the requests re-exported
    checkpoint_entry,
    pe_request,
    restore,
    upload_error,
)
from frontend.pages.pe.views import grid_of, metrics_table, page_figures

NAME = "pe"  # a share's view names its page
PATH = "/pe"
TITLE = "PE explorer"
NAV_ORDER = 3
GRAPHS = ["pe-distance-graph", "pe-map-graph", "pe-sweep-graph"]


def layout(
    store: ResultStore, query: dict[str, str], share: dict[str, Any] | None = None
) -> html.Div:
    source, request, view, entries = restore(store, query, share)
    return html.Div(
        className="page",
        id="pe-page",
        children=[
            page_header(NAME, TITLE),
            controls(request, source),
            export_bar("pe", GRAPHS),
            *panels(view),
            dcc.Store(id="pe-source", data=source),
            dcc.Store(id="pe-checkpoints", data=entries),
        ],
    )


def register(app: Dash, store: ResultStore) -> None:
    client = store.client
    register_poll(app, store, "pe", ["pe-source"])
    register_checkpoints(app, store)

    @app.callback(
        Output("pe-source", "data"),
        Output("pe-error", "children"),
        Input("pe-run-button", "n_clicks"),
        State("pe-checkpoints", "data"),
        State({"type": "pe-tensor", "index": ALL}, "value"),
        State("pe-reference", "value"),
        State("pe-grid-rows", "value"),
        State("pe-grid-cols", "value"),
        State("pe-sigma", "value"),
        State("pe-seed", "value"),
        State("pe-reference-checkpoint", "value"),
        State("pe-partition", "value"),
        State("pe-partition-csv", "value"),
        State("pe-metric", "value"),
        prevent_initial_call=True,
    )
    def _run(
        _n, entries, tensors, reference, rows, cols, sigma, seed, ref_ckpt, partition, csv, metric
    ):  # type: ignore[no-untyped-def]
        entries = [dict(e) for e in entries or []]
        for e, t in zip(entries, tensors or [], strict=False):
            e["tensor"] = t
        if not entries:
            return no_update, "Upload a checkpoint or load the demos first."
        try:
            body = pe_request(
                checkpoints=entries,
                reference=reference,
                grid=(int(rows or 4), int(cols or 4)),
                sigma=float(sigma if sigma is not None else 1.0),
                seed=int(seed or 0),
                reference_checkpoint=ref_ckpt,
                partition=partition,
                csv=csv,
                metric=metric,
            )
            job = client.submit_pe_analysis(body)
        except (ApiError, ValueError) as exc:
            return no_update, str(exc)
        return {"kind": "pe", "id": job["id"], "request": body}, ""

    @app.callback(
        Output("pe-metrics", "children"),
        Output("pe-distance-graph", "figure"),
        Output("pe-map-graph", "figure"),
        Output("pe-sweep-graph", "figure"),
        Input("pe-job", "data"),
        Input("pe-reorder", "value"),
        Input("pe-colour", "value"),
        Input("pe-view-options", "value"),
        Input("pe-shared-scale", "value"),
        State("pe-source", "data"),
        State("pe-grid-rows", "value"),
        State("pe-grid-cols", "value"),
    )
    def _render(_job, reorder, colour, view_opts, shared, source, rows, cols):  # type: ignore[no-untyped-def]
        st = store.status(source)
        result = st["result"]
        if not result.get("checkpoints"):
            msg = {
                "none": "Load a checkpoint and press Analyze.",
                "failed": f"failed: {st.get('error')}",
            }.get(st["status"], "Computing…")
            return html.Div(), empty_figure(msg), empty_figure(""), empty_figure("", height=200)
        grid = grid_of(st.get("request"), rows, cols)
        opts = view_opts or []
        return (
            metrics_table(result),
            P.pe_distance_figure(result, reorder=bool(reorder), shared_scale=bool(shared)),
            P.pe_map_figure(
                result,
                colour_by=colour or "row",
                grid=grid,
                rescale="rescale" in opts,
                aligned="aligned" in opts,
            ),
            P.pe_sweep_figure(result),
        )

    def _view(colour: Any, view_opts: Any, reorder: Any, shared: Any = None) -> dict[str, Any]:
        opts = view_opts or []
        return {
            "colour": colour,
            "rescale": "rescale" in opts,
            "aligned": "aligned" in opts,
            "reorder": bool(reorder),
            "shared": bool(shared),
        }

    register_view(
        app,
        client,
        PageView(
            name=NAME,
            prefix="pe",
            path=PATH,
            source="pe-source",
            inputs=(
                ("pe-colour", "value"),
                ("pe-view-options", "value"),
                ("pe-reorder", "value"),
                ("pe-shared-scale", "value"),
            ),
            view=_view,
        ),
    )

    register_exports(
        app,
        store,
        "pe",
        source="pe-source",
        graphs=GRAPHS,
        figures=page_figures,
        view_states=[
            State("pe-reorder", "value"),
            State("pe-colour", "value"),
            State("pe-view-options", "value"),
            State("pe-grid-rows", "value"),
            State("pe-grid-cols", "value"),
            State("pe-shared-scale", "value"),
        ],
        title="headscope — positional encodings",
    )
