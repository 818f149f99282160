"""The Dash app without a browser: layouts, ids, callbacks, offline assets, request builders, client."""

from __future__ import annotations

import json
import re
import socket

import httpx
import pytest

from frontend.kit.api_client import ApiClient, ApiError, _detail
from frontend.kit.data import int_list, parse_query, query_string

REQUIRED_IDS = [
    "text-input",
    "analyze-button",
    "max-attention-graph",
    "head-tsne-graph",
    "text-share-button",
    "text-share-url",
]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def app():
    from frontend.app import create_dash_app

    return create_dash_app(f"http://127.0.0.1:{_closed_port()}")  # no API: pages must still render


def _ids(component) -> set:
    found = set()
    stack = [component]
    while stack:
        c = stack.pop()
        if isinstance(c, (list, tuple)):
            stack.extend(c)
            continue
        cid = getattr(c, "id", None)
        if cid is not None:
            found.add(cid if isinstance(cid, str) else str(cid))
        children = getattr(c, "children", None)
        if children is not None and not isinstance(children, str):
            stack.append(children)
    return found


def test_pages_render_with_stable_ids(app):
    from frontend.app import PAGES, ResultStore, render_page

    store = ResultStore(ApiClient(f"http://127.0.0.1:{_closed_port()}"))
    home = _ids(render_page(store, "/text", ""))
    assert home == _ids(render_page(store, "/", "?layer=1"))  # "/" with a query: the text explorer
    assert set(REQUIRED_IDS) <= home
    assert {
        "text-layer",
        "text-head",
        "hidden-tsne-graph",
        "attention-matrix-graph",
        "text-options",
        "text-restarts",
        "text-view-options",
        "text-progress-bar",
    } <= home
    for path, prefix in [
        ("/terms", "terms"),
        ("/words", "words"),
        ("/pe", "pe"),
        ("/lasf", "lasf"),
        ("/corpus", "corpus"),
        ("/causal", "causal"),
        ("/compare", "compare"),
        ("/circuits", "circuits"),
        ("/heads", "heads"),
    ]:
        ids = _ids(render_page(store, path, ""))
        assert f"{prefix}-share-button" in ids and f"{prefix}-export-json" in ids, path
        assert all(i.startswith(prefix) for i in ids), f"ids of {path} are prefixed by the page"
    assert {
        "pe-upload",
        "pe-demo-button",
        "pe-run-button",
        "pe-distance-graph",
        "pe-map-graph",
    } <= _ids(render_page(store, "/pe", ""))
    sets = _ids(render_page(store, "/circuits/sets", ""))  # the data-set mode of /circuits
    assert {"cs-share-button", "cs-analyze", "cs-curve-graph", "cs-stability-graph"} <= sets
    assert all(i.startswith(("cs-", "circuit-sets-")) for i in sets)
    assert "no page at /nope" in str(render_page(store, "/nope", ""))
    assert set(PAGES) == {
        "/start",
        "/circuits/sets",
        "/text",
        "/heads",
        "/terms",
        "/words",
        "/pe",
        "/lasf",
        "/corpus",
        "/causal",
        "/compare",
        "/circuits",
    }
    assert {"lasf-phi-graph", "lasf-relation-graph", "lasf-field-graph", "lasf-tsne-graph"} <= _ids(
        render_page(store, "/lasf", "")
    )
    missing_share = str(render_page(store, "/", "?share=abc"))
    assert "not reachable" in missing_share or "does not exist" in missing_share


def test_required_outputs_have_callbacks(app):
    outputs = " ".join(app.callback_map)
    for target in [
        "max-attention-graph.figure",
        "head-tsne-graph.figure",
        "text-share-url.children",
        "text-source.data",
        "terms-curves-graph.figure",
        "words-tsne-graph.figure",
        "pe-distance-graph.figure",
        "pe-metrics.children",
        "page-content.children",
    ]:
        assert target in outputs, target


