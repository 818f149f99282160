"""LasF: what each semantic field of a LasF layer relates in a text (docs/lasf.md, docs/lasf.md).

URL state: ``/lasf?analysis=<id>`` (or a share) plus ``field`` (the open field) and ``token``.
"""

from __future__ import annotations

import logging
from typing import Any

from dash import Dash, Input, Output, State, dcc, html, no_update

from frontend.figures import lasf as F
from frontend.figures.base import empty_figure
from frontend.kit.api_client import ApiError
from frontend.kit.data import ResultStore, int_or_none
from frontend.kit.frontdoor import page_header
from frontend.kit.page import (
    PageView,
    export_bar,
    graph,
    highlight_stores,
    progress_block,
    register_exports,
    register_highlight,
    register_poll,
    register_view,
    restore_view,
)
from workers.analyses.lasf.spec import LASF
from workers.core.contracts import LASF_ABOUT

logger = logging.getLogger(__name__)

NAME = "lasf"  # a share's view names its page
PATH = "/lasf"
TITLE = "LasF"
NAV_ORDER = 4
SHIPPED = "lasf-minilm"
DEMO = "The old farmer in Paris wrote a letter to Alice Smith, and the young teacher painted the green house."
GRAPHS = [
    "lasf-phi-graph",
    "lasf-relation-graph",
    "lasf-field-graph",
    "lasf-tsne-graph",
    "lasf-contribution-graph",
    "lasf-ablation-graph",
    "lasf-head-graph",
]
TOKEN_GRAPHS = [
    "lasf-relation-graph",
    "lasf-field-graph",
    "lasf-tsne-graph",
    "lasf-contribution-graph",
]


def lasf_models(store: ResultStore) -> list[dict[str, str]]:
    """The shipped LasF layers (``lasf-minilm`` first: the default) and every uploaded LasF checkpoint."""
    opts = [
        {"label": f"{name} (shipped: {about})", "value": name} for name, about in LASF_ABOUT.items()
    ]
    try:
        for ck in store.client.checkpoints().get("checkpoints") or []:
            if ck.get("lasf"):
                info = ck["lasf"]
                opts.append(
                    {
                        "label": f"{ck['filename']} ({info.get('mode')}, {ck['id'][:11]})",
                        "value": ck["id"],
                    }
                )
    except ApiError as exc:
        logger.warning("cannot list checkpoints: %s", exc)
    return opts


def lasf_request(*, text: str, model: str, drop_special: bool) -> dict[str, Any]:
    return {
        "model": model,
        "text": text,
        "analyses": [LASF],
        "options": {"drop_special": bool(drop_special)},
    }


def layout(
    store: ResultStore, query: dict[str, str], share: dict[str, Any] | None = None
) -> html.Div:
    source, request, view = restore_view(store, query, share, keys=("field", "token"))
    opts = request.get("options") or {}
    return html.Div(
        className="page",
        id="lasf-page",
        children=[
            page_header(NAME, TITLE),
            html.Div(
                className="controls",
                children=[
                    dcc.Textarea(
                        id="lasf-text", value=request.get("text") or DEMO, className="text-input"
                    ),
                    html.Div(
                        className="control-row",
                        children=[
                            html.Label("LasF model", htmlFor="lasf-model"),
                            dcc.Dropdown(
                                id="lasf-model",
                                options=lasf_models(store),
                                value=request.get("model") or SHIPPED,
                                clearable=False,
                                className="model-picker",
                            ),
                            dcc.Checklist(
                                id="lasf-options",
                                options=[
                                    {"label": " leave special tokens out", "value": "drop_special"}
                                ],
                                value=["drop_special"] if opts.get("drop_special") else [],
                                inline=True,
                            ),
                            html.Button("Analyze", id="lasf-analyze", className="button primary"),
                        ],
                    ),
                    html.Div(id="lasf-error", className="error"),
                    progress_block("lasf", running=source is not None),
                ],
            ),
            export_bar("lasf", GRAPHS),
            html.Div(id="lasf-summary", className="hint"),
            html.Div(
                className="row",
                children=[
                    html.Div(
                        className="col",
                        children=graph("lasf-phi-graph", figure=empty_figure("Press Analyze.")),
                    ),
                    html.Div(
                        className="col", children=graph("lasf-head-graph", figure=empty_figure(""))
                    ),
                ],
            ),
            html.Div(
                className="panel", children=graph("lasf-relation-graph", figure=empty_figure(""))
            ),
            html.Div(
                className="panel",
                children=[
                    html.Div(id="lasf-field-title", className="label"),
                    html.Div(
                        className="row",
                        children=[
                            html.Div(
                                className="col",
                                children=graph(
                                    "lasf-field-graph",
                                    figure=empty_figure(
                                        "Click a row of Φ or a cell of the relation map to open a field."
                                    ),
                                ),
                            ),
                            html.Div(
                                className="col",
                                children=graph("lasf-tsne-graph", figure=empty_figure("")),
                            ),
                        ],
                    ),
                ],
            ),
            html.Div(
                className="row",
                children=[
                    html.Div(
                        className="col",
                        children=graph("lasf-contribution-graph", figure=empty_figure("")),
                    ),
                    html.Div(
                        className="col",
                        children=graph("lasf-ablation-graph", figure=empty_figure("")),
                    ),
                ],
            ),
            html.Div(
                className="panel",
                children=[
                    html.H3(
                        "Do the fields specialise? (generated probe grammar, permutation tests)"
                    ),
                    html.Div(id="lasf-spec-table"),
                ],
            ),
            dcc.Store(id="lasf-source", data=source),
            dcc.Store(id="lasf-field", data=int_or_none(view.get("field"))),
            dcc.Store(id="lasf-token", data=int_or_none(view.get("token"))),
            *highlight_stores("lasf", TOKEN_GRAPHS),
        ],
    )


