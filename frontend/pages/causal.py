"""Causal: does this head matter? Predictions, the logit lens, exact logit attribution, ablation and
patching (docs/causal.md) on decoders with a language-model head.

URL state: ``/causal?analysis=<id>`` (or a share) plus ``position`` (the position of the top-k table
and the attribution map) and ``head`` (``L.H``, the clicked head).
"""

from __future__ import annotations

import logging
from typing import Any

from dash import Dash, Input, Output, State, dcc, html, no_update

from frontend.figures import causal as C
from frontend.figures.base import empty_figure
from frontend.kit.api_client import ApiError
from frontend.kit.atlas_labels import Labels, atlas_hint, atlas_labels, head_name
from frontend.kit.data import ResultStore, int_or_none, source_query
from frontend.kit.forms import (
    TARGET_PLACEHOLDER,
    TARGET_STYLE,
    decoder_choices,
    format_target,
    parse_head,
    parse_target,
    url_model,
)
from frontend.kit.frontdoor import page_header
from frontend.kit.page import (
    PageView,
    export_bar,
    graph,
    progress_block,
    register_click_pick,
    register_exports,
    register_poll,
    register_view,
    restore_view,
)
from workers.analyses.causal.spec import (
    ABLATION,
    CONTINUE,
    LOGIT_ATTRIBUTION,
    LOGIT_LENS,
    PATCHING,
    PREDICTIONS,
)
from workers.core.notation import head_label

logger = logging.getLogger(__name__)

NAME = "causal"  # a share's view names its page
PATH = "/causal"
TITLE = "Causal"
NAV_ORDER = 6
GRAPHS = [
    "causal-surprisal-graph",
    "causal-lens-graph",
    "causal-attribution-graph",
    "causal-ablation-graph",
    "causal-patch-residual-graph",
    "causal-patch-heads-graph",
]
HEAD_GRAPHS = ["causal-attribution-graph", "causal-ablation-graph", "causal-patch-heads-graph"]
POSITION_GRAPHS = ["causal-surprisal-graph", "causal-lens-graph", "causal-patch-residual-graph"]
DEMO = "The Eiffel Tower is in the city of"
DEMO_CORRUPTED = "The Colosseum is in the city of"


def causal_request(
    *,
    text: str,
    model: str,
    corrupted: str | None = None,
    k: int = 10,
    target: str | None = None,
    ablation: str = "mean",
    position: int | None = None,
    continue_tokens: int = 0,
    temperature: float = 0.0,
    dtype: str = "float32",
) -> dict[str, Any]:
    """The API request of the page: every causal view, patching when a corrupted text is given,
    the continuation first when ``continue_tokens`` > 0."""
    analyses = [PREDICTIONS, LOGIT_LENS, LOGIT_ATTRIBUTION, ABLATION]
    options: dict[str, Any] = {
        "k": int(k or 10),
        "ablation": ablation or "mean",
        "dtype": dtype or "float32",
    }
    parsed = parse_target(target)
    if parsed is not None:
        options["target"] = parsed
    if position is not None:
        options["position"] = int(position)
    if corrupted and corrupted.strip():
        analyses.append(PATCHING)
        options["corrupted"] = corrupted
    if continue_tokens:
        analyses.insert(0, CONTINUE)
        options.update(continue_tokens=int(continue_tokens), temperature=float(temperature or 0.0))
    return {"model": model, "text": text, "analyses": analyses, "options": options}


