"""Compare two models on the same text or corpus (docs/compare.md): the head-similarity matrix, the
matched pairs, both models' heads on one map, and a selected pair's word-level maps side by side.

URL state: ``/compare?analysis=<compare job id>`` (or a share) plus ``cell`` ("a-b", flat head
indices of the selected pair) and, for a corpus, ``text`` (the index of the text whose word-level maps
and surprisal are shown).
"""

from __future__ import annotations

import logging
from typing import Any

import dash_ag_grid as dag
from dash import Dash, Input, Output, State, dcc, html, no_update

from frontend.figures import compare as F
from frontend.figures.base import empty_figure
from frontend.kit.api_client import ApiError
from frontend.kit.atlas_labels import atlas_labels, pair_agreement
from frontend.kit.data import ResultStore
from frontend.kit.forms import corpus_options
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
    shown,
)
from frontend.pages import compare_atlas
from workers.analyses.compare.spec import WORD_MAPS

logger = logging.getLogger(__name__)

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
MAX_PICK = 1000  # texts listed in the corpus-text picker (the first ones of a larger corpus)
DEFAULT_TEXT = (
    "The old lighthouse keeper climbed the stairs every night, and every night the lamp "
    "answered him with the same slow light."
)


def compare_request(
    *,
    model_a: str,
    model_b: str,
    source: str,
    text: str | None,
    corpus: str | None,
    max_tokens: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model_a": model_a,
        "model_b": model_b,
        "max_tokens": int(max_tokens or 128),
    }
    if source == "corpus":
        body["corpus"] = corpus
    else:
        body["text"] = text or ""
    return body


def cell_of(value: Any) -> tuple[int, int] | None:
    """``"a-b"`` (the URL's form) or ``[a, b]`` -> (a, b)."""
    if isinstance(value, str) and value.count("-") == 1:
        try:
            return F.parse_cell([int(x) for x in value.split("-")])
        except ValueError:
            return None
    return F.parse_cell(value)


def _restore(store: ResultStore, query: dict[str, str], share: dict[str, Any] | None):
    source, request, view = None, {}, {}
    if share is not None:
        source = {"kind": "share", "id": share["id"]}
        request, view = share.get("request") or {}, dict(share.get("view") or {})
    elif query.get("analysis"):
        source = {"kind": "compare", "id": query["analysis"]}
        request = store.status(source).get("request") or {}
    view.update({k: v for k, v in query.items() if k in ("cell", "text")})
    return source, request, view


def text_index(value: Any) -> int:
    """The picked corpus text (URL: a string) as an index; 0 when unset or not one."""
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def maps_text(result: dict[str, Any], pick: Any, typed: str | None) -> str:
    """The text whose word-level maps a click shows: the compared text, or the picked text of the
    compared corpus (a result stored before texts were kept: the text box's)."""
    texts = result.get("texts")
    if texts:
        return texts[min(text_index(pick), len(texts) - 1)]
    return result.get("text") or typed or DEFAULT_TEXT


