"""The text explorer's every-head views: the gallery, instant head switching, the head and model views.

Not a page of its own: the text page (``pages/text/__init__.py``) places ``gallery_panel`` /
``lines_panel`` in its layout and calls ``register``. The selected head lives in the store
``text-selected`` (``{layer, head}``); a gallery panel, a max-attention cell, a model-view cell or
the dropdowns change it in the browser (``assets/heads.js``), and the large map is redrawn there from ``text-head-maps``, the per-head
data the server sends once per result — no new analysis request. The matrix, the hidden-state
t-SNE and the head view follow from the result the server already holds.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from dash import ClientsideFunction, Dash, Input, Output, Patch, State, dcc, html, no_update

from frontend.figures import gallery as G
from frontend.figures import headview as HV
from frontend.figures.base import EMPTY_PX, empty_figure
from frontend.kit.atlas_labels import Labels, atlas_labels
from frontend.kit.data import ResultStore, int_list, int_or_none
from frontend.kit.heads import gallery_section, head_view_key, section_layers, waiting
from frontend.kit.page import fold, graph
from frontend.kit.sections import StoredResult, gallery_page_section
from workers.analyses.attention.spec import MAX_ATTENTION
from workers.analyses.tsne.spec import ALL_HEADS, HEAD_TSNE, HIDDEN_TSNE

DEFAULT_THRESHOLD = 0.1
GRAPHS = ["head-gallery", "head-view-graph", "model-view-graph"]
# a stored result's sections that the page's callbacks read once its gallery is drawn (heatmaps,
# the open head's views, every head's maps and the model view), in the order they are read ahead
LATE_SECTIONS = (MAX_ATTENTION, HEAD_TSNE, HIDDEN_TSNE, ALL_HEADS)


def view_state(view: dict[str, Any], *, layer: int | None, head: int | None) -> dict[str, Any]:
    """The every-head part of a page's view (URL or share): page, extra heads, threshold."""
    try:
        threshold = float(view.get("threshold", DEFAULT_THRESHOLD))
    except (TypeError, ValueError):
        threshold = DEFAULT_THRESHOLD
    extra = view.get("hv_heads")
    extra = int_list(extra) if isinstance(extra, str) else extra
    return {
        "selected": {"layer": layer, "head": head}
        if layer is not None and head is not None
        else None,
        "gpage": int_or_none(view.get("gpage")) or 0,
        "hv_heads": [int(h) for h in extra or []],
        "threshold": min(1.0, max(0.001, threshold)),
    }


def gallery_panel(state: dict[str, Any]) -> html.Details:
    return fold(
        "Every head's t-SNE (the gallery)",
        fid="text-fold-gallery",
        children=[
            html.Div(
                className="control-row",
                children=[
                    html.Span("every head:", className="label"),
                    dcc.Dropdown(
                        id="text-gallery-page",
                        options=[],
                        value=state["gpage"],
                        clearable=False,
                        placeholder="layers",
                        className="small-picker",
                    ),
                    html.Span(
                        "(the layers chosen above; click a panel to open that head below)",
                        className="hint",
                    ),
                ],
            ),
            graph(
                "head-gallery",
                figure=empty_figure(
                    "The gallery of every head appears here after Analyze.", height=EMPTY_PX
                ),
            ),
            dcc.Store(id="text-pick"),
            dcc.Store(id="text-selected", data=state["selected"]),
            dcc.Store(id="text-head-maps"),
            dcc.Store(id="text-maps-key"),  # which heads' maps the browser holds (maps_outputs)
            dcc.Store(id="text-gallery-key"),
            dcc.Store(
                id="text-gallery-tick"
            ),  # assets/gallery.js asks for an update here, one at a time
            dcc.Store(id="text-gallery-gate"),
            dcc.Store(id="text-gallery-drawn"),  # assets/gallery.js: an answer's rows are painted
        ],
    )