def test_everything_is_served_locally(app):
    client = app.server.test_client()
    index = client.get("/").get_data(as_text=True)
    assert "<title>headscope</title>" in index
    urls = re.findall(r'(?:src|href)="([^"]+)"', index)
    assert urls and not [u for u in urls if u.startswith(("http:", "https:", "//"))]
    for url in urls:
        assert client.get(url).status_code == 200, url
    assert all(f"/assets/{f}" in index for f in ("highlight.js", "export.js", "style.css"))
    assert client.get("/terms").status_code == 200  # client-side routes get the index too
    # plotly.js asked for at navigation (frontend.app.index_string) where the page draws graphs,
    # not on the start page
    plotly = 'src="/_dash-component-suites/plotly/package_data/plotly.min.js"'
    assert plotly not in index and plotly not in client.get("/start").get_data(as_text=True)
    for page in ("/?analysis=x", "/text", "/terms", "/?share=x"):
        assert client.get(page).get_data(as_text=True).count(plotly) == 1, page
    # AG Grid's bundle only on the pages that draw a grid; elsewhere a stub that loads the same file
    # once a grid is drawn (frontend/kit/lazygrid.py)
    grid = re.compile(r'<script src="([^"]*/dash_ag_grid/dash_ag_grid[^"]*\.js)"></script>')
    src = grid.search(client.get("/heads").get_data(as_text=True)).group(1)
    for page in ("/heads", "/corpus", "/compare"):
        html = client.get(page).get_data(as_text=True)
        assert grid.search(html) and "headscopeStub" not in html, page
    for page in ("/", "/start", "/?analysis=x", "/text", "/?share=x", "/causal"):
        html = client.get(page).get_data(as_text=True)
        assert not grid.search(html) and html.count(f"s.src = {json.dumps(src)};") == 1, page
        assert html.index("headscopeStub") < html.index("dash_renderer"), page  # before Dash starts
    assert client.get(src).status_code == 200
    missing = client.get("/api/shares/..%2F..%2Fetc%2Fpasswd")  # not a page: the API's 404
    assert missing.status_code == 404 and "not found" in missing.get_json()["detail"]
    css = client.get("/assets/style.css").get_data(as_text=True)
    assert "@import" not in css and "url(http" not in css  # no web fonts or remote files


