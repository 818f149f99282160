"""The Dash app: a shell with navigation, a router, and one module per page under ``pages/``.

``create_dash_app(api_base_url)`` returns a ``dash.Dash`` whose ``.server`` (Flask) the backend
mounts at ``/`` (a2wsgi). Every JavaScript and CSS file is served by that server: Dash's own
bundles (``serve_locally``) and ``assets/``; no CDN, no web fonts, so it works offline.

Routing is done here rather than with ``use_pages`` so that several apps can live in one process
(tests) and pages get their callbacks registered on their own app: the router reads the path and
the query string once per navigation and asks the page for its layout, filled in from the URL or
from a share link (``?share=<id>`` opens the page stored in the share's view).

``/`` without a query is the start page (``pages/start.py``); ``/`` with one opens the text explorer
(``/text``), as every link made before the start page did (docs/dashboard.md, "The start page").
The navigation, grouped by the question each view answers, comes from ``kit/frontdoor.py``; the
docs pages are served at ``/help`` (``kit/docs.py``).
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from pathlib import Path
from types import ModuleType
from typing import Any

import dash
import plotly.io as pio
from dash import Input, Output, State, dcc, html

from frontend import pages
from frontend.kit import docs, frontdoor, lazygrid
from frontend.kit.api_client import CLIENT_COOKIE, ApiClient, ApiError
from frontend.kit.data import ResultStore, parse_query

logger = logging.getLogger(__name__)

ASSETS = Path(__file__).resolve().parent / "assets"
PAGE_API = ("NAME", "PATH", "TITLE", "NAV_ORDER", "layout", "register")


def discover_pages() -> list[ModuleType]:
    """Every module of ``frontend/pages`` that is a page (has ``PAGE_API``), in navigation order:
    a new page is one module there, listed nowhere else."""
    found = []
    for info in pkgutil.iter_modules(pages.__path__):
        module = importlib.import_module(f"{pages.__name__}.{info.name}")
        if all(hasattr(module, attr) for attr in PAGE_API):
            found.append(module)
    return sorted(found, key=lambda m: (m.NAV_ORDER, m.PATH))


PAGE_MODULES = discover_pages()
PAGES: dict[str, ModuleType] = {m.PATH: m for m in PAGE_MODULES}
PAGE_BY_NAME: dict[str, str] = {m.NAME: m.PATH for m in PAGE_MODULES}
START, ROOT_WITH_QUERY = "/start", "/text"  # what "/" opens without and with a query
GRID_PATHS = lazygrid.grid_paths(PAGE_MODULES)  # the pages that draw an AG Grid keep its bundle
# the URL from which dcc.Graph loads plotly.js once a graph mounts (dash-renderer sets it when Dash
# serves its files itself); the page asks for it at navigation instead (``index_string``)
PLOTLY_JS = "_dash-component-suites/plotly/package_data/plotly.min.js"


# until the deferred script has run, window.Plotly is a promise of it: dcc.Graph, mounted before (the
# file still on its way), waits on it instead of loading the file a second time
PLOTLY_PROMISE = (
    "(function () { var done = {}, p = new Promise(function (res, rej) { done.res = res;"
    " done.rej = rej; }); window.Plotly = {then: function (a, b) { return p.then(a, b); }};"
    " window.headscopePlotly = done; })();"
)


def plotly_tag(prefix: str) -> str:
    return (
        f"<script>{PLOTLY_PROMISE}</script>"
        f'<script defer id="plotly-js" src="{prefix}{PLOTLY_JS}"'
        ' onload="window.headscopePlotly.res(window.Plotly)"'
        " onerror=\"delete window.Plotly; window.headscopePlotly.rej(new Error('plotly.js'))\">"
        "</script>"
    )


PREVIEW_PATH = "_headscope/preview"
# the gallery's first row drawn from what is stored (``pages/text/preview.py``), asked for while the
# page is parsed and shown over the gallery's place until plotly draws the row, then removed
PREVIEW_JS = """(function () {
  var box = document.getElementById('stored-preview'), t0 = Date.now();
  function drawn() {
    var g = document.querySelector('#head-gallery .js-plotly-plot');
    var m = g && g.layout && g.layout.meta && g.layout.meta.gallery;
    return !!(m && m.panels && m.panels.length);
  }
  function place() {
    if (!box.isConnected) { return; }
    var fold = document.getElementById('text-fold-gallery'), svg = box.firstElementChild;
    var row = fold && fold.querySelector('.control-row');
    if (drawn() || Date.now() - t0 > 30000) {
      if (fold) { fold.style.minHeight = ''; }
      box.remove(); return;
    }
    if (row && svg) {  // where the gallery's graph starts, the fold keeping room for the row
      var f = fold.getBoundingClientRect(), r = row.getBoundingClientRect();
      var top = parseFloat(svg.dataset.top);
      fold.style.minHeight = (r.bottom - f.top + top + svg.height.baseVal.value + 10) + 'px';
      box.style.left = (r.left + window.scrollX + parseFloat(svg.dataset.left)) + 'px';
      box.style.top = (r.bottom + window.scrollY + top) + 'px';
    }
    window.requestAnimationFrame(place);
  }
  fetch(URL, {credentials: 'same-origin'})
    .then(function (r) { return r.status === 200 ? r.text() : ''; })
    .then(function (svg) {
      if (!svg || drawn()) { box.remove(); return; }
      box.innerHTML = svg; box.hidden = false; place();
    })
    .catch(function () { box.remove(); });
})();"""


def preview_tag(prefix: str, args: dict[str, str]) -> str:
    """The placeholder and script of the stored result's first row (docs/dashboard.md, "The first
    row before plotly.js"), for a page opened from a stored result's link; "" for any other."""
    import json
    from urllib.parse import urlencode

    keys = ("share",) if args.get("share") else ("analysis", "layers", "gpage")
    query = {k: args[k] for k in keys if args.get(k)}
    if not (query.get("share") or query.get("analysis")):
        return ""
    url = json.dumps(f"{prefix}{PREVIEW_PATH}?{urlencode(query)}").replace("<", "\\u003c")
    return (
        '<div id="stored-preview" class="stored-preview" hidden></div>'
        f"<script>{PREVIEW_JS.replace('URL', url, 1)}</script>"
    )


