"""The head atlas (docs/atlas.md): every head of a model labelled by what it does, with its
confidence and its ablation evidence; a click on a head opens it in the text explorer.

URL state: ``/heads?analysis=<id>`` (or a share), or ``?model=NAME`` (with ``run=1``: computed at
once). One stored atlas per (model, settings): the request's text is always ``ATLAS_TEXT``.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlencode

import dash_ag_grid as dag
from dash import Dash, Input, Output, State, dcc, html, no_update

from frontend.figures import atlas as A
from frontend.figures.base import empty_figure
from frontend.kit.api_client import ApiError
from frontend.kit.atlas_labels import atlas_request
from frontend.kit.data import ResultStore, int_or_none
from frontend.kit.forms import corpus_options, url_model
from frontend.kit.frontdoor import page_header
from frontend.kit.page import (
    PageView,
    export_bar,
    graph,
    model_options,
    progress_block,
    register_exports,
    register_grid_pick,
    register_poll,
    register_view,
    restore_view,
)
from workers.analyses.atlas.spec import ATLAS, MAX_RANDOM_LEN, MAX_RANDOM_SEQS, AtlasOptions
from workers.core.notation import head_label, parse_head

logger = logging.getLogger(__name__)

NAME = "heads"  # a share's view names its page
PATH = "/heads"
TITLE = "Head atlas"
NAV_ORDER = 3
TYPES = list(A.COLOURS)
GRAPHS = ["heads-grid-graph"]
# the probe's defaults and limits are the atlas' options model's (written once, in its spec)
DEFAULT_SEQS = AtlasOptions.model_fields["random_seqs"].default
DEFAULT_LEN = AtlasOptions.model_fields["random_len"].default
DEFAULT_CORPUS = AtlasOptions.model_fields["corpus"].default
DEFAULT_RULE = AtlasOptions.model_fields["rule"].default


def explorer_href(model: str, layer: int, head: int) -> str:
    """The text explorer on this model with the head selected (its Analyze pressed once drawn)."""
    return "/text?" + urlencode({"model": model, "layer": layer, "head": head, "run": 1})


def _columns() -> list[dict[str, Any]]:
    number = {
        "type": "numericColumn",
        # a head without a label or evidence shows nothing, not 0.000
        "valueFormatter": {
            "function": "params.value == null ? '' : d3.format('.3f')(params.value)"
        },
    }
    return [
        {
            "field": "head",
            "pinned": "left",
            "minWidth": 95,
            "comparator": {"function": "headOrder"},
        },  # fmt: skip
        {"field": "layer", "hide": True},
        {"field": "label", "minWidth": 120},
        {"field": "confidence", "minWidth": 140},
        {"field": "score", "headerName": "score of its label", **number},
        {"field": "interval", "headerName": "95 % interval", "minWidth": 150},
        {"field": "effect_z", "headerName": "ablation z", "minWidth": 120, **number},
        {"field": "evidence", "minWidth": 240, "wrapText": True, "autoHeight": True},
        # wide enough for the longest type's name beside the header's sort and filter icons (a
        # narrower column broke "previous-token" letter by letter)
        *[{"field": t, "minWidth": 140, **number} for t in TYPES],
    ]


def layout(
    store: ResultStore, query: dict[str, str], share: dict[str, Any] | None = None
) -> html.Div:
    options, default_model, _ = model_options(store)
    source, request, _ = restore_view(store, query, share, keys=())
    model, url_msg = url_model(query, options, default_model, view="the head atlas")
    model = request.get("model") or model
    opts = request.get("options") or {}
    return html.Div(
        className="page",
        id="heads-page",
        children=[
            page_header(NAME, TITLE),
            html.Div(
                className="controls",
                children=[
                    url_msg,
                    html.P(
                        "Every head labelled by what it does: statistics over a corpus (shipped, or "
                        "one uploaded on the corpus page) and repeated random tokens, a 95 % "
                        "bootstrap interval (confident when its lower end clears the threshold), and "
                        "on decoders with a language-model head the effect of ablating it. Labels: "
                        "specific first (previous-token, induction, duplicate-token before sink, "
                        "self, local, broad), or the largest score that clears (SPEC 15 as "
                        "written). Computed once per model and settings.",
                        className="hint",
                    ),
                    html.Div(
                        className="control-row",
                        children=[
                            html.Label("model", htmlFor="heads-model"),
                            dcc.Dropdown(
                                id="heads-model",
                                options=options,
                                value=model,
                                clearable=False,
                                className="model-picker",
                            ),  # fmt: skip
                            html.Label("random sequences", htmlFor="heads-seqs"),
                            dcc.Input(
                                id="heads-seqs",
                                type="number",
                                min=1,
                                max=MAX_RANDOM_SEQS,
                                step=1,
                                value=opts.get("random_seqs", DEFAULT_SEQS),
                                style={"width": "5em"},
                            ),  # fmt: skip
                            html.Label("tokens each", htmlFor="heads-len"),
                            dcc.Input(
                                id="heads-len",
                                type="number",
                                min=2,
                                max=MAX_RANDOM_LEN,
                                step=1,
                                value=opts.get("random_len", DEFAULT_LEN),
                                style={"width": "5em"},
                            ),  # fmt: skip
                            html.Label("corpus", htmlFor="heads-corpus"),
                            dcc.Dropdown(
                                id="heads-corpus",
                                options=corpus_options(store) or [DEFAULT_CORPUS],
                                value=opts.get("corpus", DEFAULT_CORPUS),
                                clearable=False,
                                style={"minWidth": "16em"},
                            ),  # fmt: skip
                            html.Label("labels", htmlFor="heads-rule"),
                            dcc.Dropdown(
                                id="heads-rule",
                                options=[
                                    {"label": "specific first", "value": "specific-first"},
                                    {"label": "largest score (SPEC 15)", "value": "largest"},
                                ],
                                value=opts.get("rule", DEFAULT_RULE),
                                clearable=False,
                                style={"minWidth": "13em"},
                            ),  # fmt: skip
                            html.Button("Analyze", id="heads-analyze", className="button primary"),
                        ],
                    ),
                    html.Div(id="heads-error", className="error"),
                    progress_block("heads", running=source is not None),
                ],
            ),
            export_bar("heads", GRAPHS),
            html.Div(
                className="panel",
                children=[
                    html.P(id="heads-summary", className="hint"),
                    graph("heads-grid-graph", figure=empty_figure("Press Analyze.")),
                    html.P(
                        [
                            "A click on a head (grid or table) opens it in the text explorer. ",
                            html.A(id="heads-open", href=""),
                        ],
                        className="hint",
                    ),
                    html.Button("Export CSV", id="heads-table-csv", className="button secondary"),
                    dag.AgGrid(
                        id="heads-table",
                        columnDefs=_columns(),
                        rowData=[],
                        getRowId="params.data.head",
                        defaultColDef={
                            "sortable": True,
                            "filter": True,
                            "resizable": True,
                            "minWidth": 90,
                            "wrapHeaderText": True,
                            "autoHeaderHeight": True,
                        },  # fmt: skip
                        dashGridOptions={
                            "pagination": True,
                            "paginationPageSize": 15,
                            "paginationPageSizeSelector": [15, 50, 300],
                            "domLayout": "autoHeight",
                            "animateRows": False,
                        },  # fmt: skip
                        columnSize="responsiveSizeToFit",
                        className="heads-grid",
                        csvExportParams={"fileName": "headscope-head-atlas.csv"},
                    ),
                ],
            ),
            dcc.Store(id="heads-source", data=source),
            dcc.Store(id="heads-selected"),
            dcc.Store(id="heads-href"),
            dcc.Store(id="heads-went"),
        ],
    )


def _from_point(point: dict[str, Any]) -> Any:
    data = point.get("customdata")
    return {"layer": int(data[0]), "head": int(data[1])} if data else None


def _from_row(row_id: Any) -> Any:
    if not row_id:
        return None
    got = parse_head(str(row_id))
    return None if got is None else {"layer": got[0], "head": got[1]}


def register(app: Dash, store: ResultStore) -> None:
    client = store.client
    register_poll(app, store, "heads", ["heads-source"])
    register_grid_pick(
        app, target="heads-selected", graph_id="heads-grid-graph", grid_id="heads-table",
        from_point=_from_point, from_row=_from_row,
    )  # fmt: skip

    @app.callback(
        Output("heads-source", "data"),
        Output("heads-error", "children"),
        Input("heads-analyze", "n_clicks"),
        State("heads-model", "value"),
        State("heads-seqs", "value"),
        State("heads-len", "value"),
        State("heads-corpus", "value"),
        State("heads-rule", "value"),
        prevent_initial_call=True,
    )
    def _submit(_n, model, seqs, length, corpus, rule):  # type: ignore[no-untyped-def]
        req = atlas_request(
            model=model,
            random_seqs=int_or_none(seqs),
            random_len=int_or_none(length),
            corpus=corpus,
            rule=rule,
        )
        try:
            job = client.submit_analysis(**req)
        except ApiError as exc:
            return no_update, str(exc)
        return {"kind": "analysis", "id": job["id"], "request": req}, ""

    @app.callback(
        Output("heads-grid-graph", "figure"),
        Output("heads-table", "rowData"),
        Output("heads-summary", "children"),
        Input("heads-job", "data"),
        State("heads-source", "data"),
    )
    def _render(_job, source):  # type: ignore[no-untyped-def]
        st = store.status(source)
        sec = st["result"].get(ATLAS)
        if not sec:
            msg = {"none": "Press Analyze.", "failed": f"failed: {st.get('error')}"}.get(
                st["status"], "Computing the head atlas…"
            )
            return empty_figure(msg), [], ""
        model = (st.get("request") or {}).get("model") or sec.get("model", "")
        return A.atlas_grid_figure(sec, model=model), A.table_rows(sec), _summary(sec)

    @app.callback(
        Output("heads-href", "data"),
        Output("heads-open", "href"),
        Output("heads-open", "children"),
        Input("heads-selected", "data"),
        State("heads-source", "data"),
        State("heads-model", "value"),
        prevent_initial_call=True,
    )
    def _open(selected, source, model):  # type: ignore[no-untyped-def]
        if not selected:
            return no_update, no_update, no_update
        request = store.status(source).get("request") or {}
        layer, head = selected["layer"], selected["head"]
        href = explorer_href(request.get("model") or model, layer, head)
        return href, href, f"Open {head_label(layer, head)} in the text explorer."

    app.clientside_callback(  # a click opens the head: the browser goes there
        "function(href) { if (href) { window.location.href = href; } return href; }",
        Output("heads-went", "data"),
        Input("heads-href", "data"),
        prevent_initial_call=True,
    )

    register_view(
        app,
        client,
        PageView(
            name=NAME, prefix="heads", path=PATH, source="heads-source", inputs=(),
            view=lambda: {},
        ),
    )  # fmt: skip
    register_exports(
        app,
        store,
        "heads",
        source="heads-source",
        graphs=GRAPHS,
        figures=_figures,
        view_states=[],
        title="headscope — head atlas",
    )


def _summary(sec: dict[str, Any]) -> str:
    """The figures' counts line, then the probe's corpus and the labelling rule (docs/atlas.md)."""
    probe = sec.get("probe") or {}
    rule = sec.get("rule", DEFAULT_RULE)
    rule_words = (
        "the largest score that clears (SPEC 15)" if rule == "largest" else "specific types first"
    )
    corpus = probe.get("corpus", DEFAULT_CORPUS)
    return f"{A.summary_line(sec)} Corpus {corpus} ({probe.get('corpus_texts', '?')} texts); labels: {rule_words}."


def _figures(result: dict[str, Any]) -> list[Any]:
    sec = result.get(ATLAS)
    return [A.atlas_grid_figure(sec, model=(sec or {}).get("model", ""))]
