"""A head clicked on the /circuits page (the circuit, the AtP scatter or the flow graph): its links
to the text explorer and, with a pair, to the causal page, each a job submitted for that head."""

from __future__ import annotations

from typing import Any

from dash import Dash, Input, Output, State, dcc, html, no_update

from frontend.figures import circuits as F
from frontend.kit.api_client import ApiError
from frontend.kit.data import ResultStore, source_query
from frontend.kit.forms import format_target
from frontend.kit.page import register_click_pick
from frontend.pages.causal import PATH as CAUSAL_PATH
from frontend.pages.causal import causal_request
from frontend.pages.circuits.views import HEAD_GRAPHS
from workers.core.notation import head_label


def register_head_links(app: Dash, store: ResultStore) -> None:
    """A click on a head picks it (``circuits-head``); the picked head's links are submitted and shown."""
    client = store.client
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
                        href=CAUSAL_PATH
                        + source_query(
                            {"kind": "analysis", "id": cjob}, {"head": head_label(layer, h)}
                        ),
                    ),
                ]
        except ApiError as exc:
            return f"cannot open {head_label(layer, h)}: {exc}", ""
        return f"{head_label(layer, h)}.", html.Span(links)
