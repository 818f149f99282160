"""Word lists: t-SNE of the multi-token embeddings of a pasted list (thesis Def. 4.1).

URL state: ``/words?analysis=<id>`` (or a share) plus ``state`` and ``rescale`` (1/0).
"""

from __future__ import annotations

import logging
from typing import Any

from dash import Dash, Input, Output, State, dcc, html, no_update

from frontend.figures.base import empty_figure
from frontend.figures.tsne import words_tsne_figure
from frontend.kit.api_client import ApiError
from frontend.kit.data import ResultStore, int_or_none
from frontend.kit.frontdoor import page_header
from frontend.kit.page import (
    PageView,
    export_bar,
    graph,
    model_options,
    progress_block,
    register_exports,
    register_poll,
    register_view,
    restore_view,
)
from workers.analyses.tsne.spec import WORD_TSNE

logger = logging.getLogger(__name__)

NAME = "words"  # a share's view names its page
PATH = "/words"
TITLE = "Word lists"
NAV_ORDER = 2
GRAPHS = ["words-tsne-graph"]
DEMO_WORDS = """cat
dog
horse
elephant
giraffe
red
green
blue
yellow
purple
Paris
Berlin
Tokyo
New York
Buenos Aires
apple pie
ice cream
chocolate cake
strawberry jam
fresh bread
one
two
three
twenty-five
a hundred"""


def words_request(*, text: str, model: str) -> dict[str, Any]:
    return {"model": model, "text": text, "analyses": [WORD_TSNE], "options": {"layer": "all"}}


def layout(
    store: ResultStore, query: dict[str, str], share: dict[str, Any] | None = None
) -> html.Div:
    options, default_model, info = model_options(store)
    source, request, view = restore_view(store, query, share, keys=("state", "rescale"))
    model = request.get("model") or default_model
    n_states = int((info.get(model) or {}).get("n_layers") or 6) + 1
    state = int_or_none(view.get("state"))
    rescale = str(view.get("rescale", "1")) not in ("0", "false", "False")
    return html.Div(
        className="page",
        id="words-page",
        children=[
            page_header(NAME, TITLE),
            html.Div(
                className="controls",
                children=[
                    html.P(
                        "One item per line (or one comma-separated line). Each item's embedding is the "
                        "[CLS] / first-token state (last token for GPT-2) at each state.",
                        className="hint",
                    ),
                    dcc.Textarea(
                        id="words-input",
                        value=request.get("text") or DEMO_WORDS,
                        className="text-input",
                        style={"minHeight": "160px"},
                    ),
                    html.Div(
                        className="control-row",
                        children=[
                            html.Label("model", htmlFor="words-model"),
                            dcc.Dropdown(
                                id="words-model",
                                options=options,
                                value=model,
                                clearable=False,
                                className="model-picker",
                            ),
                            html.Button("Analyze", id="words-analyze", className="button primary"),
                        ],
                    ),
                    html.Div(id="words-error", className="error"),
                    progress_block("words", running=source is not None),
                ],
            ),
            export_bar("words", GRAPHS),
            html.Div(
                className="panel",
                children=[
                    html.Div(
                        className="control-row",
                        children=[
                            html.Span("state:", className="label"),
                            html.Div(
                                dcc.Slider(
                                    id="words-state",
                                    min=0,
                                    max=n_states - 1,
                                    step=1,
                                    value=n_states - 1 if state is None else state,
                                    marks={i: str(i) for i in range(n_states)},
                                ),
                                style={"flex": "1"},
                            ),
                            dcc.Checklist(
                                id="words-view-options",
                                options=[
                                    {
                                        "label": " quantile-equidistant axes (ticks in original units)",
                                        "value": "rescale",
                                    }
                                ],
                                value=["rescale"] if rescale else [],
                                inline=True,
                            ),
                        ],
                    ),
                    graph("words-tsne-graph", figure=empty_figure("Press Analyze.")),
                ],
            ),
            dcc.Store(id="words-source", data=source),
        ],
    )


def _figures(result: dict[str, Any], state: int | None, view_opts: list[str] | None) -> list[Any]:
    return [
        words_tsne_figure(result, state=int(state or 0), rescale="rescale" in (view_opts or []))
    ]


def register(app: Dash, store: ResultStore) -> None:
    client = store.client
    register_poll(app, store, "words", ["words-source"])

    @app.callback(
        Output("words-source", "data"),
        Output("words-error", "children"),
        Input("words-analyze", "n_clicks"),
        State("words-input", "value"),
        State("words-model", "value"),
        prevent_initial_call=True,
    )
    def _submit(_n, text, model):  # type: ignore[no-untyped-def]
        req = words_request(text=text or "", model=model)
        try:
            job = client.submit_analysis(**req)
        except ApiError as exc:
            return no_update, str(exc)
        return {"kind": "analysis", "id": job["id"], "request": req}, ""

    @app.callback(
        Output("words-tsne-graph", "figure"),
        Output("words-state", "max"),
        Output("words-state", "marks"),
        Input("words-job", "data"),
        Input("words-state", "value"),
        Input("words-view-options", "value"),
        State("words-source", "data"),
    )
    def _render(_job, state, view_opts, source):  # type: ignore[no-untyped-def]
        st = store.status(source)
        sec = st["result"].get(WORD_TSNE)
        if not sec:
            msg = {"none": "Press Analyze.", "failed": f"failed: {st.get('error')}"}.get(
                st["status"], "Computing the word-list t-SNE…"
            )
            return empty_figure(msg), no_update, no_update
        states = list(sec.get("layers") or [0])
        state = state if state in states else states[-1]
        fig = words_tsne_figure(st["result"], state=state, rescale="rescale" in (view_opts or []))
        return fig, max(states), {i: str(i) for i in states}

    register_view(
        app,
        client,
        PageView(
            name=NAME,
            prefix="words",
            path=PATH,
            source="words-source",
            inputs=(("words-state", "value"), ("words-view-options", "value")),
            view=lambda state, view_opts: {
                "state": state,
                "rescale": "rescale" in (view_opts or []),
            },
        ),
    )

    register_exports(
        app,
        store,
        "words",
        source="words-source",
        graphs=GRAPHS,
        figures=_figures,
        view_states=[State("words-state", "value"), State("words-view-options", "value")],
        title="headscope — word list t-SNE",
    )