def lines_panel(state: dict[str, Any], n_heads: int) -> html.Details:
    return fold(
        "Attention as lines (head view) and every head's pattern (model view)",
        fid="text-fold-lines",
        children=[
            html.Div(
                className="control-row",
                children=[
                    html.Span("head view:", className="label"),
                    html.Label("also show heads", htmlFor="text-hv-heads"),
                    dcc.Dropdown(
                        id="text-hv-heads",
                        options=[{"label": f"head {h}", "value": h} for h in range(n_heads)],
                        value=state["hv_heads"],
                        multi=True,
                        placeholder="other heads of the layer",
                        className="layers-picker",
                    ),
                    html.Label("weights ≥", htmlFor="text-hv-threshold"),
                    dcc.Input(
                        id="text-hv-threshold",
                        type="number",
                        min=0.001,
                        max=1,
                        step="any",
                        value=state["threshold"],
                        className="small-input",
                        debounce=True,
                    ),
                    html.Span(
                        "queries left, keys right, opacity = weight; hover a token to keep only its lines",
                        className="hint",
                    ),
                ],
            ),
            html.Div(
                className="row",
                children=[
                    html.Div(
                        className="col",
                        children=graph(
                            "head-view-graph",
                            figure=empty_figure(
                                "The selected head's attention as lines appears here.",
                                height=EMPTY_PX,
                            ),
                            clear_on_unhover=True,
                        ),
                    ),
                    html.Div(
                        className="col",
                        children=graph(
                            "model-view-graph",
                            figure=empty_figure(
                                "Every head's attention pattern appears here.", height=EMPTY_PX
                            ),
                        ),
                    ),
                ],
            ),
            dcc.Store(id="text-hv-focus"),
            dcc.Store(
                id="text-lines-key"
            ),  # what the head and model views show (heads.head_view_key)
        ],
    )


def gallery_outputs(
    st: dict[str, Any],
    source: dict[str, Any] | None,
    layers: list[int] | None,
    page: Any,
    shown: dict[str, Any] | None,
    *,
    with_maps: bool = True,
    labels: Labels | None = None,
) -> tuple[Any, ...]:
    """(gallery figure, page options, page, what is drawn, head maps) for a job's status.
    ``with_maps=False``: the maps left out (``no_update``; the page sends them apart, after the
    gallery: ``maps_outputs``). ``labels``: the heads' atlas labels (``kit.atlas_labels``), named in
    the panels' titles and the maps' titles.

    ``shown`` (the store ``text-gallery-key``) says what the browser has: the source, the page's
    shape and the layers drawn, and which heads' maps. While the gallery fills in, a page of the same
    shape gets only what changed as a partial update (``dash.Patch``: the new rows' pictures by index,
    frames, titles, title, meta; the new heads' maps), and the rows on screen are neither sent
    nor built again. Each update sets values (never appends), so one applied twice, or after a newer
    one, leaves the same figure: Dash drops a callback's answer when a newer call has started.
    """
    result, req = st["result"], st.get("request") or {}
    busy = st["status"] not in ("finished", "failed", "none")
    ident = [(source or {}).get("kind"), (source or {}).get("id")]
    shown = shown if (shown or {}).get("source") == ident else {}
    message = "Computing every head's map…" if busy else "No map of this head in this result."
    maps, maps_state = (
        _maps(result, shown.get("maps"), message, labels) if with_maps else (no_update, None)
    )
    # a stored result read by section: only this page's layers (frontend/kit/sections.py)
    sec = gallery_page_section(result, layers, page or 0) or gallery_section(result)
    if sec is None and busy and (req.get("options") or {}).get("all_heads"):
        sec = G.skeleton_section(
            result
        )  # the rows wait in their places while the first layer is embedded
    gp = (
        G.gallery_page(result, layers=layers, page=page or 0, section=sec, labels=labels)
        if sec is not None
        else None
    )
    state = {"source": ident, "maps": maps_state}
    if not isinstance(gp, G.GalleryPage):
        msg = gp or (
            "Computing every head's map…"
            if busy and (req.get("options") or {}).get("all_heads")
            else "The gallery of every head appears here after Analyze."
        )
        state["empty"] = msg
        same = shown.get("empty") == msg
        return (
            no_update if same else empty_figure(msg, height=EMPTY_PX),
            no_update if same else [],
            no_update,
            state,
            maps,
        )
    options = G.gallery_page_options(result, layers, section=sec)
    state.update(
        shape=gp.shape,
        layers=layers,
        drawn=gp.done,
        complete=gp.complete,
        title=G.gallery_title(gp),
        options=options,
    )
    page_value = gp.page if gp.page != page else no_update
    options_out = options if options != shown.get("options") else no_update
    if shown.get("shape") != gp.shape or shown.get("layers") != layers:  # another page: drawn anew
        return (
            G.gallery_figure(result, layers=layers, page=gp.page, section=sec, labels=labels),
            options_out,
            page_value,
            state,
            maps,
        )
    if (shown.get("drawn"), shown.get("complete"), shown.get("title")) == (
        gp.done,
        gp.complete,
        state["title"],
    ):
        return no_update, options_out, page_value, state, maps
    upd = G.gallery_update(result, gp, shown.get("drawn") or [])
    fig = Patch()
    for row, image in upd["images"].items():
        fig["layout"]["images"][row] = image
    if upd["frames"] is not None:
        fig["data"][0] = upd["frames"]
        fig["data"][2] = upd["labels"]
    fig["layout"]["title"]["text"] = upd["title"]
    if (shown.get("drawn"), shown.get("complete")) != (gp.done, gp.complete):
        fig["layout"]["meta"] = upd["meta"]
    return fig, options_out, page_value, state, maps


