"""Circuits: which components work together (docs/circuits.md). A clean/corrupted pair gives the circuit
(edge attribution, with the faithfulness curve beside a slider for N) and AtP against real patching;
the clean text alone gives the information-flow graph over its tokens (any model, encoders too).

Two jobs: the flow job (always; the page's source) and the pair job (when a corrupted text is given on a
decoder with a head). URL state: ``/circuits?analysis=<flow job>&pair=<pair job>&n=<N>&head=L.H``; a
share link holds the flow job's share with the pair job's own share in its view (``pair_share``), so
both results are kept.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from dash import ClientsideFunction, Dash, Input, Output, State, dcc, html, no_update

from frontend.figures import circuits as F
from frontend.figures.base import empty_figure, graph_config, standalone_html
from frontend.kit.api_client import ApiError
from frontend.kit.atlas_labels import Labels, atlas_labels
from frontend.kit.data import ResultStore, source_query
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
from frontend.kit.page import export_bar, graph, progress_block, restore_view, share_link
from frontend.pages.causal import causal_request
from workers.analyses.circuits.spec import (
    ATTRIBUTION_PATCHING,
    EDGE_ATTRIBUTION,
    FAITHFUL,
    INFORMATION_FLOW,
)
from workers.core.notation import head_label

logger = logging.getLogger(__name__)

NAME = "circuits"
PATH = "/circuits"
TITLE = "Circuits"
NAV_ORDER = 6  # after /causal
GRAPHS = [
    "circuits-circuit-graph",
    "circuits-curve-graph",
    "circuits-atp-graph",
    "circuits-flow-graph",
]
HEAD_GRAPHS = ["circuits-circuit-graph", "circuits-atp-graph", "circuits-flow-graph"]
DEMO = "When Mary and John went to the store, John gave a drink to"
DEMO_CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"
PAGE_TOP_EDGES = (
    1000  # edges the pair job lists (larger circuits of the curve come with their strongest)
)


def edge_attribution_available() -> bool:
    """Whether this build's registry knows the edge-attribution analysis."""
    from workers.core import registry

    return EDGE_ATTRIBUTION in registry.kinds()


def flow_request(
    *,
    text: str,
    model: str,
    threshold: float | None = None,
    position: int | None = None,
    dtype: str = "float32",
) -> dict[str, Any]:
    """The information-flow job of the clean text (defaults left out, so links keep their id)."""
    options: dict[str, Any] = {"dtype": dtype or "float32"}
    if threshold is not None and float(threshold) != 0.04:
        options["threshold"] = float(threshold)
    if position is not None:
        options["position"] = int(position)
    return {"model": model, "text": text, "analyses": [INFORMATION_FLOW], "options": options}


def top_edges_for(facts: dict[str, Any]) -> int | None:
    """``PAGE_TOP_EDGES``, or a model's every edge when it has fewer (None: its shape is unknown, and
    the job's default applies)."""
    from workers.analyses.circuits.spec import edge_count

    if not facts.get("n_layers") or not facts.get("n_heads"):
        return None
    return min(
        PAGE_TOP_EDGES,
        edge_count(
            int(facts["n_layers"]), int(facts["n_heads"]), bool(facts.get("parallel_residual"))
        ),
    )


def pair_request(
    *,
    text: str,
    corrupted: str,
    model: str,
    target: str | None = None,
    real: bool = True,
    dtype: str = "float32",
    top_edges: int | None = None,
) -> dict[str, Any]:
    """The pair job: attribution patching (with the real head patching beside it when ``real``) and,
    where the build has it, edge attribution listing ``top_edges`` edges."""
    analyses = [ATTRIBUTION_PATCHING] + ([EDGE_ATTRIBUTION] if edge_attribution_available() else [])
    options: dict[str, Any] = {"corrupted": corrupted, "dtype": dtype or "float32"}
    if top_edges is not None and EDGE_ATTRIBUTION in analyses:
        options["top_edges"] = int(top_edges)
    if real:
        options["real"] = True
    parsed = parse_target(target)
    if parsed is not None:
        options["target"] = parsed
    return {"model": model, "text": text, "analyses": analyses, "options": options}


def _pair_source(view: dict[str, Any]) -> dict[str, Any] | None:
    if view.get("pair_share"):
        return {"kind": "share", "id": str(view["pair_share"])}
    if view.get("pair"):
        return {"kind": "analysis", "id": str(view["pair"])}
    return None


