"""Text explorer (home page): max-attention heatmaps of all layers and the head view.

URL state: ``/?analysis=<id>`` or ``/?share=<id>``, plus ``layer``, ``head``, ``rescale`` (1/0),
``reduction`` (max/mean), ``layers`` (the layers shown, comma-separated), ``gpage`` (the gallery
page), ``hv_heads`` and ``threshold`` (the head view). Analyze sends one request holding max
attention, the selected head's t-SNE (with its attention matrix), every head's t-SNE
(``all_heads``: the gallery, with every head's attention) and the standard t-SNE of every state,
so switching heads and share links need nothing more from the service (``pages/text/heads.py``).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from dash import ClientsideFunction, Dash, Input, Output, State, ctx, dcc, html, no_update

from frontend.figures.attention import (
    attention_matrix_figure,
    max_attention_figure,
    max_attention_spec,
    typed_arrays,
)
from frontend.figures.base import EMPTY_PX, empty_figure
from frontend.figures.tsne import head_tsne_figure, hidden_tsne_figure, kl_summary
from frontend.kit.api_client import ApiError
from frontend.kit.atlas_labels import Labels, atlas_labels
from frontend.kit.data import Built, ResultStore, int_list, int_or_none
from frontend.kit.forms import url_model
from frontend.kit.frontdoor import page_header
from frontend.kit.glossary import term
from frontend.kit.heads import has_head, head_view_key, section_layers, waiting
from frontend.kit.page import (
    FAST_POLL_MS,
    PageView,
    export_bar,
    fold,
    graph,
    highlight_stores,
    licence_link,
    model_options,
    progress_block,
    register_exports,
    register_highlight,
    register_poll,
    register_view,
)
from frontend.pages.text import heads, limits
from workers.analyses.attention.spec import MAX_ATTENTION
from workers.analyses.tsne.spec import HEAD_TSNE, HIDDEN_TSNE

logger = logging.getLogger(__name__)

NAME = "text"  # a share's view names its page
PATH = "/text"  # and "/" with a query: the links made before the start page (frontend/app.py)
TITLE = "Text explorer"
NAV_ORDER = 0
GRAPHS = ["max-attention-graph", "head-tsne-graph", "hidden-tsne-graph", "attention-matrix-graph"]
EXPORTED = [
    *GRAPHS,
    *heads.GRAPHS,
]  # the gallery is not in GRAPHS: rings in 72 panels cost a hover


def text_request(
    *,
    text: str,
    model: str,
    drop_special: bool,
    restarts: int,
    layer: int | None,
    head: int | None,
    chat: bool = False,
    truncate: bool = False,
) -> dict[str, Any]:
    """The API request of the view: max attention, the selected head (layer 0, head 0 when none is)
    first, then every head (the gallery) and the hidden states of every layer. ``chat``: the text
    as a user message in the model's chat template; ``truncate``: a text past the model's limit cut
    to it (``text/limits.py``); each sent only when on, so older links keep their id."""
    options: dict[str, Any] = {
        "drop_special": bool(drop_special),
        "restarts": int(restarts or 1),
        "layer": int(layer or 0),
        "head": int(head or 0),
        "all_heads": True,
        "hidden_layer": "all",
    }
    if chat:
        options["chat"] = True
    if truncate:
        options["truncate"] = True
    analyses = [MAX_ATTENTION, HEAD_TSNE, HIDDEN_TSNE]
    return {
        "model": model,
        "text": limits.cut(text, truncate),
        "analyses": analyses,
        "options": options,
    }


def layout(
    store: ResultStore, query: dict[str, str], share: dict[str, Any] | None = None
) -> html.Div:
    """The page, filled in from the URL (and the share, when the URL names one)."""
    from workers.data import demo_text

    options, default_model, info = model_options(store)
    source: dict[str, Any] | None = None
    stored = share is not None  # a finished result: the page polls it once, at load
    request: dict[str, Any] | None = None
    view: dict[str, Any] = {}
    error = ""
    if share is not None:
        source = {"kind": "share", "id": share["id"]}
        request, view = share.get("request") or {}, dict(share.get("view") or {})
    elif query.get("analysis"):
        source = {"kind": "analysis", "id": query["analysis"]}
        st = store.opening_analysis(source["id"])  # no result read: it is read ahead meanwhile
        request = st.get("request")
        if st["status"] == "failed":
            error = st.get("error") or ""
        stored = st["status"] in ("finished", "failed")
        source["request"] = request
    for key in (
        "layer",
        "head",
        "rescale",
        "reduction",
        "layers",
        "gpage",
        "hv_heads",
        "threshold",
    ):
        if key in query:
            view[key] = query[key]
    opts = (request or {}).get("options") or {}
    layer = int_or_none(view.get("layer", opts.get("layer")))
    head = int_or_none(view.get("head", opts.get("head")))
    rescale = str(view.get("rescale", "1")) not in ("0", "false", "False")
    reduction = view.get("reduction") if view.get("reduction") in ("max", "mean") else "max"
    layers = view.get("layers")
    layers = int_list(layers) if isinstance(layers, str) else layers
    text = (request or {}).get("text") or query.get("text") or demo_text()
    model, url_msg = url_model(query, options, default_model, view="the text explorer")
    model = (request or {}).get("model") or model
    facts = info.get(model) or {}
    n_layers, n_heads = int(facts.get("n_layers") or 6), int(facts.get("n_heads") or 12)
    running = source is not None and not stored
    heads_state = heads.view_state(view, layer=layer, head=head)

    controls = html.Div(
        className="controls",
        children=[
            dcc.Textarea(
                id="text-input",
                value=text,
                className="text-input",
                placeholder="Paste a text (up to the model's token limit)",
            ),
            html.Div(
                className="control-row",
                children=[
                    html.Label("model", htmlFor="text-model"),
                    dcc.Dropdown(
                        id="text-model",
                        options=options,
                        value=model,
                        clearable=False,
                        className="model-picker",
                    ),
                    html.Span(
                        id="text-model-licence", className="hint", children=licence_link(facts)
                    ),
                    dcc.Checklist(
                        id="text-options",
                        options=[
                            {"label": " hide special tokens", "value": "drop_special"},
                            {
                                "label": " chat message",
                                "value": "chat",
                                "title": "wrap the text in the model's chat template as a user message (decoders with a template, "
                                "e.g. smollm2); the template's tokens count as special",
                            },
                            {
                                "label": " truncate to the model's limit",
                                "value": "truncate",
                                "title": "keep the text's first tokens up to the model's limit (and "
                                "its first 20,000 characters) instead of refusing a longer text, "
                                "as headscope analyze --truncate",
                            },
                        ],
                        value=[k for k in ("drop_special", "chat", "truncate") if opts.get(k)],
                        inline=True,
                    ),
                    html.Label("best of k restarts", htmlFor="text-restarts"),
                    dcc.Input(
                        id="text-restarts",
                        type="number",
                        min=1,
                        max=20,
                        step=1,
                        value=int(opts.get("restarts", 1)),
                        className="small-input",
                    ),
                    html.Button("Analyze", id="analyze-button", className="button primary"),
                ],
            ),
            url_msg if request is None else None,
            html.Div(
                className="error-row",
                children=[
                    html.Div(id="text-error", className="error", children=error),
                    html.Button(
                        "Truncate to the model's limit and analyze",
                        id=limits.OFFER,
                        className="button",
                        style=limits.offer_style(error),
                    ),
                ],
            ),
            progress_block("text", running=running, interval_ms=FAST_POLL_MS, sections=True),
        ],
    )
    heatmaps = fold(
        "Max attention of every head",
        fid="text-fold-heatmaps",
        children=[
            html.Div(
                className="control-row",
                children=[
                    html.Span("reduction:", className="label"),
                    dcc.RadioItems(
                        id="text-reduction",
                        options=[
                            {"label": "max over queries (Def. 4.2)", "value": "max"},
                            {"label": "mean over queries", "value": "mean"},
                        ],
                        value=reduction,
                        inline=True,
                    ),
                    html.Span("layers shown:", className="label"),
                    dcc.Dropdown(
                        id="text-layers",
                        options=[{"label": f"layer {i}", "value": i} for i in range(n_layers)],
                        value=layers,
                        multi=True,
                        placeholder="all layers",
                        className="layers-picker",
                    ),
                ],
            ),
            graph("max-attention-graph", figure=empty_figure("Press Analyze.", height=EMPTY_PX)),
        ],
    )
    gallery = heads.gallery_panel(heads_state)
    head_view = fold(
        "The open head: its map, the hidden states' map, its attention",
        fid="text-fold-head",
        children=[
            html.Div(
                className="control-row",
                children=[
                    html.Span("open head:", className="label"),
                    dcc.Dropdown(
                        id="text-layer",
                        options=[{"label": f"layer {i}", "value": i} for i in range(n_layers)],
                        value=layer,
                        placeholder="layer",
                        className="small-picker",
                    ),
                    dcc.Dropdown(
                        id="text-head",
                        options=[{"label": f"head {i}", "value": i} for i in range(n_heads)],
                        value=head,
                        placeholder="head",
                        className="small-picker",
                    ),
                    dcc.Checklist(
                        id="text-view-options",
                        options=[
                            {
                                "label": html.Span(
                                    [
                                        " ",
                                        term("qer", "quantile-equidistant axes"),
                                        " (ticks in original units)",
                                    ]
                                ),
                                "value": "rescale",
                            }
                        ],
                        value=["rescale"] if rescale else [],
                        inline=True,
                    ),
                ],
            ),
            html.Div(id="text-kl", className="kl"),
            html.Div(
                className="row",
                children=[
                    html.Div(
                        className="col",
                        children=graph(
                            "head-tsne-graph",
                            figure=empty_figure(
                                "Click a panel of the gallery or a cell of the heatmaps to open that head.",
                                height=EMPTY_PX,
                            ),
                        ),
                    ),
                    html.Div(
                        className="col",
                        children=graph(
                            "hidden-tsne-graph",
                            figure=empty_figure(
                                "The standard t-SNE of the same layer's hidden states appears here.",
                                height=EMPTY_PX,
                            ),
                        ),
                    ),
                ],
            ),
            graph(
                "attention-matrix-graph",
                figure=empty_figure("The head's attention matrix appears here.", height=EMPTY_PX),
            ),
        ],
    )
    return html.Div(
        className="page",
        id="text-page",
        children=[
            page_header(NAME, TITLE),
            controls,
            export_bar("text", EXPORTED),
            heatmaps,
            gallery,
            head_view,
            heads.lines_panel(heads_state, n_heads),
            dcc.Store(id="text-source", data=source),
            dcc.Store(id="text-job-late"),  # text-job-sections, a stored result's after its gallery
            dcc.Store(id="text-heatmap-key"),
            dcc.Store(id="text-head-view-key"),
            *highlight_stores("text", GRAPHS),
        ],
    )


def _figures(
    result: dict[str, Any],
    layer: int | None,
    head: int | None,
    view_opts: list[str] | None,
    reduction: str | None,
    layers: list[int] | None,
    gpage: Any = 0,
    hv_heads: Any = None,
    threshold: Any = heads.DEFAULT_THRESHOLD,
    labels: Labels | None = None,
) -> list[Any]:
    figs = [max_attention_figure(result, reduction=reduction or "max", layers=layers or None)]
    if layer is not None and head is not None:
        rescale = "rescale" in (view_opts or [])
        figs += [
            head_tsne_figure(result, layer=layer, head=head, rescale=rescale),
            hidden_tsne_figure(result, state=layer + 1, rescale=rescale),
            attention_matrix_figure(result, layer=layer, head=head),
        ]
    state = heads.view_state(
        {"gpage": gpage, "hv_heads": hv_heads, "threshold": threshold}, layer=layer, head=head
    )
    return figs + heads.figures(
        result,
        layer=layer,
        head=head,
        layers=layers,
        gpage=state["gpage"],
        hv_heads=state["hv_heads"],
        threshold=state["threshold"],
        labels=labels,
    )


def register(app: Dash, store: ResultStore) -> None:
    """The page's callbacks."""
    client = store.client
    heatmaps = Built()
    register_poll(app, store, "text", ["text-source"], sections=True)
    register_highlight(app, "text", GRAPHS)
    heads.register(app, store)

    @app.callback(
        Output("text-source", "data"),
        Output("text-error", "children"),
        Output(limits.OFFER, "style"),
        Output("text-options", "value"),
        Input("analyze-button", "n_clicks"),
        Input(limits.OFFER, "n_clicks"),
        Input("text-selected", "data"),
        State("text-input", "value"),
        State("text-model", "value"),
        State("text-options", "value"),
        State("text-restarts", "value"),
        State("text-source", "data"),
        prevent_initial_call=True,
    )
    def _submit(*args):  # type: ignore[no-untyped-def]
        source, message = _submitted(*args)
        flags = args[5] or []
        if ctx.triggered_id == limits.OFFER and "truncate" not in flags:
            flags = [*flags, "truncate"]  # the offer taken: the option ticked, as if by hand
        else:
            flags = no_update
        return source, message, limits.offer_style(message), flags

    def _submitted(_n, offer, selected, text, model, flags, restarts, source):  # type: ignore[no-untyped-def]
        trig = ctx.triggered_id
        if trig == limits.OFFER:
            trig, flags = "analyze-button", [*(flags or []), "truncate"]
        previous = (source or {}).get("request")
        layer, head = (selected or {}).get("layer"), (selected or {}).get("head")
        if trig != "analyze-button":
            st = store.status(source)
            # the head is in the result (or will be: the gallery is still computing): nothing to ask
            if (
                layer is None
                or head is None
                or has_head(st["result"], layer, head)
                or (
                    st["status"] not in ("finished", "failed", "none")
                    and ((previous or {}).get("options") or {}).get("all_heads")
                )
            ):
                return no_update, ""
        if trig == "analyze-button" or previous is None:
            base = {
                "text": text or "",
                "model": model,
                "drop_special": "drop_special" in (flags or []),
                "restarts": restarts or 1,
                "chat": "chat" in (flags or []),
                "truncate": "truncate" in (flags or []),
            }
            too_long = None if base["truncate"] else limits.too_many_characters(base["text"])
            if too_long:  # the API would refuse it: say so, with the way on
                return no_update, too_long
        else:
            o = previous.get("options") or {}
            base = {
                "text": previous["text"],
                "model": previous["model"],
                "drop_special": bool(o.get("drop_special")),
                "restarts": o.get("restarts", 1),
                "chat": bool(o.get("chat")),
                "truncate": bool(o.get("truncate")),
            }
        req = text_request(layer=layer, head=head, **base)  # an older result without this head
        try:
            job = client.submit_analysis(**req)
        except ApiError as exc:
            return no_update, str(exc)
        return {"kind": "analysis", "id": job["id"], "request": req}, ""

    @app.callback(
        Output("text-layer", "options"),
        Output("text-head", "options"),
        Output("text-layers", "options"),
        Output("text-model-licence", "children"),
        Input("text-model", "value"),
        prevent_initial_call=True,
    )
    def _model_shape(model):  # type: ignore[no-untyped-def]
        facts = model_options(store)[2].get(model) or {}
        n_layers, n_heads = int(facts.get("n_layers") or 6), int(facts.get("n_heads") or 12)
        layers = [{"label": f"layer {i}", "value": i} for i in range(n_layers)]
        return (
            layers,
            [{"label": f"head {i}", "value": i} for i in range(n_heads)],
            layers,
            licence_link(facts),
        )

    @app.callback(
        Output("max-attention-graph", "figure"),
        Output("text-heatmap-key", "data"),
        Input("text-job-late", "data"),
        Input("text-reduction", "value"),
        Input("text-layers", "value"),
        State("text-source", "data"),
        State("text-heatmap-key", "data"),
    )
    def _heatmaps(job, reduction, layers, source, shown_key):  # type: ignore[no-untyped-def]
        if waiting(job, source):
            return no_update, no_update
        st = store.status(source, seen=job)
        result = st["result"]
        if not result.get(MAX_ATTENTION):
            msg = {"none": "Press Analyze.", "failed": "No result."}.get(
                st["status"], "Computing maximum attention…"
            )
            return empty_figure(msg, height=EMPTY_PX), None
        req = st.get("request") or {}
        key = [
            req.get("model"),
            req.get("text"),
            (req.get("options") or {}).get("drop_special"),
            (req.get("options") or {}).get("chat"),
            result.get("tokens") is not None,
            reduction,
            layers,
        ]
        if (
            key == shown_key and req
        ):  # same heatmaps as already drawn (e.g. a new head of the same text)
            return no_update, no_update
        fig = heatmaps.get(json.dumps([source.get("kind"), source.get("id"), key]), lambda: typed_arrays(
            max_attention_spec(result, reduction=reduction or "max", layers=layers or None)))  # fmt: skip
        return fig, key

    @app.callback(  # the large map is drawn in the browser (text/heads.py: drawHead)
        Output("hidden-tsne-graph", "figure"),
        Output("attention-matrix-graph", "figure"),
        Output("text-kl", "children"),
        Output("text-head-view-key", "data"),
        Input("text-job-late", "data"),
        Input("text-view-options", "value"),
        Input("text-selected", "data"),
        State("text-source", "data"),
        State("text-head-view-key", "data"),
    )
    def _head_view(job, view_opts, selected, source, shown):  # type: ignore[no-untyped-def]
        if waiting(job, source):
            return no_update, no_update, no_update, no_update
        layer, head = (selected or {}).get("layer"), (selected or {}).get("head")
        rescale = "rescale" in (view_opts or [])
        none = {"status": "none", "result": {}}
        st = store.status(source, seen=job) if layer is not None and head is not None else none
        result = st["result"]
        matrix = head_view_key(source, st, layer=layer, head=head, options=[])
        keys = {
            "matrix": matrix,
            "hidden": [*matrix, rescale, *section_layers(result.get(HIDDEN_TSNE))],
        }
        shown = shown or {}
        if (
            keys == shown
        ):  # a section the view does not show arrived: nothing re-sent, nothing redrawn
            return no_update, no_update, no_update, no_update
        hidden, matrix, kl = no_update, no_update, no_update  # only what changed is built and sent
        new_hidden, new_matrix = (
            keys["hidden"] != shown.get("hidden"),
            keys["matrix"] != shown.get("matrix"),
        )
        if layer is None or head is None or not result.get(HEAD_TSNE):
            msg = (
                ""
                if layer is None or head is None
                else (
                    "Computing the head's t-SNE…"
                    if st["status"] not in ("failed", "none")
                    else "No result."
                )
            )
            if new_hidden:
                hidden, kl = empty_figure(msg, height=EMPTY_PX), ""
            if new_matrix:
                matrix = empty_figure("", height=EMPTY_PX)
        else:
            if new_hidden:
                hidden = hidden_tsne_figure(result, state=layer + 1, rescale=rescale)
                kl = kl_summary(result, layer=layer, head=head)
            if new_matrix:
                matrix = attention_matrix_figure(result, layer=layer, head=head)
        return hidden, matrix, kl, keys

    view = PageView(
        name="text",
        prefix="text",
        path=PATH,
        source="text-source",
        inputs=VIEW_INPUTS,
        view=_view,
        url="browser",
    )
    # the URL is written in the browser (heads.js: viewUrl, the keys of _view): a click's head is
    # in it at once, and no slower server answer can put an older view back
    app.clientside_callback(
        ClientsideFunction(namespace="headscope_heads", function_name="viewUrl"),
        Output("url", "search", allow_duplicate=True),
        Input("text-source", "data"),
        *[Input(c, p) for c, p in VIEW_INPUTS],
        prevent_initial_call=True,
    )
    register_view(app, client, view)

    register_exports(
        app,
        store,
        "text",
        source="text-source",
        graphs=EXPORTED,
        figures=lambda result, *v: _figures(  # the heads named with their atlas labels
            result, *v, labels=atlas_labels(client, result.get("model"))
        ),
        view_states=view.states,
        title="headscope — text explorer",
    )


VIEW_INPUTS = (
    ("text-layer", "value"),
    ("text-head", "value"),
    ("text-view-options", "value"),
    ("text-reduction", "value"),
    ("text-layers", "value"),
    ("text-gallery-page", "value"),
    ("text-hv-heads", "value"),
    ("text-hv-threshold", "value"),
)


def _view(
    layer: Any,
    head: Any,
    view_opts: Any,
    reduction: Any,
    layers: Any,
    gpage: Any = None,
    hv_heads: Any = None,
    threshold: Any = None,
) -> dict[str, Any]:
    return {
        "layer": layer,
        "head": head,
        "rescale": "rescale" in (view_opts or []),
        "reduction": reduction,
        "layers": list(layers) if layers else None,
        "gpage": gpage or None,
        "hv_heads": list(hv_heads) if hv_heads else None,
        "threshold": threshold,
    }