_WHOLE_MAPS: OrderedDict[tuple[Any, ...], dict[str, Any]] = OrderedDict()  # finished results' maps
_WHOLE_MAPS_KEPT = 4


def maps_outputs(
    st: dict[str, Any],
    source: dict[str, Any] | None,
    had: dict[str, Any] | None,
    labels: Labels | None = None,
) -> tuple[Any, dict[str, Any]]:
    """(the store ``text-head-maps``: whole, a partial update or unchanged; what it then holds, for
    the store ``text-maps-key``). The page asks for them after each gallery answer, so the gallery
    paints first: a stored result's maps are megabytes (SmolLM2 at 452 tokens: 4.5 MB, ~0.7 s to
    build), and in the gallery's answer they held its first row back. A finished result's whole maps
    are built once per page server (``_WHOLE_MAPS``): a reopened link does not build them again."""
    busy = st["status"] not in ("finished", "failed", "none")
    ident = [(source or {}).get("kind"), (source or {}).get("id")]
    held = (had or {}).get("maps") if (had or {}).get("source") == ident else None
    message = "Computing every head's map…" if busy else "No map of this head in this result."
    key = (*ident, st["status"], len(labels or {}))
    if held is None and st["status"] == "finished" and key in _WHOLE_MAPS:
        _WHOLE_MAPS.move_to_end(key)
        whole = _WHOLE_MAPS[key]
        return whole["maps"], {"source": ident, "maps": whole["state"]}
    maps, state = _maps(st["result"], held, message, labels)
    if held is None and st["status"] == "finished" and ident[1]:
        _WHOLE_MAPS[key] = {"maps": maps, "state": state}
        while len(_WHOLE_MAPS) > _WHOLE_MAPS_KEPT:
            _WHOLE_MAPS.popitem(last=False)
    return maps, {"source": ident, "maps": state}


def _maps(
    result: dict[str, Any], had: dict[str, Any] | None, message: str, labels: Labels | None = None
) -> tuple[Any, dict[str, Any]]:
    """(the store ``text-head-maps``: whole, a partial update adding the new layers' heads, or
    unchanged, and what it then holds)."""
    one = result.get(HEAD_TSNE)
    one_key = [one.get("layers"), one.get("heads")] if one else None
    grid = gallery_section(result)
    layers = list((grid or {}).get("layers") or [])
    state = {"one": one_key, "layers": layers, "message": message, "any": bool(one or layers)}
    if (
        had is None
        or had.get("one") != one_key
        or not had.get("any")
        and state["any"]
        or not set(had.get("layers") or []) <= set(layers)
    ):
        return {**G.head_maps(result, labels), "message": message}, state
    new = [la for la in layers if la not in set(had.get("layers") or [])]
    if not new and had.get("message") == message:
        return no_update, state
    maps = Patch()
    for key, value in G.head_map_entries(result, layers=new, labels=labels).items():
        maps["maps"][key] = value
    maps["message"] = message
    return maps, state