def _number(value: Any, default: Any = None) -> Any:
    try:
        return float(value) if value not in (None, "") else default
    except (TypeError, ValueError):
        return default


def layout(
    store: ResultStore, query: dict[str, str], share: dict[str, Any] | None = None
) -> html.Div:
    options, default_model, hint = decoder_choices(store)
    all_models = [
        {k: v for k, v in o.items() if k != "disabled"} for o in options
    ]  # flow: any model
    source, request, view = restore_view(
        store, query, share, keys=("n", "head", "pair", "pair_share", "layout")
    )
    model, url_msg = url_model(query, all_models, default_model, view="the circuit views")
    pair = _pair_source(view)
    pair_req = store.status(pair).get("request") or {} if pair else {}
    opts, popts = request.get("options") or {}, pair_req.get("options") or {}
    target = format_target(popts.get("target")) or (query.get("target") or "" if not source else "")
    row = html.Div(
        className="control-row",
        children=[
            html.Label("model", htmlFor="circuits-model"),
            dcc.Dropdown(
                id="circuits-model",
                options=all_models,
                value=request.get("model") or model,
                clearable=False,
                className="model-picker",
            ),
            html.Label("target", htmlFor="circuits-target"),
            dcc.Input(
                id="circuits-target",
                type="text",
                value=target or "",
                debounce=True,
                style=TARGET_STYLE,
                placeholder=TARGET_PLACEHOLDER.replace(
                    "the next token", "the two texts' top predictions"
                ),
            ),
            dcc.Checklist(
                id="circuits-real",
                options=[{"label": "real patching beside AtP", "value": "real"}],
                value=["real"] if (popts.get("real") or not pair_req) else [],
                inline=True,
            ),
            html.Label("flow threshold τ", htmlFor="circuits-threshold"),
            dcc.Input(
                id="circuits-threshold",
                type="number",
                min=0.001,
                max=0.999,
                step="any",
                value=opts.get("threshold", 0.04),
                className="small-input",
            ),
            html.Label("flow from position", htmlFor="circuits-position"),
            dcc.Input(
                id="circuits-position",
                type="number",
                min=0,
                value=opts.get("position"),
                className="small-input",
                placeholder="last",
            ),
            dcc.RadioItems(
                id="circuits-dtype",
                options=["float32", "float64"],
                value=opts.get("dtype", "float32"),
                inline=True,
            ),
            html.Button("Analyze", id="circuits-analyze", className="button primary"),
            html.Button("Cancel", id="circuits-cancel", className="button secondary"),
        ],
    )
    downloads = html.Div(
        className="control-row",
        children=[
            html.Span("graphs:", className="label"),
            *[
                html.Button(label, id=f"circuits-dl-{key}", className="button secondary")
                for key, label in (
                    ("circuit-json", "circuit JSON"),
                    ("circuit-graphml", "circuit GraphML"),
                    ("flow-json", "flow JSON"),
                    ("flow-graphml", "flow GraphML"),
                )
            ],
            dcc.Download(id="circuits-graph-download"),
        ],
    )
    return html.Div(
        className="page",
        id="circuits-page",
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
                                    html.Label("clean text", htmlFor="circuits-text"),
                                    dcc.Textarea(
                                        id="circuits-text",
                                        value=request.get("text") or query.get("text") or DEMO,
                                        className="text-input",
                                    ),
                                ],
                            ),
                            html.Div(
                                className="col",
                                children=[
                                    html.Label(
                                        "corrupted text (same token length; empty: the flow graph only)",
                                        htmlFor="circuits-corrupted",
                                    ),
                                    dcc.Textarea(
                                        id="circuits-corrupted",
                                        className="text-input",
                                        value=popts.get("corrupted")
                                        if source
                                        else query.get("corrupted") or DEMO_CORRUPTED,
                                    ),
                                ],
                            ),
                        ],
                    ),
                    row,
                    None if request else url_msg,
                    html.P(
                        [
                            hint + " The information-flow graph runs on any model. A circuit on a "
                            "task data set (IOI, capitals, your JSON Lines), scored as MIB scores "
                            "one: ",
                            dcc.Link(
                                "circuit sets", href="/circuits/sets", id="circuits-sets-link"
                            ),
                            ".",
                        ],
                        className="hint",
                    ),
                    html.Div(id="circuits-error", className="error"),
                    html.Div(id="circuits-cancelled", className="hint"),
                    progress_block("circuits", running=source is not None),
                ],
            ),
            export_bar("circuits", GRAPHS),
            downloads,
            html.Div(
                className="panel",
                children=[
                    html.H4("Head"),
                    html.Div(
                        id="circuits-head-info",
                        className="hint",
                        children="Click a head in the circuit, the scatter or the flow graph.",
                    ),
                    html.Div(id="circuits-head-links"),
                ],
            ),
            html.Div(
                className="row",
                children=[
                    html.Div(
                        className="col panel",
                        children=[
                            graph("circuits-circuit-graph", figure=empty_figure("Press Analyze."))
                        ],
                    ),
                    html.Div(
                        className="col panel",
                        children=[
                            graph("circuits-curve-graph", figure=empty_figure("")),
                            html.Label(
                                "circuit size N (edges, the curve's sizes)",
                                htmlFor="circuits-n-slider",
                            ),
                            dcc.Slider(
                                id="circuits-n-slider",
                                min=0,
                                max=0,
                                step=1,
                                value=0,
                                marks={},
                                included=False,
                                allow_direct_input=False,
                            ),
                            html.Div(
                                id="circuits-n-note", className="hint", style={"marginTop": "22px"}
                            ),
                            html.Span("circuit layout:", className="label"),
                            dcc.RadioItems(
                                id="circuits-layout",
                                options=[{"label": v, "value": k} for k, v in F.LAYOUTS.items()],
                                value=view.get("layout")
                                if view.get("layout") in F.LAYOUTS
                                else "head",
                                inline=True,
                            ),
                        ],
                    ),
                ],
            ),
            html.Div(
                className="panel", children=[graph("circuits-atp-graph", figure=empty_figure(""))]
            ),
            html.Div(
                className="panel", children=[graph("circuits-flow-graph", figure=empty_figure(""))]
            ),
            dcc.Store(id="circuits-source", data=source),
            dcc.Store(id="circuits-pair-source", data=pair),
            dcc.Store(id="circuits-n", data=int(_number(view.get("n"), 0)) or None),
            dcc.Store(id="circuits-sizes"),
            dcc.Store(id="circuits-head", data=parse_head(view.get("head"))),
        ],
    )