def test_corpus_table_is_an_ag_grid_that_sorts_filters_and_exports_without_deprecation():
    """The corpus table is dash-ag-grid's AgGrid (dash_table.DataTable is deprecated in Dash 4 and
    warned on every render): columns sort and filter, a button exports the grid as CSV, rows are
    identified by their head's name (a click selects it)."""
    import warnings

    import dash_ag_grid as dag

    from frontend.app import GRID_PATHS, PAGES, ResultStore, render_page

    store = ResultStore(ApiClient(f"http://127.0.0.1:{_closed_port()}"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pages = {path: render_page(store, path, "") for path in PAGES}
    assert not [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]

    def grids_of(layout: object) -> list:
        stack, found = [layout], []
        while stack:
            c = stack.pop()
            if isinstance(c, (list, tuple)):
                stack.extend(c)
                continue
            found += [c] if isinstance(c, dag.AgGrid) else []
            children = getattr(c, "children", None)
            if children is not None and not isinstance(children, str):
                stack.append(children)
        return found

    grids = grids_of(pages["/corpus"])
    assert [g.id for g in grids] == ["corpus-table"]
    # a page that lays out a grid is served with AG Grid's bundle (frontend/kit/lazygrid.py)
    assert {path for path, layout in pages.items() if grids_of(layout)} <= GRID_PATHS
    grid = grids[0]
    assert (
        grid.defaultColDef["sortable"]
        and grid.defaultColDef["filter"]
        and grid.getRowId == "params.data.head"
    )
    assert grid.csvExportParams["fileName"].endswith(".csv") and "corpus-table-csv" in _ids(
        pages["/corpus"]
    )


def test_text_request_holds_the_whole_head_view():
    from frontend.pages.text import text_request

    plain = text_request(
        text="a b", model="minilm", drop_special=False, restarts=1, layer=None, head=None
    )
    assert plain["analyses"] == ["max-attention", "head-tsne", "hidden-tsne"]
    assert (plain["options"]["layer"], plain["options"]["head"]) == (
        0,
        0,
    )  # no head picked yet: the first
    head = text_request(text="a b", model="minilm", drop_special=True, restarts=3, layer=2, head=5)
    assert head["analyses"] == ["max-attention", "head-tsne", "hidden-tsne"]
    # the picked head first, then every head (the gallery) and every hidden state: one request
    assert head["options"] == {
        "drop_special": True,
        "restarts": 3,
        "layer": 2,
        "head": 5,
        "all_heads": True,
        "hidden_layer": "all",
    }
    from workers.core.contracts import AnalysisRequest

    AnalysisRequest(**head)  # valid against the API contract


def test_the_corpus_and_compare_requests_fit_their_contracts():
    from frontend.pages.compare import compare_request
    from frontend.pages.corpus.requests import corpus_request
    from workers.core.contracts import CompareRequest, CorpusRequest

    body = corpus_request(model="minilm", corpus="builtin-english", max_tokens="64", keep_special=1)
    assert body == {
        "model": "minilm",
        "corpus": "builtin-english",
        "options": {"max_tokens": 64, "keep_special": True},
    }
    CorpusRequest(**body)  # valid against the API contract
    pair = dict(
        model_a="minilm", model_b="bert", text="a b", corpus="builtin-english", max_tokens=None
    )
    assert compare_request(source="text", **pair) == {
        "model_a": "minilm", "model_b": "bert", "max_tokens": 128, "text": "a b"
    }  # fmt: skip
    CompareRequest(**compare_request(source="corpus", **pair))


def test_pe_request_validation():
    from frontend.pages.pe import pe_request

    ckpts = [{"id": "demo-a", "tensor": None}, {"id": "up-1", "tensor": "pe"}]
    body = pe_request(
        checkpoints=ckpts,
        reference="2d-fixed",
        grid=(4, 4),
        sigma=1.0,
        seed=0,
        reference_checkpoint=None,
        partition="rows",
        csv=None,
        metric="euclidean",
    )
    assert body["reference"] == {"kind": "2d-fixed", "grid": [4, 4]}
    assert body["partition"] == {"kind": "rows", "grid": [4, 4]}
    assert body["checkpoints"] == [{"id": "demo-a", "tensor": None}, {"id": "up-1", "tensor": "pe"}]
    ref = pe_request(
        checkpoints=ckpts,
        reference="checkpoint",
        grid=(4, 4),
        sigma=1.0,
        seed=0,
        reference_checkpoint="up-1",
        partition="none",
        csv=None,
        metric="cosine",
    )
    assert ref["reference"] == {"kind": "checkpoint", "checkpoint": {"id": "up-1", "tensor": "pe"}}
    with pytest.raises(ValueError, match="reference"):
        pe_request(
            checkpoints=ckpts,
            reference="checkpoint",
            grid=(4, 4),
            sigma=1.0,
            seed=0,
            reference_checkpoint=None,
            partition="none",
            csv=None,
            metric="euclidean",
        )
    with pytest.raises(ValueError, match="position,label"):
        pe_request(
            checkpoints=ckpts,
            reference="none",
            grid=(4, 4),
            sigma=1.0,
            seed=0,
            reference_checkpoint=None,
            partition="csv",
            csv="  ",
            metric="euclidean",
        )


def test_url_state_round_trip():
    q = query_string(
        {
            "analysis": "abc",
            "layer": 0,
            "head": 11,
            "rescale": False,
            "layers": [0, 5],
            "token": None,
        }
    )
    assert q == "?analysis=abc&layer=0&head=11&rescale=0&layers=0%2C5"
    back = parse_query(q)
    assert back == {"analysis": "abc", "layer": "0", "head": "11", "rescale": "0", "layers": "0,5"}
    assert int_list(back["layers"]) == [0, 5] and int_list("x,1") is None
    assert query_string({}) == ""


def test_api_errors_carry_the_servers_reason():
    req = httpx.Request("GET", "http://x/api")
    assert (
        _detail(httpx.Response(400, json={"detail": "unknown model 'x'"}, request=req))
        == "unknown model 'x'"
    )
    pydantic = {"detail": [{"loc": ["body", "text"], "msg": "the text is empty"}]}
    assert _detail(httpx.Response(422, json=pydantic, request=req)) == "text: the text is empty"
    assert _detail(httpx.Response(502, text="Bad gateway", request=req)) == "Bad gateway"
    client = ApiClient(f"http://127.0.0.1:{_closed_port()}", timeout=2)
    with pytest.raises(ApiError, match="not reachable"):
        client.health()
    with pytest.raises(ValueError, match="exactly one"):
        client.create_share(view={}, analysis_id="a", pe_analysis_id="b")


def test_a_truncated_text_request_fits_the_api_and_others_keep_their_ids():
    from frontend.pages.text import limits, text_request
    from workers.core.contracts import AnalysisRequest
    from workers.core.errors import offers_truncation

    long = "the cat sat on the mat " * 1000  # 23,000 characters
    kw = {"model": "minilm", "drop_special": False, "restarts": 1, "layer": None, "head": None}
    cut = text_request(text=long, truncate=True, **kw)
    assert cut["options"]["truncate"] is True and cut["text"] == long[:20_000]
    AnalysisRequest.model_validate(cut)  # the API takes it; the worker cuts it to the model's limit
    assert "truncate" not in text_request(text=long, **kw)["options"]  # off: the id as before
    refused = limits.too_many_characters(long)
    assert refused is not None and "23,000 characters" in refused and offers_truncation(refused)
    assert limits.too_many_characters(long[:20_000]) is None
    assert limits.offer_style(refused) == limits.SHOWN
    assert limits.offer_style("layer 9 is out of range") == limits.HIDDEN


def test_a_share_link_is_laid_out_without_its_result_and_reads_it_once():
    """The page of a share link is laid out from the share without its result (``?result=none``);
    the result is read ahead meanwhile, and the page's first read of it (the poll) waits for that
    one download instead of making another (a SmolLM2 share's layout waited for its 12 MB result)."""
    import threading
    import time

    from frontend.app import ResultStore, render_page

    request = {"model": "minilm", "text": "A shared text.", "analyses": ["max-attention"],
               "options": {"layer": 1, "head": 2}}  # fmt: skip
    share = {"id": "s" * 22, "kind": "analysis", "target": "t" * 32, "view": {"page": "text"},
             "request": request}  # fmt: skip
    calls: list[str | None] = []
    release = threading.Event()

    class Client(ApiClient):
        def models(self):  # type: ignore[no-untyped-def]
            return {
                "default": "minilm",
                "models": [{"name": "minilm", "n_layers": 6, "n_heads": 12}],
            }

        def share(self, share_id, *, result=None, sections=None):  # type: ignore[no-untyped-def]
            calls.append(result)
            if result == "none":
                return dict(share)
            release.wait(5)  # the result's download, still on its way while the page is laid out
            return {**share, "result": {"max-attention": {"max_attention": [[[0.5]]]}}}

    store = ResultStore(Client(f"http://127.0.0.1:{_closed_port()}"))
    page = render_page(store, "/", f"?share={share['id']}")
    assert "text-page" in _ids(page) and calls[0] == "none"  # laid out with no result read
    polls = [threading.Thread(target=store.status, args=({"kind": "share", "id": share["id"]},))
             for _ in range(2)]  # fmt: skip
    for t in polls:
        t.start()
    time.sleep(0.2)
    release.set()
    for t in polls:
        t.join(5)
    st = store.status({"kind": "share", "id": share["id"]})
    assert st["status"] == "finished" and st["result"]["max-attention"]
    assert st["request"] == request and st["view"] == {"page": "text"}
    assert calls == ["none", None], (
        calls
    )  # the result read once: ahead, the reads after wait for it


def test_an_analysis_link_is_laid_out_without_its_result_and_reads_it_once():
    """The same for ``/?analysis=ID``: the layout asks for the status without the result; the finished
    result is read ahead, once, and the page's first poll gets it from that read."""
    import threading
    import time

    from frontend.app import ResultStore, render_page

    request = {"model": "minilm", "text": "A stored text.", "analyses": ["max-attention"],
               "options": {"layer": 1, "head": 2}}  # fmt: skip
    calls: list[str | None] = []
    release = threading.Event()

    class Client(ApiClient):
        def models(self):  # type: ignore[no-untyped-def]
            return {
                "default": "minilm",
                "models": [{"name": "minilm", "n_layers": 6, "n_heads": 12}],
            }

        def analysis(self, analysis_id, *, partial=None, result=None, sections=None):  # type: ignore[no-untyped-def]
            calls.append(result)
            done = {"id": analysis_id, "status": "finished", "request": request, "progress": 1.0}
            if result == "none":
                return done
            release.wait(5)  # the result's download, still on its way while the page is laid out
            return {**done, "result": {"max-attention": {"max_attention": [[[0.5]]]}}}

    store = ResultStore(Client(f"http://127.0.0.1:{_closed_port()}"))
    page = render_page(store, "/", "?analysis=" + "a" * 32)
    stack, text = [page], None
    while stack:  # the text box holds the stored request's text
        c = stack.pop()
        if isinstance(c, (list, tuple)):
            stack.extend(c)
        elif getattr(c, "id", None) == "text-input":
            text = c.value
        elif getattr(c, "children", None) is not None and not isinstance(c.children, str):
            stack.append(c.children)
    assert text == "A stored text." and calls[0] == "none"  # laid out from the status alone
    source = {"kind": "analysis", "id": "a" * 32}
    polls = [threading.Thread(target=store.status, args=(source,)) for _ in range(2)]
    for t in polls:
        t.start()
    time.sleep(0.2)
    release.set()
    for t in polls:
        t.join(5)
    st = store.status(source)
    assert st["status"] == "finished" and st["result"]["max-attention"] and st["request"] == request
    assert calls == ["none", None], (
        calls
    )  # the result read once: ahead, the reads after wait for it


def test_a_share_of_an_analysis_this_server_holds_reads_no_result():
    """A share's result is its analysis' stored result: a page server that holds that analysis
    finished (the page shared from, its link opened) lays out and polls the share from it, with
    only the share's ``?result=none`` read, not the result's megabytes again."""
    from frontend.app import ResultStore

    result = {"max-attention": {"max_attention": [[[0.5]]]}}
    request = {"model": "minilm", "text": "A shared text.", "analyses": ["max-attention"]}
    calls: list[tuple[str, str | None]] = []

    class Client(ApiClient):
        def analysis(self, analysis_id, *, partial=None, result=None, sections=None):  # type: ignore[no-untyped-def]
            calls.append(("analysis", result))
            return {"id": analysis_id, "status": "finished", "request": request, "progress": 1.0,
                    "result": result_}  # fmt: skip

        def share(self, share_id, *, result=None, sections=None):  # type: ignore[no-untyped-def]
            calls.append(("share", result))
            share = {"id": share_id, "kind": "analysis", "target": "a" * 32, "view": {"page": "text"},
                     "request": request}  # fmt: skip
            return share if result == "none" else {**share, "result": result_}

    result_ = result
    store = ResultStore(Client(f"http://127.0.0.1:{_closed_port()}"))
    assert store.status({"kind": "analysis", "id": "a" * 32})["result"] == result
    calls.clear()
    assert store.opening("s" * 22)["result"] == result
    st = store.status({"kind": "share", "id": "s" * 22})
    assert st["status"] == "finished" and st["result"] == result and st["view"] == {"page": "text"}
    assert calls == [("share", "none")], calls
    other = ResultStore(Client(f"http://127.0.0.1:{_closed_port()}"))  # holds no analysis
    other.opening("s" * 22)
    other.status({"kind": "share", "id": "s" * 22})
    assert ("share", None) in calls[1:], calls  # the result read, as before


WARMED = ("workers.data", "frontend.pages.text.preview", "plotly.graph_objs._layout")


def test_the_warm_up_answers_a_stored_links_first_requests_and_imports_what_they_import():
    """``frontend.warmup.warm_up`` (``headscope serve`` runs it before it announces itself): in a
    fresh process, every request a stored result's link makes first is answered, and the modules the
    callbacks import when first called are imported (docs/dashboard.md, "A fresh page server warmed
    up")."""
    import subprocess
    import sys
    from pathlib import Path

    code = f"""
import json, sys, httpx
from frontend.app import create_dash_app
from frontend.warmup import warm_up
dash = create_dash_app("http://127.0.0.1:{_closed_port()}")
before = [m for m in {WARMED!r} if m in sys.modules]
with httpx.Client(transport=httpx.WSGITransport(app=dash.server), base_url="http://page") as c:
    done = warm_up(c)
print(json.dumps({{"before": before, "after": [m for m in {WARMED!r} if m in sys.modules],
                  "status": done["status"]}}))
"""
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120,
        env={**__import__("os").environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["before"] == [] and got["after"] == list(WARMED), got
    assert got["status"] == [200, 200, 200, 204, 200, 200], got  # the preview: 204, none stored
