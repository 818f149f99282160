"""Compare two models on the same text or corpus (docs/compare.md): the head-similarity matrix, the
matched pairs, both models' heads on one map, and a selected pair's word-level maps side by side.

URL state: ``/compare?analysis=<compare job id>`` (or a share) plus ``cell`` ("a-b", flat head
indices of the selected pair) and, for a corpus, ``text`` (the index of the text whose word-level maps
and surprisal are shown).
"""

from __future__ import annotations

from typing import Any

from dash import Dash, Input, Output, State, dcc, html, no_update

from frontend.figures import compare as F
from frontend.figures.base import empty_figure
from frontend.kit.api_client import ApiError
from frontend.kit.atlas_labels import atlas_labels
from frontend.kit.data import ResultStore
from frontend.kit.frontdoor import page_header
from frontend.kit.page import (
    PageView,
    export_bar,
    model_options,
    register_cancel,
    register_exports,
    register_grid_pick,
    register_poll,
    register_view,
    shown,
)
from frontend.pages import compare_atlas
from frontend.pages.compare.layout import controls, panels
from frontend.pages.compare.pair import register_pair
from frontend.pages.compare.requests import (  # noqa: F401 - the requests re-exported
    MAX_PICK,
    cell_of,
    compare_request,
    listed,
    page_view,
    restore,
    text_index,
    text_options,
)

NAME = "compare"
PATH = "/compare"
TITLE = "Compare"
NAV_ORDER = 7
GRAPHS = [
    "compare-sim-graph",
    "compare-joint-graph",
    "compare-map-a",
    "compare-map-b",
    "compare-surprisal",
]


def layout(
    store: ResultStore, query: dict[str, str], share: dict[str, Any] | None = None
) -> html.Div:
    options, default_model, _ = model_options(store)
    source, request, view = restore(store, query, share)
    names = [o["value"] for o in options]
    second = "smollm2" if "smollm2" in names else default_model
    cell = cell_of(view.get("cell"))
    picks = (
        text_options(store.status(source)["result"]) if source else []
    )  # a link's picked text: listed
    kind = "corpus" if request.get("corpus") else "text"  # the text box shows in text mode only
    return html.Div(
        className="page",
        id="compare-page",
        children=[
            page_header(NAME, TITLE),
            controls(
                store,
                request,
                source,
                options=options,
                default_model=default_model,
                second=second,
                kind=kind,
            ),
            export_bar("compare", GRAPHS),
            *panels(picks, view),
            compare_atlas.panel(),
            dcc.Location(id="compare-go", refresh=True),
            dcc.Store(id="compare-source", data=source),
            dcc.Store(id="compare-maps-a"),
            dcc.Store(id="compare-maps-b"),
            dcc.Store(id="compare-cell", data=list(cell) if cell else None),
        ],
    )


def page_figures(result: dict[str, Any], cell: Any, pick: Any = 0) -> list[Any]:
    sel = cell_of(cell)
    n = len(result.get("words") or [None])
    return [
        F.similarity_figure(result, selected=sel),
        F.joint_map_figure(result, selected=sel),
        F.surprisal_figure(result, text=min(text_index(pick), n - 1)),
    ]


def register(app: Dash, store: ResultStore) -> None:
    client = store.client
    register_poll(app, store, "compare", ["compare-source"])
    compare_atlas.register(app, store)
    # the pair's word maps have a poll of their own: in one poll, maps -> poll -> compare-job -> maps would
    # be a cycle, and Dash does not run the poll again in the chain it started (a link's pair stayed blank)
    register_poll(app, store, "compare-maps", ["compare-maps-a", "compare-maps-b"])
    register_pair(app, store)

    @app.callback(
        Output("compare-source", "data"),
        Output("compare-cell", "data", allow_duplicate=True),
        Output("compare-error", "children"),
        Input("compare-run", "n_clicks"),
        State("compare-model-a", "value"),
        State("compare-model-b", "value"),
        State("compare-source-kind", "value"),
        State("compare-text", "value"),
        State("compare-corpus", "value"),
        State("compare-max-tokens", "value"),
        prevent_initial_call=True,
    )
    def _submit(_n, model_a, model_b, kind, text, corpus, max_tokens):  # type: ignore[no-untyped-def]
        req = compare_request(
            model_a=model_a,
            model_b=model_b,
            source=kind,
            text=text,
            corpus=corpus,
            max_tokens=max_tokens,
        )
        try:
            made = client.submit_compare(req)
        except (ApiError, ValueError) as exc:
            return no_update, no_update, str(exc)
        return {"kind": "compare", "id": made["id"], "request": req}, None, ""

    @app.callback(
        Output("compare-text-box", "style"),
        Output("compare-corpus-box", "style"),
        Input("compare-source-kind", "value"),
    )
    def _mode(kind):  # type: ignore[no-untyped-def]
        """Text mode: the text box; corpus mode: the corpus picker (the other one hides)."""
        return shown(kind != "corpus"), shown(kind == "corpus")

    register_cancel(app, "compare", kind="compare", cancel=client.cancel_compare)
    register_grid_pick(
        app,
        target="compare-cell",
        graph_id="compare-sim-graph",
        grid_id="compare-table",
        from_point=lambda point: listed(F.clicked_cell(point)),
        from_row=lambda row: listed(cell_of(row)),
    )

    @app.callback(
        Output("compare-text-pick", "options"),
        Output("compare-text-pick", "value"),
        Output("compare-text-row", "style"),
        Input("compare-job", "data"),
        State("compare-source", "data"),
        State("compare-text-pick", "value"),
    )
    def _texts(_job, source, pick):  # type: ignore[no-untyped-def]
        opts = text_options(store.status(source)["result"])
        value = min(text_index(pick), len(opts) - 1) if opts else 0
        return opts, value, shown(bool(opts))

    @app.callback(
        Output("compare-table", "rowData"),
        Output("compare-table", "columnDefs"),
        Output("compare-sim-graph", "figure"),
        Output("compare-joint-graph", "figure"),
        Output("compare-surprisal", "figure"),
        Input("compare-job", "data"),
        Input("compare-cell", "data"),
        Input("compare-text-pick", "value"),
        State("compare-source", "data"),
        State("compare-table", "columnDefs"),
    )
    def _views(_job, cell, pick, source, had_cols):  # type: ignore[no-untyped-def]
        st = store.status(source)
        result = st["result"]
        if not result.get("similarity"):
            msg = {
                "none": "Pick two models and a text or corpus, then Compare.",
                "failed": f"failed: {st.get('error')}",
            }.get(st["status"], "Comparing…")
            return (
                [],
                no_update,
                empty_figure(msg),
                F.joint_map_figure({}),
                empty_figure("", height=220),
            )
        la = atlas_labels(client, result["model_a"]["name"])  # the CSV gains their label columns
        lb = atlas_labels(client, result["model_b"]["name"])
        cols = F.pair_columns(la, lb)  # re-sent only when they change (a grid keeps its sort)
        return (
            F.pair_rows(result, la, lb),
            no_update if cols == had_cols else cols,
            *page_figures(result, cell, pick),
        )

    register_view(
        app,
        client,
        PageView(
            name=NAME,
            prefix="compare",
            path=PATH,
            source="compare-source",
            inputs=(("compare-cell", "data"), ("compare-text-pick", "value")),
            view=page_view,
        ),
    )

    register_exports(
        app,
        store,
        "compare",
        source="compare-source",
        graphs=GRAPHS,
        figures=page_figures,
        view_states=[State("compare-cell", "data"), State("compare-text-pick", "value")],
        title="headscope — two models side by side",
    )