def _view(
    pair: dict[str, Any] | None, n: int | None, head: list[int] | None, layout: str | None = None
) -> dict[str, Any]:
    key = "pair_share" if pair and pair.get("kind") == "share" else "pair"
    view = {key: (pair or {}).get("id"), "n": n, "head": head_label(*head) if head else None}
    if layout and layout != "head":  # the default left out: links keep their form
        view["layout"] = layout
    return view


def _marks(sizes: list[int]) -> dict[int, str]:
    """Slider marks: every size a stop, a few labelled (the ends among them) so labels never crowd."""
    step = max(1, round(len(sizes) / 6))
    shown = set(range(0, len(sizes), step)) | {len(sizes) - 1}
    return {i: (f"{s:,}" if i in shown else "") for i, s in enumerate(sizes)}


def _n_note(result: dict[str, Any], n: int | None) -> str:
    """Which circuit is shown and why the page opened where it did."""
    opening = F.opening_size(result)
    if opening is None:
        return ""
    n = n or opening
    f = F.faithfulness_at(result, n)
    shown = f"N = {n:,} edges" + (f", faithfulness {f:.3f}" if f is not None else "")
    reached = (F.faithfulness_at(result, opening) or 0.0) >= FAITHFUL
    why = (
        f"the smallest circuit on the curve with faithfulness ≥ {FAITHFUL:g}"
        if reached
        else f"the largest on the curve: none reaches faithfulness {FAITHFUL:g}"
    )
    return (
        f"{shown}: {why}" if n == opening else f"{shown} (the page opens at N = {opening:,}, {why})"
    )


def _figures(
    flow: dict[str, Any],
    pair: dict[str, Any],
    n: int | None,
    layout: str = "head",
    head_labels: Labels | None = None,
) -> list[Any]:
    return [
        F.circuit_figure(pair, n_top=n, layout=layout or "head", head_labels=head_labels),
        F.faithfulness_figure(pair, n_top=n),
        F.atp_scatter_figure(pair, head_labels=head_labels),
        F.flow_figure(flow),
    ]