def layout(
    store: ResultStore, query: dict[str, str], share: dict[str, Any] | None = None
) -> html.Div:
    options, default_model, hint = decoder_choices(store)
    source, request, view = restore_view(store, query, share, keys=("position", "head"))
    model, url_msg = url_model(query, options, default_model, view="the causal views")
    opts = request.get("options") or {}
    target = format_target(opts.get("target"))
    row = html.Div(
        className="control-row",
        children=[
            html.Label("model", htmlFor="causal-model"),
            dcc.Dropdown(
                id="causal-model",
                options=options,
                value=request.get("model") or model,
                clearable=False,
                className="model-picker",
            ),
            html.Label("top k", htmlFor="causal-k"),
            dcc.Input(
                id="causal-k",
                type="number",
                min=1,
                max=50,
                value=opts.get("k", 10),
                className="small-input",
            ),
            html.Label("target", htmlFor="causal-target"),
            dcc.Input(
                id="causal-target",
                type="text",
                value=target or "",
                debounce=True,
                style=TARGET_STYLE,
                placeholder=TARGET_PLACEHOLDER,
            ),
            html.Label("ablation", htmlFor="causal-ablation"),
            dcc.RadioItems(
                id="causal-ablation",
                options=["mean", "zero"],
                value=opts.get("ablation", "mean"),
                inline=True,
            ),
            html.Label("continue by", htmlFor="causal-continue"),
            dcc.Input(
                id="causal-continue",
                type="number",
                min=0,
                max=64,
                value=opts.get("continue_tokens", 0)
                if CONTINUE in (request.get("analyses") or [])
                else 0,
                className="small-input",
            ),
            html.Label("temperature", htmlFor="causal-temperature"),
            dcc.Input(
                id="causal-temperature",
                type="number",
                min=0,
                max=10,
                step=0.1,
                value=opts.get("temperature", 0.0),
                className="small-input",
            ),
            dcc.RadioItems(
                id="causal-dtype",
                options=["float32", "float64"],
                value=opts.get("dtype", "float32"),
                inline=True,
            ),
            html.Button("Analyze", id="causal-analyze", className="button primary"),
        ],
    )
    return html.Div(
        className="page",
        id="causal-page",
        children=[
            page_header(NAME, TITLE),
            html.Div(
                className="controls",
                children=[
                    html.Div(
                        className="row",
                        children=[
                            html.Div(
                                className="col",
                                children=[
                                    html.Label("clean text", htmlFor="causal-text"),
                                    dcc.Textarea(
                                        id="causal-text",
                                        value=request.get("text") or query.get("text") or DEMO,
                                        className="text-input",
                                    ),
                                ],
                            ),
                            html.Div(
                                className="col",
                                children=[
                                    html.Label(
                                        "corrupted text (same token length; optional, for patching)",
                                        htmlFor="causal-corrupted",
                                    ),
                                    dcc.Textarea(
                                        id="causal-corrupted",
                                        value=opts.get("corrupted") if request else DEMO_CORRUPTED,
                                        className="text-input",
                                    ),
                                ],
                            ),
                        ],
                    ),
                    row,
                    None if request else url_msg,
                    html.P(hint, className="hint", id="causal-models-hint"),
                    html.Div(id="causal-error", className="error"),
                    progress_block("causal", running=source is not None),
                ],
            ),
            export_bar("causal", GRAPHS),
            html.Div(
                className="panel",
                children=[
                    graph(
                        "causal-surprisal-graph", figure=empty_figure("Press Analyze.", height=160)
                    )
                ],
            ),
            html.Div(
                className="row",
                children=[
                    html.Div(
                        className="col panel",
                        children=[
                            html.H4("Top predictions", id="causal-topk-title"),
                            html.Div(id="causal-topk"),
                        ],
                    ),
                    html.Div(
                        className="col panel",
                        children=[
                            html.H4("Head"),
                            html.Div(
                                id="causal-head-info",
                                className="hint",
                                children="Click a head in a map below to open it in the text explorer.",
                            ),
                            html.Div(id="causal-head-link"),
                        ],
                    ),
                ],
            ),
            html.Div(
                className="panel", children=[graph("causal-lens-graph", figure=empty_figure(""))]
            ),
            html.Div(
                className="panel",
                children=[
                    html.P(
                        "Direct logit attribution, exact: each part's contribution to the target's logit with the "
                        "final norm's scale frozen at its value; the parts sum to the logit.",
                        className="hint",
                    ),
                    graph("causal-attribution-graph", figure=empty_figure("")),
                ],
            ),
            html.Div(
                className="panel",
                children=[graph("causal-ablation-graph", figure=empty_figure(""))],
            ),
            html.Div(
                className="panel",
                children=[
                    html.H4("Clean / corrupted"),
                    html.Div(id="causal-pair", className="pair-table"),
                    html.Div(
                        className="row",
                        children=[
                            html.Div(
                                className="col",
                                children=graph(
                                    "causal-patch-residual-graph", figure=empty_figure("")
                                ),
                            ),
                            html.Div(
                                className="col",
                                children=graph("causal-patch-heads-graph", figure=empty_figure("")),
                            ),
                        ],
                    ),
                ],
            ),
            dcc.Store(id="causal-source", data=source),
            dcc.Store(id="causal-position", data=int_or_none(view.get("position"))),
            dcc.Store(id="causal-head", data=parse_head(view.get("head"))),
        ],
    )


def _position(result: dict[str, Any], position: int | None) -> int:
    n = int(result.get("n_tokens") or 1)
    return n - 1 if position is None or not 0 <= position < n else int(position)


def _figures(
    result: dict[str, Any], position: int | None, *_: Any, head_labels: Labels | None = None
) -> list[Any]:
    p = _position(result, position)
    return [
        C.surprisal_figure(result, position=p),
        C.lens_figure(result, position=p),
        C.attribution_figure(result, position=p, head_labels=head_labels),
        C.ablation_figure(result, head_labels=head_labels),
        C.patching_residual_figure(result),
        C.patching_heads_figure(result, head_labels=head_labels),
    ]


def _topk_table(result: dict[str, Any], p: int) -> Any:
    rows = C.top_k_rows(result, position=p)
    if not rows:
        return "No predictions yet."
    head = html.Tr([html.Th("rank"), html.Th("token"), html.Th("p")])
    body = [
        html.Tr(
            [html.Td(r["rank"]), html.Td(r["token"]), html.Td(r["probability"])],
            className="next-token" if r["next"] else "",
            title="the text's own next token" if r["next"] else "",
        )
        for r in rows
    ]
    return html.Table([head, *body], className="topk-table", id="causal-topk-table")


