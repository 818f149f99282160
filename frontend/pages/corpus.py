"""Corpus: statistics of every head over many texts, a map of heads, one head's top contexts and its
joint query–key map (docs/corpus.md).

URL state: ``/corpus?analysis=<corpus job id>`` (or a share) plus ``head`` ("L2H5", the selected
head; links with the older "2.5" still open), ``color`` (what colours the map of heads) and ``stat`` (the histogram's statistic).
"""

from __future__ import annotations

import base64
import logging
from typing import Any

import dash_ag_grid as dag
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
    graph,
    model_options,
    progress_block,
    register_cancel,
    register_exports,
    register_grid_pick,
    register_poll,
    register_view,
)

logger = logging.getLogger(__name__)

NAME = "corpus"  # a share's view names its page
PATH = "/corpus"
TITLE = "Corpus"
NAV_ORDER = 5
GRAPHS = ["corpus-map-graph", "corpus-compare-graph", "corpus-hist-graph", "corpus-joint-graph"]
VIEW_KEYS = ("head", "color", "stat")


def corpus_request(
    *, model: str, corpus: str, max_tokens: Any, keep_special: bool
) -> dict[str, Any]:
    return {
        "model": model,
        "corpus": corpus,
        "options": {"max_tokens": int(max_tokens or 128), "keep_special": bool(keep_special)},
    }


def _restore(store: ResultStore, query: dict[str, str], share: dict[str, Any] | None):
    source, request, view = None, {}, {}
    if share is not None:
        source = {"kind": "share", "id": share["id"]}
        request, view = share.get("request") or {}, dict(share.get("view") or {})
    elif query.get("analysis"):
        source = {"kind": "corpus", "id": query["analysis"]}
        request = store.status(source).get("request") or {}
    view.update({k: v for k, v in query.items() if k in VIEW_KEYS})
    return source, request, view


