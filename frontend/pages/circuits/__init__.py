"""Circuits: which components work together (docs/circuits.md). A clean/corrupted pair gives the circuit
(edge attribution, with the faithfulness curve beside a slider for N) and AtP against real patching;
the clean text alone gives the information-flow graph over its tokens (any model, encoders too).

Two jobs: the flow job (always; the page's source) and the pair job (when a corrupted text is given on a
decoder with a head). URL state: ``/circuits?analysis=<flow job>&pair=<pair job>&n=<N>&head=L.H``; a
share link holds the flow job's share with the pair job's own share in its view (``pair_share``), so
both results are kept.
"""

from __future__ import annotations

import logging
from typing import Any

from dash import Dash, Input, Output, State, dcc, html, no_update

from frontend.figures import circuits as F
from frontend.figures.base import empty_figure
from frontend.kit.api_client import ApiError
from frontend.kit.atlas_labels import atlas_labels
from frontend.kit.data import ResultStore, source_query
from frontend.kit.forms import decoder_choices, parse_head, url_model
from frontend.kit.frontdoor import page_header
from frontend.kit.page import export_bar, restore_view, share_link
from frontend.pages.circuits.exports import register_circuit_exports
from frontend.pages.circuits.heads import register_head_links
from frontend.pages.circuits.layout import controls, downloads, panels
from frontend.pages.circuits.requests import (  # noqa: F401 - the requests re-exported
    edge_attribution_available,
    flow_request,
    number,
    page_view,
    pair_request,
    pair_source,
    top_edges_for,
)
from frontend.pages.circuits.views import GRAPHS, n_note, page_figures, slider_marks

logger = logging.getLogger(__name__)

NAME = "circuits"
PATH = "/circuits"
TITLE = "Circuits"
NAV_ORDER = 6  # after /causal


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
    pair = pair_source(view)
    pair_req = store.status(pair).get("request") or {} if pair else {}
    return html.Div(
        className="page",
        id="circuits-page",
        children=[
            page_header(NAME, TITLE),
            controls(
                request,
                pair_req,
                query,
                source,
                models=all_models,
                model=model,
                url_msg=url_msg,
                hint=hint,
            ),
            export_bar("circuits", GRAPHS),
            downloads(),
            *panels(view),
            dcc.Store(id="circuits-source", data=source),
            dcc.Store(id="circuits-pair-source", data=pair),
            dcc.Store(id="circuits-n", data=int(number(view.get("n"), 0)) or None),
            dcc.Store(id="circuits-sizes"),
            dcc.Store(id="circuits-head", data=parse_head(view.get("head"))),
        ],
    )


def register(app: Dash, store: ResultStore) -> None:
    from frontend.kit.page import register_poll

    client = store.client
    register_poll(app, store, "circuits", ["circuits-source", "circuits-pair-source"])
    register_circuit_exports(app, store)
    register_head_links(app, store)

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
        pos = number(position)
        try:
            freq = flow_request(
                text=text or "",
                model=model,
                threshold=number(threshold, 0.04),
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
        return len(sizes) - 1, slider_marks(sizes), sizes.index(want), sizes

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
        figs = page_figures(
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
        return *figs, n_note(pair_st["result"], n) if pair else ""

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
        return no_update if not source else source_query(source, page_view(pair, n, head, layout))

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
            client, source, {"page": NAME, **page_view(pair, n, head, layout)}, page_path=PATH
        )
        return (url, url, "") if url else (no_update, no_update, error)
