"""Terms: importance curves of the exact decomposition e = i + h + f + c (docs/decomposition.md).

URL state: ``/terms?analysis=<id>`` (or a share) plus ``compare`` (a second model's analysis
id), ``token`` (the clicked token) and ``state`` (the state of the token strip and head map).
"""

from __future__ import annotations

import logging
from typing import Any

from dash import Dash, Input, Output, State, dcc, html, no_update

from frontend.figures import terms as T
from frontend.figures.base import empty_figure
from frontend.kit.api_client import ApiError
from frontend.kit.data import ResultStore, int_or_none
from frontend.kit.forms import url_model
from frontend.kit.frontdoor import page_header
from frontend.kit.page import (
    PageView,
    export_bar,
    graph,
    highlight_stores,
    model_options,
    progress_block,
    register_exports,
    register_highlight,
    register_poll,
    register_view,
    restore_view,
)
from workers.analyses.decomposition.spec import DECOMPOSITION

logger = logging.getLogger(__name__)

NAME = "terms"  # a share's view names its page
PATH = "/terms"
TITLE = "Terms"
NAV_ORDER = 1
GRAPHS = [
    "terms-curves-graph",
    "terms-strip-graph",
    "terms-token-graph",
    "terms-heads-graph",
    "terms-compare-graph",
]


def terms_request(*, text: str, model: str, drop_special: bool, dtype: str) -> dict[str, Any]:
    return {
        "model": model,
        "text": text,
        "analyses": [DECOMPOSITION],
        "options": {"drop_special": bool(drop_special), "dtype": dtype or "float32"},
    }


def layout(
    store: ResultStore, query: dict[str, str], share: dict[str, Any] | None = None
) -> html.Div:
    from workers.data import demo_text

    options, default_model, _ = model_options(store)
    source, request, view = restore_view(store, query, share, keys=("compare", "token", "state"))
    source_b = None
    if view.get("compare"):
        source_b = {"kind": "analysis", "id": view["compare"]}
    opts = request.get("options") or {}
    model_b = (store.status(source_b).get("request") or {}).get("model") if source_b else None
    model, url_msg = url_model(query, options, default_model, view="the term importance")
    return html.Div(
        className="page",
        id="terms-page",
        children=[
            page_header(NAME, TITLE),
            html.Div(
                className="controls",
                children=[
                    dcc.Textarea(
                        id="terms-text",
                        value=request.get("text") or query.get("text") or demo_text(),
                        className="text-input",
                    ),
                    html.Div(
                        className="control-row",
                        children=[
                            html.Label("model", htmlFor="terms-model"),
                            dcc.Dropdown(
                                id="terms-model",
                                options=options,
                                value=request.get("model") or model,
                                clearable=False,
                                className="model-picker",
                            ),
                            html.Label("compare with", htmlFor="terms-model-b"),
                            dcc.Dropdown(
                                id="terms-model-b",
                                options=options,
                                value=model_b,
                                placeholder="no second model",
                                className="model-picker",
                            ),
                            dcc.Checklist(
                                id="terms-options",
                                options=[
                                    {
                                        "label": " leave special tokens out of the means",
                                        "value": "drop_special",
                                    }
                                ],
                                value=["drop_special"] if opts.get("drop_special") else [],
                                inline=True,
                            ),
                            dcc.RadioItems(
                                id="terms-dtype",
                                options=["float32", "float64"],
                                value=opts.get("dtype", "float32"),
                                inline=True,
                            ),
                            html.Button("Analyze", id="terms-analyze", className="button primary"),
                        ],
                    ),
                    None if request else url_msg,
                    html.Div(id="terms-error", className="error"),
                    progress_block("terms", running=source is not None),
                ],
            ),
            export_bar("terms", GRAPHS),
            html.Div(
                className="panel",
                children=[
                    html.P(
                        "μ(e, t) = eᵀt / |e|² per token; the four terms sum to 1. Curves: mean ± sd over "
                        "tokens at each state (state 0 = embedding output).",
                        className="hint",
                    ),
                    graph("terms-curves-graph", figure=empty_figure("Press Analyze.")),
                ],
            ),
            html.Div(
                className="panel",
                children=[
                    html.Div(
                        className="control-row",
                        children=[
                            html.Span("state:", className="label"),
                            html.Div(
                                dcc.Slider(
                                    id="terms-state",
                                    min=0,
                                    max=6,
                                    step=1,
                                    value=int_or_none(view.get("state")),
                                ),
                                style={"flex": "1"},
                            ),
                        ],
                    ),
                    graph("terms-strip-graph", figure=empty_figure("", height=200)),
                    html.Div(
                        className="row",
                        children=[
                            html.Div(
                                className="col",
                                children=graph(
                                    "terms-token-graph",
                                    figure=empty_figure("Click a token above for its curves."),
                                ),
                            ),
                            html.Div(
                                className="col",
                                children=graph("terms-heads-graph", figure=empty_figure("")),
                            ),
                        ],
                    ),
                ],
            ),
            html.Div(
                className="panel",
                children=[
                    graph(
                        "terms-compare-graph",
                        figure=empty_figure(
                            "Pick a second model and press Analyze to compare (Spearman's ρ per state).",
                            height=200,
                        ),
                    )
                ],
            ),
            dcc.Store(id="terms-source", data=source),
            dcc.Store(id="terms-source-b", data=source_b),
            dcc.Store(id="terms-token", data=int_or_none(view.get("token"))),
            *highlight_stores("terms", ["terms-strip-graph"]),
        ],
    )