def register(app: Dash, store: ResultStore) -> None:
    from frontend.kit.page import register_click_pick, register_poll

    client = store.client
    register_poll(app, store, "circuits", ["circuits-source", "circuits-pair-source"])
    _register_exports(app, store)

    @app.callback(
        Output("circuits-source", "data"),
        Output("circuits-pair-source", "data"),
        Output("circuits-n", "data"),
        Output("circuits-error", "children"),
        Input("circuits-analyze", "n_clicks"),
        State("circuits-text", "value"),
        State("circuits-corrupted", "value"),
        State("circuits-model", "value"),
        State("circuits-target", "value"),
        State("circuits-real", "value"),
        State("circuits-threshold", "value"),
        State("circuits-position", "value"),
        State("circuits-dtype", "value"),
        prevent_initial_call=True,
    )
    def _submit(_n, text, corrupted, model, target, real, threshold, position, dtype):  # type: ignore[no-untyped-def]
        pos = _number(position)
        try:
            freq = flow_request(
                text=text or "",
                model=model,
                threshold=_number(threshold, 0.04),
                position=None if pos is None else int(pos),
                dtype=dtype,
            )
            flow = {"kind": "analysis", "id": client.submit_analysis(**freq)["id"], "request": freq}
        except ApiError as exc:
            return no_update, no_update, no_update, str(exc)
        if not (corrupted and corrupted.strip()):
            return flow, None, None, ""
        try:  # the flow graph is drawn even when the pair is refused (an encoder, other lengths)
            facts = next(
                (m for m in store.models().get("models") or [] if m.get("name") == model), {}
            )
            preq = pair_request(
                text=text or "",
                corrupted=corrupted,
                model=model,
                target=target,
                real="real" in (real or []),
                dtype=dtype,
                top_edges=top_edges_for(facts),
            )
            pair = {"kind": "analysis", "id": client.submit_analysis(**preq)["id"], "request": preq}
        except (ApiError, ValueError) as exc:  # ValueError: the target box (parse_target)
            return flow, None, None, f"the pair: {exc}"
        return flow, pair, None, ""

    @app.callback(
        Output("circuits-n-slider", "max"),
        Output("circuits-n-slider", "marks"),
        Output("circuits-n-slider", "value"),
        Output("circuits-sizes", "data"),
        Input("circuits-job", "data"),
        State("circuits-pair-source", "data"),
        State("circuits-n", "data"),
    )
    def _slider(_job, pair, n):  # type: ignore[no-untyped-def]
        # one stop per size of the faithfulness curve (log-spaced: the slider is a log scale), from
        # its smallest to its largest; opened at the smallest faithful one (docs/circuits.md)
        result = store.status(pair)["result"] if pair else {}
        sizes = F.circuit_sizes(result)
        if not sizes:
            return 0, {}, no_update, None
        want = n if n in sizes else F.opening_size(result)
        return len(sizes) - 1, _marks(sizes), sizes.index(want), sizes

    @app.callback(
        Output("circuits-n", "data", allow_duplicate=True),
        Input("circuits-n-slider", "value"),
        State("circuits-sizes", "data"),
        prevent_initial_call=True,
    )
    def _pick_n(index, sizes):  # type: ignore[no-untyped-def]
        # the sizes the slider was drawn with, not the store's now: a value set while the pair was
        # unfinished (no sizes) must not pick the first size once the pair has finished
        k = int(index or 0)
        return int(sizes[k]) if sizes and 0 <= k < len(sizes) else no_update

    @app.callback(
        *[Output(g, "figure") for g in GRAPHS],
        Output("circuits-n-note", "children"),
        Input("circuits-job", "data"),
        Input("circuits-n", "data"),
        Input("circuits-layout", "value"),
        State("circuits-source", "data"),
        State("circuits-pair-source", "data"),
    )
    def _views(_job, n, layout, source, pair):  # type: ignore[no-untyped-def]
        flow_st, pair_st = store.status(source), store.status(pair)
        model = (pair_st.get("request") or flow_st.get("request") or {}).get("model")
        figs = _figures(
            flow_st["result"], pair_st["result"], n, layout, atlas_labels(client, model)
        )
        for k, st in ((3, flow_st), (0, pair_st), (1, pair_st), (2, pair_st)):
            if st["status"] not in ("finished", "none") and not figs[k].data:
                msg = f"failed: {st.get('error')}" if st["status"] == "failed" else "Computing…"
                figs[k] = empty_figure(msg)
        if not pair:
            # a space before each line break: the words stay apart in the text a reader copies
            why = "Give a corrupted text of the same token length <br>(on a decoder with a language-model head)"
            figs[:3] = [
                empty_figure(f"{why} <br>for the circuit."),
                empty_figure(""),
                empty_figure(f"{why} for AtP against real patching."),
            ]
        return *figs, _n_note(pair_st["result"], n) if pair else ""

    register_click_pick(
        app,
        target="circuits-head",
        graph_ids=HEAD_GRAPHS,
        parse=lambda click: None if (head := F.clicked_head(click)) is None else list(head),
    )

    @app.callback(
        Output("circuits-head-info", "children"),
        Output("circuits-head-links", "children"),
        Input("circuits-head", "data"),
        State("circuits-source", "data"),
        State("circuits-pair-source", "data"),
        prevent_initial_call=True,
    )
    def _open_head(head, source, pair):  # type: ignore[no-untyped-def]
        from frontend.pages.text import text_request

        if not head:
            return no_update, no_update
        layer, h = int(head[0]), int(head[1])
        req = store.status(source).get("request") or {}
        preq = store.status(pair).get("request") or {} if pair else {}
        if not req.get("text") or not req.get("model"):
            return "Analyze first.", ""
        links: list[Any] = []
        try:
            tr = text_request(
                text=req["text"],
                model=req["model"],
                drop_special=False,
                restarts=1,
                layer=layer,
                head=h,
            )
            job = client.submit_analysis(**tr)["id"]
            links.append(
                dcc.Link(
                    f"Open {head_label(layer, h)} in the text explorer →",
                    id="circuits-open-text",
                    href="/"
                    + source_query({"kind": "analysis", "id": job}, {"layer": layer, "head": h}),
                )
            )
            if preq:
                o = preq.get("options") or {}
                target = o.get("target")
                cr = causal_request(
                    text=req["text"],
                    model=req["model"],
                    corrupted=o.get("corrupted"),
                    target=format_target(target) if isinstance(target, list) else None,
                )
                cjob = client.submit_analysis(**cr)["id"]
                links += [
                    " · ",
                    dcc.Link(
                        f"Open {head_label(layer, h)} on the causal page →",
                        id="circuits-open-causal",
                        href=PATH.replace("circuits", "causal")
                        + source_query(
                            {"kind": "analysis", "id": cjob}, {"head": head_label(layer, h)}
                        ),
                    ),
                ]
        except ApiError as exc:
            return f"cannot open {head_label(layer, h)}: {exc}", ""
        return f"{head_label(layer, h)}.", html.Span(links)

    @app.callback(
        Output("circuits-cancelled", "children"),
        Input("circuits-cancel", "n_clicks"),
        State("circuits-source", "data"),
        State("circuits-pair-source", "data"),
        prevent_initial_call=True,
    )
    def _cancel(_n, *sources):  # type: ignore[no-untyped-def]
        said = []
        for src in sources:
            if src and src.get("kind") == "analysis":
                try:
                    done = client.cancel_analysis(src["id"])
                except ApiError as exc:
                    said.append(str(exc))
                    continue
                said.append(
                    "cancelled" if done.get("cancelled") else f"not running ({done.get('status')})"
                )
        return "; ".join(said) or "nothing to cancel"

    @app.callback(
        Output("url", "search", allow_duplicate=True),
        Input("circuits-source", "data"),
        Input("circuits-pair-source", "data"),
        Input("circuits-n", "data"),
        Input("circuits-head", "data"),
        Input("circuits-layout", "value"),
        prevent_initial_call=True,
    )
    def _url(source, pair, n, head, layout):  # type: ignore[no-untyped-def]
        return no_update if not source else source_query(source, _view(pair, n, head, layout))

    @app.callback(
        Output("circuits-share-url", "children"),
        Output("circuits-share-url", "href"),
        Output("circuits-error", "children", allow_duplicate=True),
        Input("circuits-share-button", "n_clicks"),
        State("circuits-source", "data"),
        State("circuits-pair-source", "data"),
        State("circuits-n", "data"),
        State("circuits-head", "data"),
        State("circuits-layout", "value"),
        prevent_initial_call=True,
    )
    def _share(_n, source, pair, n, head, layout):  # type: ignore[no-untyped-def]
        if pair and pair.get("kind") == "analysis":  # the pair's own share keeps its result too
            try:
                pair = {
                    "kind": "share",
                    "id": client.create_share(view={"page": NAME}, analysis_id=pair["id"])["id"],
                }
            except ApiError as exc:
                why = (
                    "the analysis is still running: share it when it has finished"
                    if exc.status == 409
                    else str(exc)
                )
                return no_update, no_update, why
        url, error = share_link(
            client, source, {"page": NAME, **_view(pair, n, head, layout)}, page_path=PATH
        )
        return (url, url, "") if url else (no_update, no_update, error)


