"""Corpus: statistics of every head over many texts, a map of heads, one head's top contexts and its
joint query–key map (docs/corpus.md).

URL state: ``/corpus?analysis=<corpus job id>`` (or a share) plus ``head`` ("L2H5", the selected
head; links with the older "2.5" still open), ``color`` (what colours the map of heads) and ``stat`` (the histogram's statistic).
"""

from __future__ import annotations

import base64
from typing import Any

from dash import Dash, Input, Output, State, dcc, html, no_update

from frontend.figures import corpus as C
from frontend.figures.base import empty_figure
from frontend.kit.api_client import ApiError
from frontend.kit.atlas_labels import atlas_labels
from frontend.kit.data import ResultStore
from frontend.kit.forms import corpus_options, url_model
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
)
from frontend.pages.corpus.joint import register_joint
from frontend.pages.corpus.layout import controls, panels
from frontend.pages.corpus.requests import corpus_request, restore
from frontend.pages.corpus.views import contexts, head_or_none, page_figures

NAME = "corpus"  # a share's view names its page
PATH = "/corpus"
TITLE = "Corpus"
NAV_ORDER = 5
GRAPHS = ["corpus-map-graph", "corpus-compare-graph", "corpus-hist-graph", "corpus-joint-graph"]


def layout(
    store: ResultStore, query: dict[str, str], share: dict[str, Any] | None = None
) -> html.Div:
    options, default_model, _ = model_options(store)
    source, request, view = restore(store, query, share)
    model, url_msg = url_model(query, options, default_model, view="the corpus analysis")
    return html.Div(
        className="page",
        id="corpus-page",
        children=[
            page_header(NAME, TITLE),
            None if request else url_msg,
            controls(request, source, options=options, corpora=corpus_options(store), model=model),
            export_bar("corpus", GRAPHS),
            *panels(view),
            dcc.Store(id="corpus-source", data=source),
            dcc.Store(id="corpus-joint-source"),
            dcc.Store(
                id="corpus-head", data=view.get("head") if C.parse_head(view.get("head")) else None
            ),
        ],
    )


def register(app: Dash, store: ResultStore) -> None:
    client = store.client
    register_poll(app, store, "corpus", ["corpus-source", "corpus-joint-source"])

    @app.callback(
        Output("corpus-pick", "options"),
        Output("corpus-pick", "value"),
        Output("corpus-upload-status", "children"),
        Input("corpus-store-paste", "n_clicks"),
        Input("corpus-upload", "contents"),
        State("corpus-paste", "value"),
        State("corpus-upload", "filename"),
        State("corpus-field", "value"),
        prevent_initial_call=True,
    )
    def _add_corpus(_n, contents, pasted, filename, field):  # type: ignore[no-untyped-def]
        from dash import ctx

        try:
            if ctx.triggered_id == "corpus-upload" and contents:
                data = base64.b64decode(contents.split(",", 1)[1])
                made = client.upload_corpus(filename=filename, data=data, field=(field or None))
            else:
                made = client.upload_corpus(text=pasted or "")
        except ApiError as exc:
            return no_update, no_update, html.Span(str(exc), className="error")
        return (
            corpus_options(store),
            made["id"],
            f"stored {made['name']}: {made['n_texts']} texts ({made['id']})",
        )

    @app.callback(
        Output("corpus-source", "data"),
        Output("corpus-joint-source", "data", allow_duplicate=True),
        Output("corpus-error", "children"),
        Input("corpus-analyze", "n_clicks"),
        State("corpus-model", "value"),
        State("corpus-pick", "value"),
        State("corpus-max-tokens", "value"),
        State("corpus-flags", "value"),
        prevent_initial_call=True,
    )
    def _submit(_n, model, corpus, max_tokens, flags):  # type: ignore[no-untyped-def]
        try:
            req = corpus_request(
                model=model,
                corpus=corpus,
                max_tokens=max_tokens,
                keep_special="keep" in (flags or []),
            )
            made = client.submit_corpus(req)
        except (ApiError, ValueError) as exc:
            return no_update, no_update, str(exc)
        return {"kind": "corpus", "id": made["id"], "request": req}, None, ""

    register_cancel(app, "corpus", kind="corpus", cancel=client.cancel_corpus)

    @app.callback(
        Output("corpus-table", "columnDefs"),
        Output("corpus-table", "rowData"),
        Input("corpus-job", "data"),
        State("corpus-source", "data"),
    )
    def _table(_job, source):  # type: ignore[no-untyped-def]
        st = store.status(source)
        labels = atlas_labels(client, (st.get("request") or {}).get("model"))
        return C.table_columns(st["result"], labels), C.table_rows(st["result"], labels)

    register_grid_pick(
        app,
        target="corpus-head",
        graph_id="corpus-map-graph",
        grid_id="corpus-table",
        from_point=lambda point: head_or_none(point.get("customdata")),
        from_row=head_or_none,
    )

    @app.callback(
        Output("corpus-map-graph", "figure"),
        Output("corpus-compare-graph", "figure"),
        Output("corpus-hist-graph", "figure"),
        Output("corpus-contexts", "children"),
        Output("corpus-selected-label", "children"),
        Input("corpus-job", "data"),
        Input("corpus-head", "data"),
        Input("corpus-color", "value"),
        Input("corpus-hist-stat", "value"),
        State("corpus-source", "data"),
    )
    def _views(_job, head, color, stat, source):  # type: ignore[no-untyped-def]
        st = store.status(source)
        result = st["result"]
        if not result.get("statistics"):
            msg = {
                "none": "Pick a corpus and press Analyze.",
                "failed": f"failed: {st.get('error')}",
            }.get(st["status"], "Computing…")
            return (
                empty_figure(msg),
                empty_figure("Click a head in the map or the table."),
                empty_figure("", height=260),
                contexts({}, None),
                "",
            )
        sel = C.parse_head(head)
        figs = page_figures(result, head, color, stat)
        label = f"selected head: {head}" if sel else "click a head to select it"
        if sel is None:
            figs += [
                empty_figure("Click a head in the map or the table."),
                empty_figure("", height=260),
            ]
        return (*figs, contexts(result, sel), label)

    register_joint(app, store)

    register_view(
        app,
        client,
        PageView(
            name=NAME,
            prefix="corpus",
            path=PATH,
            source="corpus-source",
            inputs=(
                ("corpus-head", "data"),
                ("corpus-color", "value"),
                ("corpus-hist-stat", "value"),
            ),
            view=lambda head, color, stat: {"head": head, "color": color, "stat": stat},
        ),
    )

    register_exports(
        app,
        store,
        "corpus",
        source="corpus-source",
        graphs=GRAPHS,
        figures=page_figures,
        view_states=[
            State("corpus-head", "data"),
            State("corpus-color", "value"),
            State("corpus-hist-stat", "value"),
        ],
        title="headscope — heads across a corpus",
    )