def figures(
    result: dict[str, Any],
    *,
    layer: int | None,
    head: int | None,
    layers: list[int] | None,
    gpage: int,
    hv_heads: list[int] | None,
    threshold: float,
    labels: Labels | None = None,
) -> list[Any]:
    """The every-head figures of the view, as exported (gallery page, head view, model view)."""
    figs = [G.gallery_figure(result, layers=layers, page=gpage or 0, labels=labels)]
    if layer is not None and head is not None:
        figs.append(
            HV.head_view_figure(
                result,
                layer=layer,
                heads=_heads(head, hv_heads),
                threshold=threshold,
                labels=labels,
            )
        )
    figs.append(HV.model_view_figure(result, layer=layer, head=head))
    return figs


def _heads(head: int, extra: list[int] | None) -> list[int]:
    return [head, *[h for h in extra or [] if h != head]]


def register(app: Dash, store: ResultStore) -> None:
    """Callbacks of the every-head views (the page's poll writes ``text-job`` and ``text-job-sections``;
    ``text-job-late`` is the latter, a stored result's once its gallery is painted: assets/gallery.js)."""

    @app.callback(
        Output("head-gallery", "figure"),
        Output("text-gallery-page", "options"),
        Output("text-gallery-page", "value"),
        Output("text-gallery-key", "data"),
        Input("text-gallery-tick", "data"),
        State("text-layers", "value"),
        State("text-gallery-page", "value"),
        State("text-source", "data"),
        State("text-gallery-key", "data"),
        State("text-job", "data"),
        # every call is the gate's (assets/gallery.js), the first after the page's first poll: a
        # call at load, or on a change of the layers or the page (a dropdown re-sending its value),
        # ran beside the gate's, and Dash dropped one of the two answers (docs/dashboard.md)
        prevent_initial_call=True,
    )
    def _gallery(_tick, layers, page, source, shown, job):  # type: ignore[no-untyped-def]
        st = store.status(source, seen=job)  # what set the tick off, as the poll read it
        labels = atlas_labels(store.client, (st.get("request") or {}).get("model"))
        out = gallery_outputs(st, source, layers, page, shown, with_maps=False, labels=labels)[:4]
        if isinstance(st["result"], StoredResult):  # what the page draws next, read meanwhile
            st["result"].read_ahead([[k] for k in LATE_SECTIONS])
        return out

    @app.callback(  # the maps once the gallery's answer is painted (assets/gallery.js: drawn)
        Output("text-head-maps", "data"),
        Output("text-maps-key", "data"),
        Input("text-gallery-drawn", "data"),
        State("text-source", "data"),
        State("text-job", "data"),
        State("text-maps-key", "data"),
        prevent_initial_call=True,
    )
    def _head_maps(_shown, source, job, had):  # type: ignore[no-untyped-def]
        st = store.status(source, seen=job)
        labels = atlas_labels(store.client, (st.get("request") or {}).get("model"))
        return maps_outputs(st, source, had, labels)

    # The job's changes reach the gallery through a gate (assets/gallery.js): an update is asked for
    # only when none is on its way, the next as soon as it is applied. Dash drops an answer once a
    # newer call of its callback has started, and each call patches from the last answer applied:
    # layers arriving faster than the answers made every answer dropped and each larger
    # (docs/dashboard.md, "The starvation, fixed").
    app.clientside_callback(
        ClientsideFunction(namespace="headscope_gallery", function_name="jobChanged"),
        Output("text-gallery-tick", "data"),
        Input("text-job", "data"),
        prevent_initial_call=True,
    )
    app.clientside_callback(  # another page or other layers: asked for through the gate too
        ClientsideFunction(namespace="headscope_gallery", function_name="viewChanged"),
        Output("text-gallery-tick", "data", allow_duplicate=True),
        Input("text-layers", "value"),
        Input("text-gallery-page", "value"),
        prevent_initial_call=True,
    )
    app.clientside_callback(  # a stored result's heatmaps, matrix and views after its gallery
        ClientsideFunction(namespace="headscope_gallery", function_name="lateSections"),
        Output("text-job-late", "data"),
        Input("text-job-sections", "data"),
    )
    app.clientside_callback(
        ClientsideFunction(namespace="headscope_gallery", function_name="answerApplied"),
        Output("text-gallery-gate", "data"),
        Input("text-gallery-key", "data"),
        prevent_initial_call=True,
    )

    app.clientside_callback(
        ClientsideFunction(namespace="headscope_heads", function_name="selectHead"),
        Output("text-selected", "data"),
        Output("text-layer", "value"),
        Output("text-head", "value"),
        Input("text-pick", "data"),
        Input("max-attention-graph", "clickData"),
        Input("model-view-graph", "clickData"),
        Input("text-layer", "value"),
        Input("text-head", "value"),
        State("text-selected", "data"),
        prevent_initial_call=True,
    )
    # The maps are a State of the switch: as an Input, the switch would wait for every server callback
    # upstream of them (a click also reaches the server through text-selected); new maps redraw apart.
    app.clientside_callback(
        ClientsideFunction(namespace="headscope_heads", function_name="drawHead"),
        Output("head-tsne-graph", "figure"),
        Input("text-selected", "data"),
        Input("text-view-options", "value"),
        State("text-head-maps", "data"),
    )
    app.clientside_callback(
        ClientsideFunction(namespace="headscope_heads", function_name="drawHeadOnMaps"),
        Output("head-tsne-graph", "figure", allow_duplicate=True),
        Input("text-head-maps", "data"),
        State("text-selected", "data"),
        State("text-view-options", "value"),
        prevent_initial_call=True,
    )
    app.clientside_callback(
        ClientsideFunction(namespace="headscope_heads", function_name="headViewHover"),
        Output("text-hv-focus", "data"),
        Input("head-view-graph", "hoverData"),
        State("head-view-graph", "figure"),
        prevent_initial_call=True,
    )

    @app.callback(
        Output("head-view-graph", "figure"),
        Output("model-view-graph", "figure"),
        Output("text-lines-key", "data"),
        Input("text-job-late", "data"),
        Input("text-selected", "data"),
        Input("text-hv-heads", "value"),
        Input("text-hv-threshold", "value"),
        State("text-source", "data"),
        State("text-lines-key", "data"),
    )
    def _lines(job, selected, extra, threshold, source, shown):  # type: ignore[no-untyped-def]
        if waiting(job, source):
            return no_update, no_update, no_update
        st = store.status(
            source, seen=job
        )  # what the poll read (frontend.kit.data.ResultStore.status)
        result = st["result"]
        layer, head = (selected or {}).get("layer"), (selected or {}).get("head")
        try:
            t = min(1.0, max(0.001, float(threshold)))
        except (TypeError, ValueError):
            t = DEFAULT_THRESHOLD
        keys = {
            "lines": head_view_key(
                source, st, layer=layer, head=head, options=[list(extra or []), t]
            ),
            "model": [
                (source or {}).get("id"),
                layer,
                head,
                *section_layers(gallery_section(result)),
            ],
        }
        shown = shown or {}
        if (
            keys == shown
        ):  # a section these views do not show arrived: nothing re-sent, nothing redrawn
            return no_update, no_update, no_update
        model = (
            no_update
            if keys["model"] == shown.get("model")
            else HV.model_view_figure(result, layer=layer, head=head)
        )
        if keys["lines"] == shown.get("lines"):
            return no_update, model, keys
        if layer is None or head is None:
            return (
                empty_figure("Select a head to see its attention as lines.", height=EMPTY_PX),
                model,
                keys,
            )
        return (
            HV.head_view_figure(
                result,
                layer=layer,
                heads=_heads(head, extra),
                threshold=t,
                labels=atlas_labels(store.client, (st.get("request") or {}).get("model")),
            ),
            model,
            keys,
        )