def spec_table(result: dict[str, Any]) -> Any:
    header, rows, counts = F.specialisation_rows(result)
    if not header:
        return html.Div("No specialisation table yet.", className="hint")
    spec = result[LASF]["specialisation"]
    summary = ", ".join(f"{k}: {v} of {len(rows)} fields" for k, v in counts.items())
    return html.Div(
        [
            html.P(
                f"Fields passing at Bonferroni-corrected {spec['alpha']} (p < {spec['threshold']:.2e}, "
                f"{spec['n_perm']} label shuffles, {spec['n_sentences']} probe sentences): {summary}. "
                f"Effect = mean weight on related token pairs minus the mean on the others.",
                className="hint",
            ),
            html.Table(
                id="lasf-spec",
                className="table",
                children=[
                    html.Thead(html.Tr([html.Th(h) for h in header])),
                    html.Tbody([html.Tr([html.Td(c) for c in row]) for row in rows]),
                ],
            ),
        ]
    )


def register(app: Dash, store: ResultStore) -> None:
    client = store.client
    register_poll(app, store, "lasf", ["lasf-source"])
    register_highlight(app, "lasf", TOKEN_GRAPHS)

    @app.callback(
        Output("lasf-source", "data"),
        Output("lasf-error", "children"),
        Input("lasf-analyze", "n_clicks"),
        State("lasf-text", "value"),
        State("lasf-model", "value"),
        State("lasf-options", "value"),
        prevent_initial_call=True,
    )
    def _submit(_n, text, model, flags):  # type: ignore[no-untyped-def]
        req = lasf_request(
            text=text or "", model=model or SHIPPED, drop_special="drop_special" in (flags or [])
        )
        try:
            return {
                "kind": "analysis",
                "id": client.submit_analysis(**req)["id"],
                "request": req,
            }, ""
        except ApiError as exc:
            return no_update, str(exc)

    @app.callback(
        Output("lasf-field", "data"),
        Output("lasf-token", "data"),
        Input("lasf-phi-graph", "clickData"),
        Input("lasf-relation-graph", "clickData"),
        Input("lasf-contribution-graph", "clickData"),
        Input("lasf-ablation-graph", "clickData"),
        prevent_initial_call=True,
    )
    def _pick(phi, rel, contrib, abl):  # type: ignore[no-untyped-def]
        from dash import ctx

        click = {
            "lasf-phi-graph": phi,
            "lasf-relation-graph": rel,
            "lasf-contribution-graph": contrib,
            "lasf-ablation-graph": abl,
        }.get(ctx.triggered_id)
        field, token = F.clicked_cell(click)
        if ctx.triggered_id in ("lasf-phi-graph", "lasf-ablation-graph"):
            try:
                point = click["points"][0]
                field = int(point["y"] if ctx.triggered_id == "lasf-phi-graph" else point["x"])
            except (TypeError, KeyError, IndexError, ValueError):
                return no_update, no_update
            return field, no_update
        return (no_update, no_update) if field is None else (field, token)

    @app.callback(
        *[Output(g, "figure") for g in GRAPHS],
        Output("lasf-field-title", "children"),
        Output("lasf-summary", "children"),
        Output("lasf-spec-table", "children"),
        Input("lasf-job", "data"),
        Input("lasf-field", "data"),
        State("lasf-source", "data"),
    )
    def _draw(_job, field, source):  # type: ignore[no-untyped-def]
        st = store.status(source)
        result = st["result"]
        if not result.get(LASF):
            msg = {"none": "Press Analyze.", "failed": f"failed: {st.get('error')}"}.get(
                st["status"], "Computing…"
            )
            return (empty_figure(msg), *[empty_figure("") for _ in GRAPHS[1:]], "", "", "")
        sec = result[LASF]
        figs = F.all_figures(result, field)
        if field is None:  # no field open yet: the matrix and map wait for a click
            figs[2] = empty_figure(
                "Click a row of Φ or a cell of the relation map to open a field."
            )
            figs[3] = empty_figure("")
        by_graph = figs  # all_figures follows GRAPHS' order
        m = sec.get("checkpoint_metrics") or {}
        lm = m.get("lasf") or {}
        summary = (
            f"{result.get('model')}: {sec['mode']} mode, {sec['kernel']} kernel, {sec['n_fields']} fields, "
            f"residual {sec['residual']}; R² against MiniLM's own last layer on this text {sec['r2']:.3f}"
            + (
                f"; held-out test R² {lm.get('r2', 0):.3f}, top-1 {lm.get('top1', 0):.3f}, ρ {lm.get('rho', 0):.3f}"
                if lm
                else ""
            )
        )
        title = "" if field is None else f"Field {field}"
        return (*by_graph, title, summary, spec_table(result))

    register_view(
        app,
        client,
        PageView(
            name=NAME,
            prefix="lasf",
            path=PATH,
            source="lasf-source",
            inputs=(("lasf-field", "data"), ("lasf-token", "data")),
            view=lambda field, token: {"field": field, "token": token},
        ),
    )

    register_exports(
        app,
        store,
        "lasf",
        source="lasf-source",
        graphs=GRAPHS,
        figures=lambda result, field: F.all_figures(result, field),
        view_states=[State("lasf-field", "data")],
        title="headscope — LasF fields",
    )