class HeadscopeDash(dash.Dash):
    """Dash, its page without plotly.js where the page opened draws no graph: the start page (``/``
    without a query, ``/start``); ``dcc.Graph`` loads it itself on a page reached from there. A
    stored result's link (``/?analysis=ID``, ``/?share=ID``) gets its gallery's first row as a
    picture before Dash has started (``preview_tag``). A page that draws no AG Grid loads its bundle
    only once a grid is drawn (``kit/lazygrid.py``)."""

    def interpolate_index(self, **kwargs: Any) -> str:
        from flask import has_request_context, request

        page: str = super().interpolate_index(**kwargs)
        if has_request_context():
            path = request.path.rstrip("/") or "/"
            if path not in GRID_PATHS:
                page = lazygrid.defer_grid(page)
            if path == START or (path == "/" and not request.query_string):
                page = page.replace(plotly_tag(self.config.requests_pathname_prefix), "")
            elif path in ("/", ROOT_WITH_QUERY):
                tag = preview_tag(self.config.requests_pathname_prefix, request.args.to_dict())
                page = page.replace(
                    '<div id="react-entry-point"', tag + '<div id="react-entry-point"', 1
                )
        return page


def index_string(prefix: str) -> str:
    """Dash's page with plotly.js fetched and run while Dash starts (docs/dashboard.md, "A stored
    page"): dcc.Graph takes ``window.Plotly`` when it is defined, and loads plotly.js itself
    (once the layout has mounted a graph) only when it is not. A deferred script runs once the
    page is parsed and the file is in, mostly before Dash's first answer can mount a graph; a graph
    mounted before waits on ``PLOTLY_PROMISE``."""
    return f"""<!DOCTYPE html>
<html>
    <head>
        {{%metas%}}
        <title>{{%title%}}</title>
        {{%favicon%}}
        {{%css%}}
        {plotly_tag(prefix)}
    </head>
    <body>
        {{%app_entry%}}
        <footer>
            {{%config%}}
            {{%scripts%}}
            {{%renderer%}}
        </footer>
    </body>
</html>"""


def _nav() -> html.Nav:
    return frontdoor.nav(PAGE_MODULES)


def shell() -> html.Div:
    return html.Div(
        className="app",
        children=[
            dcc.Location(id="url", refresh=False),
            _nav(),
            html.Main(id="page-content"),
        ],
    )