def layout(
    store: ResultStore, query: dict[str, str], share: dict[str, Any] | None = None
) -> html.Div:
    options, default_model, _ = model_options(store)
    source, request, view = _restore(store, query, share)
    opts = request.get("options") or {}
    corpora = corpus_options(store)
    model, url_msg = url_model(query, options, default_model, view="the corpus analysis")
    return html.Div(
        className="page",
        id="corpus-page",
        children=[
            page_header(NAME, TITLE),
            None if request else url_msg,
            html.Div(
                className="controls",
                children=[
                    html.Div(
                        className="control-row",
                        children=[
                            html.Label("model", htmlFor="corpus-model"),
                            dcc.Dropdown(
                                id="corpus-model",
                                options=options,
                                value=request.get("model") or model,
                                clearable=False,
                                className="model-picker",
                            ),
                            html.Label("corpus", htmlFor="corpus-pick"),
                            dcc.Dropdown(
                                id="corpus-pick",
                                options=corpora,
                                value=request.get("corpus") or "builtin-english",
                                clearable=False,
                                style={"minWidth": "22em"},
                            ),
                        ],
                    ),
                    html.Details(
                        children=[
                            html.Summary(
                                "add a corpus: paste texts (one per line) or upload .txt / .jsonl / .csv / .parquet, "
                                "or a datasets directory (save_to_disk) as .zip / .tar.gz"
                            ),
                            dcc.Textarea(
                                id="corpus-paste",
                                placeholder="one text per line",
                                className="text-input",
                            ),
                            html.Div(
                                className="control-row",
                                children=[
                                    html.Button(
                                        "Store pasted texts",
                                        id="corpus-store-paste",
                                        className="button",
                                    ),
                                    dcc.Upload(
                                        id="corpus-upload",
                                        children=html.Button("Upload a file…", className="button"),
                                    ),
                                    html.Label(
                                        "field / column (.jsonl, .csv, .parquet, datasets)",
                                        htmlFor="corpus-field",
                                    ),
                                    dcc.Input(
                                        id="corpus-field",
                                        type="text",
                                        placeholder="text",
                                        debounce=True,
                                    ),
                                ],
                            ),
                            html.Div(id="corpus-upload-status", className="status"),
                        ]
                    ),
                    html.Div(
                        className="control-row",
                        children=[
                            html.Label("max tokens per text", htmlFor="corpus-max-tokens"),
                            dcc.Input(
                                id="corpus-max-tokens",
                                type="number",
                                min=2,
                                max=4096,
                                step=1,
                                value=opts.get("max_tokens", 128),
                            ),
                            dcc.Checklist(
                                id="corpus-flags",
                                options=[{"label": " keep special tokens", "value": "keep"}],
                                value=["keep"] if opts.get("keep_special") else [],
                                inline=True,
                            ),
                            html.Button("Analyze", id="corpus-analyze", className="button primary"),
                            html.Button("Cancel", id="corpus-cancel", className="button secondary"),
                        ],
                    ),
                    html.Div(id="corpus-error", className="error"),
                    progress_block("corpus", running=source is not None),
                ],
            ),
            export_bar("corpus", GRAPHS),
            html.Div(
                className="panel",
                children=[
                    html.Div(
                        className="control-row",
                        children=[
                            html.P(
                                "Each statistic is a mean over the queries it applies to (docs/corpus.md). A click on a "
                                "column's name sorts by it; a number typed under it keeps the heads above it (its menu "
                                "picks another condition); a click on a row selects the head.",
                                className="hint",
                            ),
                            html.Button(
                                "Export CSV", id="corpus-table-csv", className="button secondary"
                            ),
                        ],
                    ),
                    dag.AgGrid(
                        id="corpus-table",
                        columnDefs=[],
                        rowData=[],
                        getRowId="params.data.head",
                        defaultColDef={
                            "sortable": True,
                            "filter": True,
                            "floatingFilter": True,
                            "resizable": True,
                            "minWidth": 90,
                            "wrapHeaderText": True,
                            "autoHeaderHeight": True,
                        },
                        dashGridOptions={
                            "pagination": True,
                            "paginationPageSize": 15,
                            "paginationPageSizeSelector": [15, 50, 200],
                            "domLayout": "autoHeight",
                            "animateRows": False,
                        },
                        columnSize="responsiveSizeToFit",
                        className="corpus-grid",
                        csvExportParams={"fileName": "headscope-corpus-heads.csv"},
                    ),
                ],
            ),
            html.Div(
                className="panel",
                children=[
                    html.Div(
                        className="control-row",
                        children=[
                            html.Label("colour the map by", htmlFor="corpus-color"),
                            dcc.Dropdown(
                                id="corpus-color",
                                value=view.get("color") or "layer",
                                clearable=False,
                                options=[{"label": "layer", "value": "layer"}]
                                + [{"label": lab, "value": s} for s, lab in C.STAT_LABELS.items()],
                                style={"minWidth": "14em"},
                            ),
                            html.Span(id="corpus-selected-label", className="label"),
                        ],
                    ),
                    graph(
                        "corpus-map-graph", figure=empty_figure("Pick a corpus and press Analyze.")
                    ),
                ],
            ),
            html.Div(
                className="panel",
                children=[
                    html.Div(
                        className="row",
                        children=[
                            html.Div(
                                className="col",
                                children=graph(
                                    "corpus-compare-graph",
                                    figure=empty_figure("Click a head in the map or the table."),
                                ),
                            ),
                            html.Div(
                                className="col",
                                children=[
                                    dcc.Dropdown(
                                        id="corpus-hist-stat",
                                        value=view.get("stat") or "previous",
                                        clearable=False,
                                        options=[
                                            {"label": lab, "value": s}
                                            for s, lab in C.STAT_LABELS.items()
                                        ],
                                    ),
                                    graph("corpus-hist-graph", figure=empty_figure("", height=260)),
                                ],
                            ),
                        ],
                    ),
                    html.H4("Top (query, key) pairs: query in blue, key in orange"),
                    html.Div(id="corpus-contexts", className="contexts"),
                ],
            ),
            html.Div(
                className="panel",
                children=[
                    html.Div(
                        className="control-row",
                        children=[
                            html.Button(
                                "Joint query–key map", id="corpus-joint-button", className="button"
                            ),
                            dcc.RadioItems(
                                id="corpus-joint-method",
                                options=[
                                    {"label": "PCA", "value": "pca"},
                                    {"label": "t-SNE (slow)", "value": "tsne"},
                                ],
                                value="pca",
                                inline=True,
                            ),
                            dcc.RadioItems(
                                id="corpus-joint-color",
                                options=[
                                    {"label": "query / key", "value": "kind"},
                                    {"label": "position", "value": "position"},
                                ],
                                value="kind",
                                inline=True,
                            ),
                        ],
                    ),
                    graph("corpus-joint-graph", figure=C.joint_map_figure(None)),
                ],
            ),
            dcc.Store(id="corpus-source", data=source),
            dcc.Store(id="corpus-joint-source"),
            dcc.Store(
                id="corpus-head", data=view.get("head") if C.parse_head(view.get("head")) else None
            ),
        ],
    )