def _pair_table(result: dict[str, Any]) -> Any:
    rows = C.pair_rows(result)
    if not rows:
        return html.P("Give a corrupted text of the same token length to patch.", className="hint")
    return html.Table(
        [
            html.Tr(
                [
                    html.Th("clean"),
                    *[html.Td(a, className="differ" if d else "") for a, _, d in rows],
                ]
            ),
            html.Tr(
                [
                    html.Th("corrupted"),
                    *[html.Td(b, className="differ" if d else "") for _, b, d in rows],
                ]
            ),
        ],
        className="pair-table",
    )


def register(app: Dash, store: ResultStore) -> None:
    client = store.client
    register_poll(app, store, "causal", ["causal-source"])

    @app.callback(
        Output("causal-source", "data"),
        Output("causal-position", "data", allow_duplicate=True),
        Output("causal-error", "children"),
        Input("causal-analyze", "n_clicks"),
        State("causal-text", "value"),
        State("causal-corrupted", "value"),
        State("causal-model", "value"),
        State("causal-k", "value"),
        State("causal-target", "value"),
        State("causal-ablation", "value"),
        State("causal-continue", "value"),
        State("causal-temperature", "value"),
        State("causal-dtype", "value"),
        prevent_initial_call=True,
    )
    def _submit(_n, text, corrupted, model, k, target, ablation, cont, temperature, dtype):  # type: ignore[no-untyped-def]
        try:
            req = causal_request(text=text or "", model=model, corrupted=corrupted, k=k or 10, target=target,
                                 ablation=ablation, continue_tokens=int(cont or 0), temperature=temperature or 0.0,
                                 dtype=dtype)  # fmt: skip
            src = {"kind": "analysis", "id": client.submit_analysis(**req)["id"], "request": req}
        except (ApiError, ValueError) as exc:  # ValueError: the target box (parse_target)
            return no_update, no_update, str(exc)
        return src, None, ""

    register_click_pick(
        app, target="causal-position", graph_ids=POSITION_GRAPHS, parse=C.clicked_position
    )
    register_click_pick(
        app,
        target="causal-head",
        graph_ids=HEAD_GRAPHS,
        parse=lambda click: None if (cell := C.clicked_cell(click)) is None else list(cell),
    )

    @app.callback(
        *[Output(g, "figure") for g in GRAPHS],
        Output("causal-topk", "children"),
        Output("causal-topk-title", "children"),
        Output("causal-pair", "children"),
        Input("causal-job", "data"),
        Input("causal-position", "data"),
        State("causal-source", "data"),
    )
    def _views(_job, position, source):  # type: ignore[no-untyped-def]
        st = store.status(source)
        result = st["result"]
        if not result.get(PREDICTIONS):
            msg = {"none": "Press Analyze.", "failed": f"failed: {st.get('error')}"}.get(
                st["status"], "Computing…"
            )
            blank = [empty_figure(msg, height=160)] + [empty_figure("") for _ in GRAPHS[1:]]
            return (*blank, msg if st["status"] == "failed" else "", "Top predictions", "")
        p = _position(result, position)
        labels = C.labels(result)
        title = f"Top predictions after position {p} ({labels[p]})"
        head_labels = atlas_labels(client, (st.get("request") or {}).get("model"))
        return (
            *_figures(result, p, head_labels=head_labels),
            _topk_table(result, p),
            title,
            _pair_table(result),
        )

    @app.callback(
        Output("causal-head-info", "children"),
        Output("causal-head-link", "children"),
        Input("causal-head", "data"),
        State("causal-source", "data"),
        prevent_initial_call=True,
    )
    def _open_head(head, source):  # type: ignore[no-untyped-def]
        from frontend.pages.text import text_request

        if not head:
            return no_update, no_update
        layer, h = int(head[0]), int(head[1])
        req = store.status(source).get("request") or {}
        result = store.status(source)["result"]
        text = result.get("text") or req.get("text")  # the continued text when there is one
        if not text or not req.get("model"):
            return "Analyze first.", ""
        try:
            tr = text_request(
                text=text, model=req["model"], drop_special=False, restarts=1, layer=layer, head=h
            )
            job = client.submit_analysis(**tr)["id"]
        except ApiError as exc:
            return f"cannot open {head_label(layer, h)}: {exc}", ""
        href = "/" + source_query({"kind": "analysis", "id": job}, {"layer": layer, "head": h})
        labels = atlas_labels(client, req["model"])
        return (
            [f"{head_name(layer, h, labels)}. ", *atlas_hint(req["model"], labels)],
            dcc.Link(
                f"Open {head_label(layer, h)} in the text explorer →",
                href=href,
                id="causal-open-head",
            ),
        )

    register_view(
        app,
        client,
        PageView(
            name=NAME,
            prefix="causal",
            path=PATH,
            source="causal-source",
            inputs=(("causal-position", "data"), ("causal-head", "data")),
            view=lambda position, head: {
                "position": position,
                "head": head_label(*head) if head else None,
            },
        ),
    )

    register_exports(
        app,
        store,
        "causal",
        source="causal-source",
        graphs=GRAPHS,
        figures=_figures,
        view_states=[State("causal-position", "data")],
        title="headscope — causal views",
    )