def render_page(store: ResultStore, pathname: str | None, search: str | None) -> Any:
    """The layout of the page at ``pathname``; a share link opens the page named in its view."""
    query = parse_query(search)
    path = pathname or "/"
    share = None
    if query.get("share"):
        try:
            share = store.opening(query["share"])  # without the result, read ahead meanwhile
            if (share.get("view") or {}).get("page") == "pe" or share.get("kind") == "pe":
                share = store.share(query["share"])  # the PE page's layout draws from the result
        except ApiError as exc:
            msg = "this share link does not exist" if exc.status == 404 else str(exc)
            return html.Div(
                className="page",
                children=[
                    html.H2("Share link"),
                    html.Div(msg, className="error", id="share-error"),
                ],
            )
        kind = share.get("kind")
        page = (share.get("view") or {}).get("page") or (
            kind if kind in ("pe", "corpus") else "text"
        )
        path = PAGE_BY_NAME.get(page, path)
    if path in ("", "/"):
        path = ROOT_WITH_QUERY if query else START
    module = PAGES.get(path.rstrip("/") or "/")
    if module is None:
        return html.Div(
            className="page",
            children=[
                html.H2("Not found"),
                html.P(f"There is no page at {path}."),
                dcc.Link("Start page", href="/"),
            ],
        )
    return module.layout(store, query, share=share)


def create_dash_app(api_base_url: str, *, client: ApiClient | None = None) -> dash.Dash:
    """The dashboard, talking to the API at ``api_base_url`` over HTTP."""
    client = client or ApiClient(api_base_url)
    store = ResultStore(client)
    # Dash encodes every answer with plotly's JSON engine, orjson when installed (it is: workers.core.jsonable):
    # its engine walks each list in Python first, and the gallery's head maps (lists of floats) took
    # more CPU than with the standard library's (docs/dashboard.md, "Measured costs the code points
    # to")
    pio.json.config.default_engine = "json"
    app = HeadscopeDash(
        __name__,
        requests_pathname_prefix="/",
        serve_locally=True,
        assets_folder=str(ASSETS),
        title="headscope",
        update_title=None,
        suppress_callback_exceptions=True,
        compress=False,
    )
    app.index_string = index_string(app.config.requests_pathname_prefix)
    app.layout = shell()

    @app.callback(
        Output("page-content", "children"), Input("url", "pathname"), State("url", "search")
    )
    def _route(pathname: str | None, search: str | None) -> Any:
        try:
            return render_page(store, pathname, search)
        except Exception:  # a page that cannot render must still show the navigation
            logger.exception("cannot render %s%s", pathname, search or "")
            return html.Div("This page could not be shown; see the server log.", className="error")

    for module in PAGES.values():
        module.register(app, store)
    app.server.config["HEADSCOPE_API"] = client.base_url
    docs.register_routes(app.server)

    @app.server.route(f"/{PREVIEW_PATH}")
    def _stored_preview() -> Any:
        """The stored result's first gallery row as SVG (``preview_tag``); 204 when there is none."""
        from flask import Response, request

        from frontend.pages.text.preview import stored_preview

        try:
            svg = stored_preview(store, request.args.to_dict())
        except Exception:  # the page draws the gallery as before
            logger.exception("no preview for %s", request.query_string)
            svg = None
        if svg is None:
            return Response(status=204)
        return Response(svg, mimetype="image/svg+xml", headers={"Cache-Control": "no-store"})

    @app.server.before_request
    def _api_paths_are_not_pages() -> Any:
        """An /api/ path the API did not answer is a 404, not the dashboard's index page."""
        from flask import jsonify, request

        if request.path == "/api" or request.path.startswith("/api/"):
            return jsonify({"detail": f"not found: {request.path}"}), 404
        return None

    @app.server.after_request
    def _client_cookie(response: Any) -> Any:
        """Give each browser a random client id (its uploads are listed to it alone)."""
        import secrets

        from flask import request

        if not request.cookies.get(CLIENT_COOKIE):
            response.set_cookie(
                CLIENT_COOKIE,
                secrets.token_urlsafe(18),
                max_age=365 * 86400,
                httponly=True,
                samesite="Lax",
            )
        return response

    return app