def _figures(result: dict[str, Any], token: int | None, state: int | None) -> list[Any]:
    figs = [T.term_curves_figure(result), T.token_strip_figure(result, state=state)]
    if token is not None:
        figs.append(T.token_curves_figure(result, token=token))
    figs.append(T.head_contributions_figure(result, state=state, token=token))
    return figs


def register(app: Dash, store: ResultStore) -> None:
    client = store.client
    register_poll(app, store, "terms", ["terms-source", "terms-source-b"])
    register_highlight(app, "terms", ["terms-strip-graph"])

    @app.callback(
        Output("terms-source", "data"),
        Output("terms-source-b", "data"),
        Output("terms-token", "data", allow_duplicate=True),
        Output("terms-error", "children"),
        Input("terms-analyze", "n_clicks"),
        State("terms-text", "value"),
        State("terms-model", "value"),
        State("terms-model-b", "value"),
        State("terms-options", "value"),
        State("terms-dtype", "value"),
        prevent_initial_call=True,
    )
    def _submit(_n, text, model, model_b, flags, dtype):  # type: ignore[no-untyped-def]
        base = {"text": text or "", "drop_special": "drop_special" in (flags or []), "dtype": dtype}
        try:
            req = terms_request(model=model, **base)
            a = {"kind": "analysis", "id": client.submit_analysis(**req)["id"], "request": req}
            b = None
            if model_b:
                req_b = terms_request(model=model_b, **base)
                b = {
                    "kind": "analysis",
                    "id": client.submit_analysis(**req_b)["id"],
                    "request": req_b,
                }
        except ApiError as exc:
            return no_update, no_update, no_update, str(exc)
        return a, b, None, ""

    @app.callback(
        Output("terms-curves-graph", "figure"),
        Output("terms-compare-graph", "figure"),
        Output("terms-state", "max"),
        Output("terms-state", "marks"),
        Output("terms-state", "value"),
        Input("terms-job", "data"),
        State("terms-source", "data"),
        State("terms-source-b", "data"),
        State("terms-state", "value"),
    )
    def _curves(_job, source, source_b, state):  # type: ignore[no-untyped-def]
        st = store.status(source)
        result = st["result"]
        if not result.get(DECOMPOSITION):
            msg = {"none": "Press Analyze.", "failed": f"failed: {st.get('error')}"}.get(
                st["status"], "Computing the decomposition…"
            )
            return empty_figure(msg), no_update, no_update, no_update, no_update
        n_states = len(result[DECOMPOSITION]["mean"])
        marks = {i: str(i) for i in range(n_states)}
        if source_b:
            st_b = store.status(source_b)
            if st_b["status"] == "failed":
                compare = empty_figure(f"second model failed: {st_b.get('error')}")
            elif st_b["result"].get(DECOMPOSITION):
                compare = T.model_compare_figure(result, st_b["result"])
            else:
                compare = empty_figure("Computing the second model…")
        else:
            compare = empty_figure(
                "Pick a second model and press Analyze to compare (Spearman's ρ per state).",
                height=200,
            )
        value = n_states - 1 if state is None or not 0 <= state < n_states else no_update
        return T.term_curves_figure(result), compare, n_states - 1, marks, value

    @app.callback(
        Output("terms-token", "data"),
        Input("terms-strip-graph", "clickData"),
        prevent_initial_call=True,
    )
    def _pick_token(click):  # type: ignore[no-untyped-def]
        token = T.clicked_token(click)
        return no_update if token is None else token

    @app.callback(
        Output("terms-strip-graph", "figure"),
        Output("terms-token-graph", "figure"),
        Output("terms-heads-graph", "figure"),
        Input("terms-job", "data"),
        Input("terms-token", "data"),
        Input("terms-state", "value"),
        State("terms-source", "data"),
    )
    def _details(_job, token, state, source):  # type: ignore[no-untyped-def]
        result = store.status(source)["result"]
        if not result.get(DECOMPOSITION):
            return (
                empty_figure("", height=200),
                empty_figure("Click a token above for its curves."),
                empty_figure(""),
            )
        token_fig = (
            T.token_curves_figure(result, token=token)
            if token is not None
            else empty_figure("Click a token above for its curves.")
        )
        return (
            T.token_strip_figure(result, state=state),
            token_fig,
            T.head_contributions_figure(result, state=state, token=token),
        )

    register_view(
        app,
        client,
        PageView(
            name=NAME,
            prefix="terms",
            path=PATH,
            source="terms-source",
            inputs=(("terms-source-b", "data"), ("terms-token", "data"), ("terms-state", "value")),
            view=lambda source_b, token, state: {
                "compare": (source_b or {}).get("id"),
                "token": token,
                "state": state,
            },
        ),
    )

    register_exports(
        app,
        store,
        "terms",
        source="terms-source",
        graphs=GRAPHS,
        figures=_figures,
        view_states=[State("terms-token", "data"), State("terms-state", "value")],
        title="headscope — term importance",
    )
