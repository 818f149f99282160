"""The page kit: widgets and callback helpers every page uses (progress, polling, export bar, the
URL and share link of its view). A page is one module in ``frontend/pages`` with ``NAME``, ``PATH``,
``TITLE``, ``NAV_ORDER``, ``layout(store, query, share)`` and ``register(app, store)``; the shell
finds it (``frontend/app.py``) and ``register_view`` gives it its URL and share behaviour."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import plotly.graph_objects as go
from dash import ClientsideFunction, Dash, Input, Output, State, dcc, html, no_update

from frontend.figures.base import graph_config, standalone_html
from frontend.kit.api_client import ApiError
from frontend.kit.atlas_labels import export_labels
from frontend.kit.data import DONE, ResultStore, query_string, sections_of, source_query

logger = logging.getLogger(__name__)

POLL_MS = 500
FAST_POLL_MS = 250  # the text explorer: its gallery fills in layer by layer


def graph(gid: str, *, filename: str | None = None, **kwargs: Any) -> dcc.Graph:
    """A dcc.Graph whose modebar camera downloads PNG (SVG via the page's format switch)."""
    return dcc.Graph(id=gid, config=graph_config(filename or f"headscope-{gid}"), **kwargs)


EMPTY_PX = (
    90  # a placeholder figure's height: no large empty card before Analyze (docs/dashboard.md)
)


def fold(
    title: str, children: list[Any], *, fid: str | None = None, is_open: bool = True
) -> html.Details:
    """A panel that folds: its title (a ``<summary>``) stays, a click hides or shows the rest."""
    extra = {"id": fid} if fid else {}
    return html.Details(
        className="panel fold",
        open=is_open,
        children=[html.Summary(title, className="fold-title"), *children],
        **extra,
    )


def model_label(m: dict[str, Any]) -> str:
    """``name — family, layers x heads, N tokens`` (what the picker shows; hub models not yet
    downloaded show only their name)."""
    facts = []
    if m.get("family"):
        facts.append(str(m["family"]))
    if m.get("n_layers"):
        kv = m.get("n_kv_heads")
        gqa = f" ({kv} kv)" if kv and kv != m.get("n_heads") else ""
        facts.append(f"{m['n_layers']}x{m.get('n_heads')}{gqa}")
    if m.get("max_tokens"):
        facts.append(f"{int(m['max_tokens'])} tokens")
    if m.get("licence"):
        facts.append(str(m["licence"]))
    return f"{m['name']} — {', '.join(facts)}" if facts else str(m["name"])


def licence_link(facts: dict[str, Any]) -> list[Any]:
    """``weights under the <a>Gemma Terms of Use</a>`` for a model whose weights come with terms
    (``licence``, ``licence_url`` in its facts); nothing otherwise."""
    if not facts.get("licence_url"):
        return []
    return [
        "weights under the ",
        html.A(facts.get("licence") or "licence", href=facts["licence_url"], target="_blank"),
    ]


def model_options(
    store: ResultStore,
) -> tuple[list[dict[str, str]], str, dict[str, dict[str, Any]]]:
    """Dropdown options from ``GET /api/models``, the default, and each model's facts by name.

    MiniLM alone (6 x 12) when the list cannot be had.
    """
    try:
        body = store.models()
    except ApiError as exc:
        logger.warning("cannot list models: %s", exc)
        body = {"default": "minilm", "models": [{"name": "minilm", "n_layers": 6, "n_heads": 12}]}
    opts, info = [], {}
    for m in body.get("models") or []:
        title = m.get("description") or ""
        if m.get("licence_url"):
            title += f" — licence: {m['licence_url']}"
        opts.append({"label": model_label(m), "value": m["name"], "title": title})
        info[m["name"]] = m
    default = body.get("default") or (opts[0]["value"] if opts else "minilm")
    return opts or [{"label": default, "value": default}], default, info


def shown(visible: bool) -> dict[str, str]:
    """The style of a control shown only in some modes of its page: ``{}`` or ``display: none``."""
    return {} if visible else {"display": "none"}


def progress_block(
    prefix: str, *, running: bool, interval_ms: int = POLL_MS, sections: bool = False
) -> html.Div:
    """A progress bar, a status line and the interval that polls the job; ``sections``: also the store
    ``{prefix}-job-sections`` (see ``register_poll``)."""
    return html.Div(
        className="progress-block",
        children=[
            html.Div(
                className="progress",
                children=[
                    html.Div(
                        id=f"{prefix}-progress-bar", className="progress-bar", style={"width": "0%"}
                    )
                ],
            ),
            html.Div(id=f"{prefix}-status", className="status"),
            dcc.Interval(id=f"{prefix}-poll", interval=interval_ms, disabled=not running),
            dcc.Store(id=f"{prefix}-job"),
            dcc.Store(id=f"{prefix}-poll-view"),
            *([dcc.Store(id=f"{prefix}-job-sections")] if sections else []),
        ],
    )


def export_bar(prefix: str, graphs: list[str]) -> html.Div:
    """Share button and link, image format switch, JSON and standalone-HTML downloads."""
    return html.Div(
        className="export-bar",
        children=[
            html.Button("Share", id=f"{prefix}-share-button", className="button"),
            html.A(id=f"{prefix}-share-url", className="share-url", target="_blank"),
            html.Span("image format:", className="label"),
            dcc.RadioItems(
                id=f"{prefix}-image-format",
                options=[{"label": "PNG", "value": "png"}, {"label": "SVG", "value": "svg"}],
                value="png",
                inline=True,
                className="inline-radio",
            ),
            html.Span("(camera icon of each figure)", className="hint"),
            html.Button("Download JSON", id=f"{prefix}-export-json", className="button secondary"),
            html.Button("Download HTML", id=f"{prefix}-export-html", className="button secondary"),
            dcc.Download(id=f"{prefix}-download"),
            dcc.Store(id=f"{prefix}-image-format-applied"),
            dcc.Store(id=f"{prefix}-graph-ids", data=graphs),
        ],
    )


def status_view(status: dict[str, Any]) -> tuple[dict[str, str], str]:
    """Progress bar style and status line for a status dict."""
    state = status.get("status", "none")
    pct = 100.0 if state == "finished" else 100.0 * float(status.get("progress") or 0.0)
    if state == "failed":
        text = f"failed: {status.get('error') or status.get('message') or 'unknown error'}"
    elif state == "finished":
        text = (
            "done"
            if status.get("message") != "shared result"
            else "shared result (stored, not recomputed)"
        )
    elif state == "none":
        text = ""
    else:
        text = f"{state} — {status.get('message') or ''} ({pct:.0f}%)"
    cls = {"failed": "progress-bar failed", "finished": "progress-bar done"}.get(
        state, "progress-bar"
    )
    return {"width": f"{pct:.0f}%", "className": cls}, text


# the poll's view (``{prefix}-poll-view``: bar style and class, status line, interval off) onto the page
SHOW_POLL_VIEW = """function(view) {
    const nu = window.dash_clientside.no_update;
    if (!view) { return [nu, nu, nu, nu]; }
    return [view.style, view.className, view.text, view.disabled];
}"""


def poll_view(statuses: list[dict[str, Any]]) -> dict[str, Any]:
    """What the page shows of its jobs' statuses: the progress bar's ``style`` and ``className``, the
    status ``text`` (the first busy job's, else the first failed one's, else the first's) and whether
    the poll is ``disabled`` (no job busy)."""
    busy = [s for s in statuses if s["status"] not in DONE and s["status"] != "none"]
    main = busy[0] if busy else next((s for s in statuses if s["status"] == "failed"), statuses[0])
    style, text = status_view(main)
    cls = style.pop("className")
    return {"style": style, "className": cls, "text": text, "disabled": not busy}


def register_poll(
    app: Dash, store: ResultStore, prefix: str, sources: list[str], *, sections: bool = False
) -> None:
    """Poll the jobs of the page's source stores; ``{prefix}-job`` changes only when sections do
    (a section filling in layer by layer: with each layer). ``sections``: ``{prefix}-job-sections``
    changes only when a whole section arrives or the status changes, for the views that do not draw
    a section layer by layer (they then do not run again with every layer).

    A poll with nothing new changes nothing on the page: every output of the server's callback is a
    ``dcc.Store`` (no DOM element, so Dash's in-flight mark on its outputs, ``data-dash-is-loading``,
    touches no element of the page), and each answers ``no_update`` unless it changed;
    ``{prefix}-poll-view`` (``poll_view``) reaches the progress bar, the status line and the interval
    through a clientside callback, which runs only when the view changes (docs/dashboard.md)."""
    extra = [Output(f"{prefix}-job-sections", "data")] if sections else []

    @app.callback(
        Output(f"{prefix}-job", "data"),
        *extra,
        Output(f"{prefix}-poll-view", "data"),
        Input(f"{prefix}-poll", "n_intervals"),
        *[Input(s, "data") for s in sources],
        State(f"{prefix}-job", "data"),
        State(f"{prefix}-poll-view", "data"),
    )
    def _poll(_n: int | None, *args: Any) -> tuple[Any, ...]:
        srcs, previous, shown_view = args[:-2], args[-2], args[-1]
        jobs = []
        statuses = []
        for src in srcs:
            st = store.status(src)
            statuses.append(st)
            jobs.append(
                {
                    "id": (src or {}).get("id"),
                    "status": st["status"],
                    "sections": sections_of(st),
                    "error": st.get("error"),
                }
            )
        view = poll_view(statuses)
        out = [no_update if jobs == previous else jobs]
        if sections:
            whole = whole_sections(jobs)
            out.append(no_update if whole_sections(previous or []) == whole else whole)
        return (*out, no_update if view == shown_view else view)

    app.clientside_callback(
        SHOW_POLL_VIEW,
        Output(f"{prefix}-progress-bar", "style"),
        Output(f"{prefix}-progress-bar", "className"),
        Output(f"{prefix}-status", "children"),
        Output(f"{prefix}-poll", "disabled"),
        Input(f"{prefix}-poll-view", "data"),
    )


def whole_sections(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The poll's jobs (``{prefix}-job``) without the sections still filling in layer by layer
    (``name:layers done``, ``data.sections_of``): what ``{prefix}-job-sections`` holds.

    A running job whose sections are ``head-tsne-all:3`` (its first 3 layers) and ``max-attention``
    keeps ``max-attention`` only.
    """
    return [{**j, "sections": [s for s in j.get("sections") or [] if ":" not in s]} for j in jobs]


def register_exports(
    app: Dash,
    store: ResultStore,
    prefix: str,
    *,
    source: str,
    graphs: list[str],
    figures: Callable[..., list[go.Figure]],
    view_states: list[State],
    title: str,
) -> None:
    """Image format switch, JSON download of the result, standalone HTML of the view."""

    @app.callback(
        *[Output(g, "config") for g in graphs],
        Input(f"{prefix}-image-format", "value"),
        prevent_initial_call=True,
    )
    def _format(fmt: str) -> tuple[dict[str, Any], ...]:  # for figures drawn from now on
        return tuple(graph_config(f"headscope-{g}", image_format=fmt or "png") for g in graphs)

    app.clientside_callback(  # for the figures on screen (assets/export.js)
        ClientsideFunction(namespace="headscope_export", function_name="setImageFormat"),
        Output(f"{prefix}-image-format-applied", "data"),
        Input(f"{prefix}-image-format", "value"),
        State(f"{prefix}-graph-ids", "data"),
        prevent_initial_call=True,
    )

    @app.callback(
        Output(f"{prefix}-download", "data"),
        Input(f"{prefix}-export-json", "n_clicks"),
        Input(f"{prefix}-export-html", "n_clicks"),
        State(source, "data"),
        *view_states,
        prevent_initial_call=True,
    )
    def _download(_j: int | None, _h: int | None, src: dict[str, Any] | None, *view: Any) -> Any:
        from dash import ctx

        st = store.status(src)
        if st["status"] != "finished":
            return no_update
        name = f"headscope-{prefix}-{(src or {}).get('id', 'result')}"
        if ctx.triggered_id == f"{prefix}-export-json":
            payload = {"request": st.get("request"), "result": store.stored_result(src)}
            labels = export_labels(store.client, st.get("request"))  # docs/atlas.md: exports
            if labels:
                payload["atlas_labels"] = labels
            return {
                "content": json.dumps(payload),
                "filename": f"{name}.json",
                "type": "application/json",
            }
        figs = figures(st["result"], *view)
        notes = "Exported from headscope; figures are interactive and need no network."
        return {
            "content": standalone_html(figs, title=title, notes=notes),
            "filename": f"{name}.html",
            "type": "text/html",
        }


@dataclass(frozen=True)
class PageView:
    """What a page's URL and share links hold.

    Attributes:
        name: the page's name, written into a share's view (``{"page": name, ...}``).
        prefix: the page's element id prefix (``{prefix}-share-button``, ``-share-url``, ``-error``).
        path: the page's path (``/terms``); a share opened there keeps its view in the URL.
        source: id of the ``dcc.Store`` that holds the page's source (``{kind, id}``).
        inputs: ``(component id, property)`` of every control the view is made of.
        view: their values (in that order) -> the view's keys, as the URL and the share store them.
        url: ``server`` (a callback writes ``url.search``) or ``browser`` (the page writes it in a
            clientside callback of its own, as the text page does for instant head switching).
    """

    name: str
    prefix: str
    path: str
    source: str
    inputs: tuple[tuple[str, str], ...]
    view: Callable[..., dict[str, Any]]
    url: Literal["server", "browser"] = "server"

    @property
    def states(self) -> list[State]:
        """The view's controls as ``State``s (for exports)."""
        return [State(c, p) for c, p in self.inputs]


def register_view(app: Dash, client: Any, page: PageView) -> None:
    """The page's URL follows its source and view; its Share button makes a link to both."""
    if page.url == "server":

        @app.callback(
            Output("url", "search", allow_duplicate=True),
            Input(page.source, "data"),
            *[Input(c, p) for c, p in page.inputs],
            prevent_initial_call=True,
        )
        def _url(source: dict[str, Any] | None, *values: Any) -> Any:
            if not source:
                return no_update
            return source_query(source, page.view(*values))

    @app.callback(
        Output(f"{page.prefix}-share-url", "children"),
        Output(f"{page.prefix}-share-url", "href"),
        Output(f"{page.prefix}-error", "children", allow_duplicate=True),
        Input(f"{page.prefix}-share-button", "n_clicks"),
        State(page.source, "data"),
        *page.states,
        prevent_initial_call=True,
    )
    def _share(_n: int | None, source: dict[str, Any] | None, *values: Any) -> Any:
        view = {"page": page.name, **page.view(*values)}
        url, error = share_link(client, source, view, page_path=page.path)
        return (url, url, "") if url else (no_update, no_update, error)


def share_link(
    client: Any, source: dict[str, Any] | None, view: dict[str, Any], *, page_path: str = "/"
) -> tuple[str | None, str]:
    """``(URL, "")`` of a share link for the page's result and view, or ``(None, reason)``.

    A page opened from a share link shares that link again, with the current view in the URL.
    """
    if not source:
        return None, "Analyze first, then share."
    if source.get("kind") == "share":
        params = {k: v for k, v in view.items() if k != "page"}
        return absolute_url(page_path + query_string({"share": source["id"], **params})), ""
    field = {"pe": "pe_analysis_id", "corpus": "corpus_analysis_id", "compare": "compare_id"}.get(
        source.get("kind", ""), "analysis_id"
    )
    target = {field: source["id"]}
    try:
        path = client.create_share(view=view, **target)["url"]
    except ApiError as exc:
        if exc.status == 409:
            return None, "the analysis is still running: share it when it has finished"
        return None, str(exc)
    return absolute_url(path), ""


def absolute_url(path: str) -> str:
    """The share path as the browser's own origin sees it (the request's host)."""
    try:
        from flask import request

        return request.host_url.rstrip("/") + path
    except RuntimeError:  # outside a request (tests)
        return path


def highlight_stores(prefix: str, graphs: list[str]) -> list[dcc.Store]:
    """Stores the hover-highlight script reads (graph ids) and writes (the hovered token)."""
    return [
        dcc.Store(id=f"{prefix}-highlight-ids", data=graphs),
        dcc.Store(id=f"{prefix}-highlight"),
    ]


def register_highlight(app: Dash, prefix: str, graphs: list[str]) -> None:
    """Hovering a token in any of ``graphs`` marks it in all of them (assets/highlight.js)."""
    app.clientside_callback(
        ClientsideFunction(namespace="headscope", function_name="highlight"),
        Output(f"{prefix}-highlight", "data"),
        *[Input(g, "hoverData") for g in graphs],
        State(f"{prefix}-highlight-ids", "data"),
        prevent_initial_call=True,
    )


def restore_view(
    store: Any, query: dict[str, str], share: dict[str, Any] | None, *, keys: tuple[str, ...]
) -> tuple[dict[str, Any] | None, dict[str, Any], dict[str, Any]]:
    """(source, request, view) of a text-analysis page opened from a share or ``?analysis=``;
    the URL's ``keys`` override the shared view."""
    source = None
    request: dict[str, Any] = {}
    view: dict[str, Any] = {}
    if share is not None:
        source = {"kind": "share", "id": share["id"]}
        request, view = share.get("request") or {}, dict(share.get("view") or {})
    elif query.get("analysis"):
        source = {"kind": "analysis", "id": query["analysis"]}
        request = store.status(source).get("request") or {}
    view.update({k: v for k, v in query.items() if k in keys})
    return source, request, view


def register_cancel(
    app: Dash, prefix: str, *, kind: str, cancel: Callable[[str], dict[str, Any]]
) -> None:
    """The page's Cancel button (``{prefix}-cancel``): cancels the job in ``{prefix}-source`` when it is
    one of ``kind`` (``cancel(job id)`` -> ``{cancelled, status}``) and says so in ``{prefix}-error``."""

    @app.callback(
        Output(f"{prefix}-error", "children", allow_duplicate=True),
        Input(f"{prefix}-cancel", "n_clicks"),
        State(f"{prefix}-source", "data"),
        prevent_initial_call=True,
    )
    def _cancel(_n: int | None, source: dict[str, Any] | None) -> str:
        if not source or source.get("kind") != kind:
            return "nothing to cancel"
        try:
            done = cancel(source["id"])
        except ApiError as exc:
            return str(exc)
        return "cancelled" if done.get("cancelled") else f"not running ({done.get('status')})"


def register_click_pick(
    app: Dash, *, target: str, graph_ids: list[str], parse: Callable[[Any], Any]
) -> None:
    """A click on any of ``graph_ids`` selects: ``parse(clickData)`` (None: not a selection) goes to
    ``target``'s data."""

    @app.callback(
        Output(target, "data"),
        *[Input(g, "clickData") for g in graph_ids],
        prevent_initial_call=True,
    )
    def _pick(*_clicks: Any) -> Any:
        from dash import ctx

        got = parse(ctx.triggered[0]["value"] if ctx.triggered else None)
        return no_update if got is None else got


def register_grid_pick(
    app: Dash,
    *,
    target: str,
    graph_id: str,
    grid_id: str,
    from_point: Callable[[dict[str, Any]], Any],
    from_row: Callable[[Any], Any],
) -> None:
    """A click on a point of ``graph_id`` or on a row of the AG Grid ``grid_id`` selects: the value
    (``from_point(point)`` / ``from_row(row id)``; None: not a selection) goes to ``target``'s data.
    The grid's ``{grid_id}-csv`` button exports what it shows (sorted, filtered), every page."""

    @app.callback(
        Output(target, "data"),
        Input(graph_id, "clickData"),
        Input(grid_id, "cellClicked"),
        prevent_initial_call=True,
    )
    def _select(click: dict[str, Any] | None, cell: dict[str, Any] | None) -> Any:
        from dash import ctx

        if ctx.triggered_id == grid_id:
            got = from_row((cell or {}).get("rowId"))
        else:
            got = from_point(((click or {}).get("points") or [{}])[0])
        return no_update if got is None else got

    @app.callback(
        Output(grid_id, "exportDataAsCsv"),
        Input(f"{grid_id}-csv", "n_clicks"),
        prevent_initial_call=True,
    )
    def _csv(_n: int | None) -> bool:
        return True