def text_options(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The corpus-text picker's options: ``i: the text's start`` for the first ``MAX_PICK`` texts."""
    return [
        {"label": f"{i}: {t[:100]}{'…' if len(t) > 100 else ''}", "value": i}
        for i, t in enumerate((result.get("texts") or [])[:MAX_PICK])
    ]


def layout(
    store: ResultStore, query: dict[str, str], share: dict[str, Any] | None = None
) -> html.Div:
    options, default_model, _ = model_options(store)
    source, request, view = _restore(store, query, share)
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
            html.Div(
                className="controls",
                children=[
                    html.Div(
                        className="control-row",
                        children=[
                            html.Label("model A", htmlFor="compare-model-a"),
                            dcc.Dropdown(
                                id="compare-model-a",
                                options=options,
                                value=request.get("model_a") or default_model,
                                clearable=False,
                                className="model-picker",
                            ),
                            html.Label("model B", htmlFor="compare-model-b"),
                            dcc.Dropdown(
                                id="compare-model-b",
                                options=options,
                                value=request.get("model_b") or second,
                                clearable=False,
                                className="model-picker",
                            ),
                        ],
                    ),
                    html.Div(
                        className="control-row",
                        children=[
                            dcc.RadioItems(
                                id="compare-source-kind",
                                inline=True,
                                options=[
                                    {"label": " one text", "value": "text"},
                                    {"label": " a corpus", "value": "corpus"},
                                ],
                                value=kind,
                            ),
                            html.Div(
                                id="compare-corpus-box",
                                style=shown(kind == "corpus"),
                                children=[
                                    dcc.Dropdown(
                                        id="compare-corpus",
                                        options=corpus_options(store),
                                        value=request.get("corpus") or "builtin-english",
                                        clearable=False,
                                        style={"minWidth": "22em"},
                                    ),
                                ],
                            ),
                            html.Label("max tokens per text", htmlFor="compare-max-tokens"),
                            dcc.Input(
                                id="compare-max-tokens",
                                type="number",
                                min=2,
                                max=512,
                                step=1,
                                value=request.get("max_tokens", 128),
                                style={"width": "9em"},
                            ),
                        ],
                    ),
                    html.Div(
                        id="compare-text-box",
                        style=shown(kind == "text"),
                        children=[
                            dcc.Textarea(
                                id="compare-text",
                                value=request.get("text") or DEFAULT_TEXT,
                                className="text-input",
                                placeholder="the text to compare the two models on",
                            ),
                        ],
                    ),
                    html.Div(
                        className="control-row",
                        children=[
                            html.Button("Compare", id="compare-run", className="button primary"),
                            html.Button(
                                "Cancel", id="compare-cancel", className="button secondary"
                            ),
                        ],
                    ),
                    html.Div(id="compare-error", className="error"),
                    progress_block("compare", running=source is not None),
                ],
            ),
            export_bar("compare", GRAPHS),
            html.Div(
                className="panel",
                children=[
                    html.P(
                        "Similarity of two heads: the mean over texts and query words of 1 − JSD (bits) of their "
                        "word-level attention rows (docs/compare.md). White lines: layer boundaries; dots: the "
                        "Hungarian matching. Click a cell for the two heads' word-level maps.",
                        className="hint",
                    ),
                    graph(
                        "compare-sim-graph",
                        figure=empty_figure("Pick two models and a text or corpus, then Compare."),
                    ),
                ],
            ),
            html.Div(
                className="panel",
                children=[
                    html.H4(
                        "Matched pairs (Hungarian method; sort by any column, click a row to select the pair)"
                    ),
                    html.Button("Export CSV", id="compare-table-csv", className="button secondary"),
                    dag.AgGrid(
                        id="compare-table",
                        rowData=[],
                        getRowId="params.data.id",
                        columnDefs=F.pair_columns(),
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
                            "paginationPageSize": 12,
                            "paginationPageSizeSelector": [12, 50, 200],
                            "domLayout": "autoHeight",
                            "animateRows": False,
                        },
                        columnSize="responsiveSizeToFit",
                        className="corpus-grid",
                        csvExportParams={"fileName": "headscope-compare-pairs.csv"},
                    ),
                ],
            ),
            html.Div(
                className="panel",
                children=[graph("compare-joint-graph", figure=F.joint_map_figure({}))],
            ),
            html.Div(
                className="panel",
                children=[
                    html.Div(
                        id="compare-text-row",
                        className="control-row",
                        style=shown(bool(picks)),
                        children=[
                            html.Label(
                                "text of the corpus (word-level maps and surprisal)",
                                htmlFor="compare-text-pick",
                            ),
                            dcc.Dropdown(
                                id="compare-text-pick",
                                options=picks,
                                value=text_index(view.get("text")),
                                clearable=False,
                                style={"minWidth": "40em"},
                            ),
                        ],
                    ),
                    html.Div(id="compare-cell-label", className="label"),
                    progress_block("compare-maps", running=False),
                    html.Div(
                        className="row",
                        children=[
                            html.Div(
                                className="col",
                                children=[
                                    graph(
                                        "compare-map-a",
                                        figure=F.word_map_figure(None, layer=0, head=0, title=""),
                                    ),
                                    html.Button(
                                        "A's token view",
                                        id="compare-open-a",
                                        className="button secondary",
                                    ),
                                ],
                            ),
                            html.Div(
                                className="col",
                                children=[
                                    graph(
                                        "compare-map-b",
                                        figure=F.word_map_figure(None, layer=0, head=0, title=""),
                                    ),
                                    html.Button(
                                        "B's token view",
                                        id="compare-open-b",
                                        className="button secondary",
                                    ),
                                ],
                            ),
                        ],
                    ),
                ],
            ),
            html.Div(
                className="panel",
                children=[graph("compare-surprisal", figure=empty_figure("", height=220))],
            ),
            compare_atlas.panel(),
            dcc.Location(id="compare-go", refresh=True),
            dcc.Store(id="compare-source", data=source),
            dcc.Store(id="compare-maps-a"),
            dcc.Store(id="compare-maps-b"),
            dcc.Store(id="compare-cell", data=list(cell) if cell else None),
        ],
    )


def _figures(result: dict[str, Any], cell: Any, pick: Any = 0) -> list[Any]:
    sel = cell_of(cell)
    n = len(result.get("words") or [None])
    return [
        F.similarity_figure(result, selected=sel),
        F.joint_map_figure(result, selected=sel),
        F.surprisal_figure(result, text=min(text_index(pick), n - 1)),
    ]


def _view(cell: Any, pick: Any) -> dict[str, Any]:
    """The URL's and a share's view: the selected pair and the picked corpus text (when not the first)."""
    view: dict[str, Any] = {"cell": "-".join(map(str, cell_of(cell)))} if cell_of(cell) else {}
    if text_index(pick) > 0:
        view["text"] = text_index(pick)
    return view


def _listed(cell: tuple[int, int] | None) -> list[int] | None:
    return list(cell) if cell else None


def register(app: Dash, store: ResultStore) -> None:
    client = store.client
    register_poll(app, store, "compare", ["compare-source"])
    compare_atlas.register(app, store)
    # the pair's word maps have a poll of their own: in one poll, maps -> poll -> compare-job -> maps would
    # be a cycle, and Dash does not run the poll again in the chain it started (a link's pair stayed blank)
    register_poll(app, store, "compare-maps", ["compare-maps-a", "compare-maps-b"])

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
        from_point=lambda point: _listed(F.clicked_cell(point)),
        from_row=lambda row: _listed(cell_of(row)),
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
            *_figures(result, cell, pick),
        )

    @app.callback(
        Output("compare-maps-a", "data"),
        Output("compare-maps-b", "data"),
        Input("compare-cell", "data"),
        Input("compare-job", "data"),
        Input("compare-text-pick", "value"),
        State("compare-source", "data"),
        State("compare-text", "value"),
        State("compare-maps-a", "data"),
    )
    def _maps(cell, _job, pick, source, typed, have):  # type: ignore[no-untyped-def]
        st = store.status(source)
        result = st["result"]
        if cell_of(cell) is None or not result.get("similarity"):
            return no_update, no_update
        text = maps_text(result, pick, typed)
        out = []
        for side in ("model_a", "model_b"):
            model = result[side]["name"]
            try:
                made = client.submit_analysis(
                    model=model, text=text, analyses=[WORD_MAPS], options={"truncate": True}
                )
            except ApiError as exc:
                logger.warning("word maps of %s: %s", model, exc)
                return no_update, no_update
            out.append({"kind": "analysis", "id": made["id"]})
        if have and have.get("id") == out[0]["id"]:
            return no_update, no_update  # the same text: its maps are already there
        return out[0], out[1]

    @app.callback(
        Output("compare-map-a", "figure"),
        Output("compare-map-b", "figure"),
        Output("compare-cell-label", "children"),
        Input("compare-job", "data"),
        Input("compare-maps-job", "data"),
        Input("compare-cell", "data"),
        State("compare-source", "data"),
        State("compare-maps-a", "data"),
        State("compare-maps-b", "data"),
        State("compare-text-pick", "value"),
    )
    def _pair(_job, _maps_job, cell, source, maps_a, maps_b, pick):  # type: ignore[no-untyped-def]
        sel = cell_of(cell)
        result = store.status(source)["result"]
        if sel is None or not result.get("similarity"):
            blank = F.word_map_figure(None, layer=0, head=0, title="")
            return blank, blank, "Click a cell of the similarity matrix or a row of the table."
        figs = []
        for idx, side, maps in (
            (sel[0], result["model_a"], maps_a),
            (sel[1], result["model_b"], maps_b),
        ):
            h = int(side["n_heads"])
            st = store.status(maps) if maps else {"status": "none", "result": {}}
            section = (st.get("result") or {}).get(WORD_MAPS)
            title = f"{side['name']} head {F.head_label(idx, h)}: word-level map"
            figs.append(
                F.word_map_figure(section, layer=idx // h, head=idx % h, title=title)
                if section
                else empty_figure(f"{title}: {st.get('error') or 'computing…'}", height=460)
            )
        sim = result["similarity"][sel[0]][sel[1]]
        label = (
            f"A {result['model_a']['name']} {F.head_label(sel[0], int(result['model_a']['n_heads']))} · "
            f"B {result['model_b']['name']} {F.head_label(sel[1], int(result['model_b']['n_heads']))}: "
            f"similarity {sim:.3f}"
        )
        ha, hb = int(result["model_a"]["n_heads"]), int(result["model_b"]["n_heads"])
        agree = pair_agreement(
            atlas_labels(client, result["model_a"]["name"]),
            atlas_labels(client, result["model_b"]["name"]),
            (sel[0] // ha, sel[0] % ha),
            (sel[1] // hb, sel[1] % hb),
        )
        label += f" · {agree}" if agree else ""
        if result.get("texts"):
            n = len(result["texts"])
            label += f" · word-level maps of text {min(text_index(pick), n - 1)} of {n}"
        return figs[0], figs[1], label

    @app.callback(
        Output("compare-go", "href"),
        Output("compare-error", "children", allow_duplicate=True),
        Input("compare-open-a", "n_clicks"),
        Input("compare-open-b", "n_clicks"),
        State("compare-cell", "data"),
        State("compare-source", "data"),
        State("compare-text", "value"),
        State("compare-text-pick", "value"),
        prevent_initial_call=True,
    )
    def _token_view(_a, _b, cell, source, typed, pick):  # type: ignore[no-untyped-def]
        from dash import ctx

        from frontend.pages.text import text_request

        sel = cell_of(cell)
        result = store.status(source)["result"]
        if sel is None or not result.get("similarity"):
            return no_update, "compare, then click a cell first"
        side, idx = (
            ("model_a", sel[0]) if ctx.triggered_id == "compare-open-a" else ("model_b", sel[1])
        )
        h = int(result[side]["n_heads"])
        req = text_request(
            text=maps_text(result, pick, typed),
            model=result[side]["name"],
            drop_special=True,
            restarts=1,
            layer=idx // h,
            head=idx % h,
        )
        try:
            made = client.submit_analysis(**req)
        except ApiError as exc:
            return no_update, str(exc)
        return f"/?analysis={made['id']}", ""

    register_view(
        app,
        client,
        PageView(
            name=NAME,
            prefix="compare",
            path=PATH,
            source="compare-source",
            inputs=(("compare-cell", "data"), ("compare-text-pick", "value")),
            view=_view,
        ),
    )

    register_exports(
        app,
        store,
        "compare",
        source="compare-source",
        graphs=GRAPHS,
        figures=_figures,
        view_states=[State("compare-cell", "data"), State("compare-text-pick", "value")],
        title="headscope — two models side by side",
    )