def _register_exports(app: Dash, store: ResultStore) -> None:
    """Image format (PNG/SVG), the results as JSON, the page as HTML, the graphs as JSON and GraphML."""

    @app.callback(
        *[Output(g, "config") for g in GRAPHS],
        Input("circuits-image-format", "value"),
        prevent_initial_call=True,
    )
    def _format(fmt):  # type: ignore[no-untyped-def]
        return tuple(graph_config(f"headscope-{g}", image_format=fmt or "png") for g in GRAPHS)

    app.clientside_callback(
        ClientsideFunction(namespace="headscope_export", function_name="setImageFormat"),
        Output("circuits-image-format-applied", "data"),
        Input("circuits-image-format", "value"),
        State("circuits-graph-ids", "data"),
        prevent_initial_call=True,
    )

    @app.callback(
        Output("circuits-download", "data"),
        Input("circuits-export-json", "n_clicks"),
        Input("circuits-export-html", "n_clicks"),
        State("circuits-source", "data"),
        State("circuits-pair-source", "data"),
        State("circuits-n", "data"),
        State("circuits-layout", "value"),
        prevent_initial_call=True,
    )
    def _download(_j, _h, source, pair, n, layout):  # type: ignore[no-untyped-def]
        from dash import ctx

        flow, pst = store.status(source), store.status(pair)
        if flow["status"] != "finished":
            return no_update
        name = f"headscope-circuits-{source['id']}"
        if ctx.triggered_id == "circuits-export-json":
            payload = {
                "flow": {"request": flow.get("request"), "result": flow["result"]},
                "pair": {"request": pst.get("request"), "result": pst["result"]} if pair else None,
            }
            return {
                "content": json.dumps(payload),
                "filename": f"{name}.json",
                "type": "application/json",
            }
        html_doc = standalone_html(
            _figures(
                flow["result"],
                pst["result"],
                n,
                layout,
                atlas_labels(
                    store.client,
                    (pst.get("request") or flow.get("request") or {}).get("model"),
                ),
            ),
            title="headscope — circuits",
            notes="Exported from headscope; figures are interactive and need no network.",
        )
        return {"content": html_doc, "filename": f"{name}.html", "type": "text/html"}

    @app.callback(
        Output("circuits-graph-download", "data"),
        Output("circuits-error", "children", allow_duplicate=True),
        *[
            Input(f"circuits-dl-{k}", "n_clicks")
            for k in ("circuit-json", "circuit-graphml", "flow-json", "flow-graphml")
        ],
        State("circuits-source", "data"),
        State("circuits-pair-source", "data"),
        State("circuits-n", "data"),
        prevent_initial_call=True,
    )
    def _graph_download(_a, _b, _c, _d, source, pair, n):  # type: ignore[no-untyped-def]
        from dash import ctx

        which = str(ctx.triggered_id).removeprefix("circuits-dl-")
        src = pair if which.startswith("circuit") else source
        st = store.status(src)
        key = EDGE_ATTRIBUTION if which.startswith("circuit") else INFORMATION_FLOW
        if st["status"] != "finished" or not st["result"].get(key):
            return (
                no_update,
                f"no {'circuit' if key == EDGE_ATTRIBUTION else 'flow graph'} to download yet",
            )
        g = (
            F.circuit_graph(  # head nodes carry their atlas labels where one is stored
                st["result"],
                n_top=n,
                head_labels=atlas_labels(
                    store.client,
                    st["result"].get("model") or (st.get("request") or {}).get("model"),
                ),
            )
            if key == EDGE_ATTRIBUTION
            else F.flow_graph(st["result"])
        )
        stem = f"headscope-{which.split('-')[0]}-{src['id']}"
        if which.endswith("json"):
            return {
                "content": json.dumps(g),
                "filename": f"{stem}.json",
                "type": "application/json",
            }, ""
        return {
            "content": F.graphml(g),
            "filename": f"{stem}.graphml",
            "type": "application/xml",
        }, ""
