"""The pair selected on the /compare page (docs/compare.md): its two heads' word-level maps (a job per
model on the compared or picked text), the pair's label with the atlas' agreement, and each head's
token view on the text explorer."""

from __future__ import annotations

import logging

from dash import Dash, Input, Output, State, no_update

from frontend.figures import compare as F
from frontend.figures.base import empty_figure
from frontend.kit.api_client import ApiError
from frontend.kit.atlas_labels import atlas_labels, pair_agreement
from frontend.kit.data import ResultStore
from frontend.pages.compare.requests import cell_of, maps_text, text_index
from workers.analyses.compare.spec import WORD_MAPS

logger = logging.getLogger(__name__)


def register_pair(app: Dash, store: ResultStore) -> None:
    """The callbacks of the selected pair: its maps' jobs, its two maps and label, its token views."""
    client = store.client

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