def _figures(
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


def _contexts(result: dict[str, Any], sel: tuple[int, int] | None) -> list[Any]:
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


def _head_or_none(value: Any) -> Any:
    return value if C.parse_head(value) else None


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
        from_point=lambda point: _head_or_none(point.get("customdata")),
        from_row=_head_or_none,
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
                _contexts({}, None),
                "",
            )
        sel = C.parse_head(head)
        figs = _figures(result, head, color, stat)
        label = f"selected head: {head}" if sel else "click a head to select it"
        if sel is None:
            figs += [
                empty_figure("Click a head in the map or the table."),
                empty_figure("", height=260),
            ]
        return (*figs, _contexts(result, sel), label)

    @app.callback(
        Output("corpus-joint-source", "data"),
        Output("corpus-error", "children", allow_duplicate=True),
        Input("corpus-joint-button", "n_clicks"),
        State("corpus-head", "data"),
        State("corpus-source", "data"),
        State("corpus-joint-method", "value"),
        prevent_initial_call=True,
    )
    def _joint(_n, head, source, method):  # type: ignore[no-untyped-def]
        sel = C.parse_head(head)
        request = store.status(source).get("request") or {}
        if sel is None or not request:
            return no_update, "analyze a corpus and click a head first"
        body = {
            "model": request["model"],
            "corpus": request["corpus"],
            "layer": sel[0],
            "head": sel[1],
            "max_tokens": (request.get("options") or {}).get("max_tokens", 128),
            "keep_special": (request.get("options") or {}).get("keep_special", False),
            "method": method or "pca",
        }
        try:
            made = client.submit_joint(body)
        except ApiError as exc:
            return no_update, str(exc)
        return {"kind": "corpus-joint", "id": made["id"], "request": body}, ""

    @app.callback(
        Output("corpus-joint-graph", "figure"),
        Input("corpus-job", "data"),
        Input("corpus-joint-color", "value"),
        State("corpus-joint-source", "data"),
    )
    def _joint_view(_job, color, source):  # type: ignore[no-untyped-def]
        if not source:
            return C.joint_map_figure(None)
        st = store.status(source)
        if st["status"] == "failed":
            return empty_figure(f"joint map failed: {st.get('error')}")
        if st["status"] != "finished":
            return empty_figure(f"Computing the joint map… {st.get('message') or ''}")
        return C.joint_map_figure(st["result"], color_by=color or "kind")

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
        figures=_figures,
        view_states=[
            State("corpus-head", "data"),
            State("corpus-color", "value"),
            State("corpus-hist-stat", "value"),
        ],
        title="headscope — heads across a corpus",
    )
