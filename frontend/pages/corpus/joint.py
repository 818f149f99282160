"""One head's joint query–key map on the corpus page (docs/corpus.md): a job of its own for the
selected head, drawn coloured by kind or position when it has finished."""

from __future__ import annotations

from dash import Dash, Input, Output, State, no_update

from frontend.figures import corpus as C
from frontend.figures.base import empty_figure
from frontend.kit.api_client import ApiError
from frontend.kit.data import ResultStore


def register_joint(app: Dash, store: ResultStore) -> None:
    """The joint map's callbacks: its job for the selected head, and its figure."""
    client = store.client

    @app.callback(
        Output("corpus-joint-source", "data"),
        Output("corpus-error", "children", allow_duplicate=True),
        Input("corpus-joint-button", "n_clicks"),
        State("corpus-head", "data"),
        State("corpus-source", "data"),
        State("corpus-joint-method", "value"),
        prevent_initial_call=True,
    )
    def _joint(_n, head, source, method):  # type: ignore[no-untyped-def]
        sel = C.parse_head(head)
        request = store.status(source).get("request") or {}
        if sel is None or not request:
            return no_update, "analyze a corpus and click a head first"
        body = {
            "model": request["model"],
            "corpus": request["corpus"],
            "layer": sel[0],
            "head": sel[1],
            "max_tokens": (request.get("options") or {}).get("max_tokens", 128),
            "keep_special": (request.get("options") or {}).get("keep_special", False),
            "method": method or "pca",
        }
        try:
            made = client.submit_joint(body)
        except ApiError as exc:
            return no_update, str(exc)
        return {"kind": "corpus-joint", "id": made["id"], "request": body}, ""

    @app.callback(
        Output("corpus-joint-graph", "figure"),
        Input("corpus-job", "data"),
        Input("corpus-joint-color", "value"),
        State("corpus-joint-source", "data"),
    )
    def _joint_view(_job, color, source):  # type: ignore[no-untyped-def]
        if not source:
            return C.joint_map_figure(None)
        st = store.status(source)
        if st["status"] == "failed":
            return empty_figure(f"joint map failed: {st.get('error')}")
        if st["status"] != "finished":
            return empty_figure(f"Computing the joint map… {st.get('message') or ''}")
        return C.joint_map_figure(st["result"], color_by=color or "kind")
