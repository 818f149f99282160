"""The front door without a browser: the start page and the routes of old links, the nav grouped by
question, each page's header, the docs at /help, the glossary, a URL's model, the decoder default
(frontend/kit/frontdoor.py, docs.py, glossary.py, forms.py; docs/dashboard.md, "The start page")."""

from __future__ import annotations

import re
import socket
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import pytest

from frontend.kit.api_client import ApiClient


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


MODELS = {
    "default": "minilm",
    "models": [
        {"name": "gemma3-270m", "n_layers": 18, "n_heads": 4, "lm_head": True},
        {
            "name": "minilm",
            "n_layers": 6,
            "n_heads": 12,
            "lm_head": False,
            "lm_head_reason": "an encoder",
        },
        {"name": "smollm2", "n_layers": 30, "n_heads": 9, "lm_head": True},
    ],
}


@pytest.fixture(scope="module")
def store():
    from frontend.kit.data import ResultStore

    class Catalogue(ResultStore):  # the API's model list, without an API
        def models(self):
            return MODELS

    return Catalogue(ApiClient(f"http://127.0.0.1:{_closed_port()}"))


def _walk(component):
    """Every component under ``component``, in document order."""
    if isinstance(component, (list, tuple)):
        for c in component:
            yield from _walk(c)
        return
    if component is None or isinstance(component, (str, int, float)):
        return
    yield component
    children = getattr(component, "children", None)
    if children is not None:
        yield from _walk(children)


def _by_id(component, cid):
    return next((c for c in _walk(component) if getattr(c, "id", None) == cid), None)


def _text(component) -> str:
    out = []
    for c in _walk(component):
        kids = getattr(c, "children", None)
        out += (
            [kids]
            if isinstance(kids, str)
            else [k for k in kids or [] if isinstance(k, str)]
            if isinstance(kids, list)
            else []
        )
    return " ".join(out)


def test_slash_without_a_query_is_the_start_page_and_every_old_link_opens_its_page(store):
    from frontend.app import PAGES, render_page

    assert _by_id(render_page(store, "/", ""), "start-page") is not None
    assert _by_id(render_page(store, "/start", ""), "start-page") is not None
    for query in (
        "?model=smollm2&text=hi",
        "?analysis=abc",
        "?layer=1&head=2",
    ):  # links made before
        page = render_page(store, "/", query)
        assert _by_id(page, "text-page") is not None and _by_id(page, "start-page") is None, query
    for path, module in PAGES.items():  # each page's own path opens it, with or without a query
        for query in ("", "?analysis=abc"):
            assert _by_id(render_page(store, path, query), f"{module.NAME}-page") is not None, path


def test_the_start_page_names_each_view_by_its_question_with_a_one_click_example(store):
    from frontend.app import PAGE_BY_NAME, render_page
    from frontend.kit.frontdoor import GROUPS, VIEWS

    start = render_page(store, "/", "")
    assert (
        _by_id(start, "start-steps") is not None and len(_by_id(start, "start-steps").children) == 3
    )
    want_models = {
        "text": "smollm2",
        "causal": "smollm2",
        "circuits": "smollm2",
        "corpus": "minilm",
        "heads": "minilm",
        "terms": "minilm",
    }
    for name in (
        "text", "corpus", "heads", "compare", "causal", "circuits", "terms", "pe", "words", "lasf"
    ):  # fmt: skip
        card = _by_id(start, f"start-{name}")
        assert card is not None, name
        assert VIEWS[name].question in _text(card) and VIEWS[name].question.endswith("?")
        link = _by_id(card, f"start-example-{name}")
        url = urlsplit(link.href)
        query = parse_qs(url.query)
        assert url.path == PAGE_BY_NAME[name] and query["run"], name
        if name in want_models:
            assert query["model"] == [want_models[name]], name
    assert [g.title for g in GROUPS][:2] == ["What heads do", "Whether heads matter"]


def test_nav_follows_the_groups_and_every_page_title_is_its_nav_label(store):
    from frontend.app import PAGE_MODULES, render_page
    from frontend.kit.frontdoor import VIEWS, grouped, nav

    bar = nav(PAGE_MODULES)
    links = [c for c in _walk(bar) if getattr(c, "className", "") == "nav-link"]
    groups = [
        c.children[0].children for c in _walk(bar) if getattr(c, "className", "") == "nav-group"
    ]
    assert groups == ["What heads do", "Whether heads matter", "What the model builds", "More"]
    labels = {link.id: link.children for link in links}
    for module in PAGE_MODULES:
        if module.NAME == "start":
            continue
        assert labels[f"nav-{module.NAME}"] == module.TITLE
        page = render_page(store, module.PATH, "")
        h2 = next(c for c in _walk(page) if type(c).__name__ == "H2")
        assert h2.children[0] == module.TITLE, module.NAME  # the title is the nav label
        help_link = _by_id(page, f"{module.NAME}-help")
        assert help_link.href.startswith("/help/") and help_link.children == "?"
        assert VIEWS[module.NAME].question in _text(page)
    # a page the table does not list still gets an entry (last group); a listed one without a module none
    extra = SimpleNamespace(NAME="atlas2", PATH="/atlas2", TITLE="Atlas 2")
    titles, mods = grouped([*PAGE_MODULES, extra])[-1]
    assert titles == "More" and mods[-1] is extra
    atlas = next(m for m in PAGE_MODULES if m.NAME == "heads")  # listed, now that its page exists
    assert atlas in grouped(PAGE_MODULES)[0][1]
    without = [m for m in PAGE_MODULES if m is not atlas]  # a listed view without its module: none
    assert "heads" not in {m.NAME for _, ms in grouped(without) for m in ms}


def test_no_two_controls_share_a_label(store):
    from frontend.app import PAGES, render_page

    for path in PAGES:
        page = render_page(store, path, "")
        labels = [
            c.children
            for c in _walk(page)
            if getattr(c, "className", None) == "label" and isinstance(c.children, str)
        ]
        assert len(labels) == len(set(labels)), (path, labels)


def test_a_url_model_that_cannot_run_the_view_says_so_and_names_what_to_pick(store):
    from frontend.app import render_page

    page = render_page(store, "/", "?model=nope&text=hello")
    msg = _by_id(page, "url-model-error")
    assert (
        msg is not None
        and "“nope”" in msg.children
        and "not a model of this service" in msg.children
    )
    assert (
        "gemma3-270m, minilm, smollm2" in msg.children
        and _by_id(page, "text-model").value == "minilm"
    )
    assert _by_id(page, "text-input").value == "hello"
    causal = render_page(store, "/causal", "?model=minilm")
    msg = _by_id(causal, "url-model-error")
    assert "“minilm”" in msg.children and "cannot run the causal views" in msg.children
    assert "gemma3-270m, smollm2" in msg.children and "an encoder" in msg.children
    assert _by_id(causal, "causal-model").value == "smollm2"
    ok = render_page(store, "/causal", "?model=gemma3-270m")
    assert (
        _by_id(ok, "url-model-error") is None and _by_id(ok, "causal-model").value == "gemma3-270m"
    )
    assert _by_id(render_page(store, "/terms", "?model=smollm2"), "terms-model").value == "smollm2"


def test_causal_and_circuits_open_on_smollm2_not_the_first_in_the_alphabet(store):
    from frontend.app import render_page

    assert _by_id(render_page(store, "/causal", ""), "causal-model").value == "smollm2"
    assert _by_id(render_page(store, "/circuits", ""), "circuits-model").value == "smollm2"


def test_docs_are_served_rendered_with_their_images_and_anchors_offline():
    from frontend.app import create_dash_app
    from frontend.kit.docs import page_names

    client = create_dash_app(f"http://127.0.0.1:{_closed_port()}").server.test_client()
    index = client.get("/help").get_data(as_text=True)
    assert all(f"/help/{n}" in index for n in ("README", "glossary", "causal", "dashboard"))
    assert set(page_names()) >= {"README", "glossary", "analyses", "dashboard"}
    page = client.get("/help/dashboard").get_data(as_text=True)
    assert '<h2 id="text-explorer">' in page and "<table>" in page
    assert 'href="/help/analyses#quantile-equidistant-rescaling"' in page  # docs links stay inside
    gemma = client.get("/help/walkthrough-gemma3").get_data(as_text=True)
    images = re.findall(r'<img src="([^"]+)"', gemma)
    assert images and all(src.startswith("/help/img/") for src in images)
    for src in images[:3]:
        got = client.get(src)
        assert got.status_code == 200 and got.mimetype == "image/png", src
    assert client.get("/help/nope").status_code == 404
    for outside in ("/help/..%2Fpyproject.toml", "/help/img/..%2F..%2Fpyproject.toml"):
        got = client.get(outside)  # a 404 or the dashboard's index, never the file
        assert "[build-system]" not in got.get_data(as_text=True), outside
    for name in page_names():  # nothing a docs page loads comes from elsewhere
        html = client.get(f"/help/{name}").get_data(as_text=True)
        assert not re.findall(r'<(?:img|script|link)[^>]+(?:src|href)="(?:https?:)?//', html), name


def test_every_help_link_and_term_points_at_a_section_that_exists():
    from frontend.app import create_dash_app
    from frontend.kit.frontdoor import VIEWS
    from frontend.kit.glossary import lookup, term, terms

    client = create_dash_app(f"http://127.0.0.1:{_closed_port()}").server.test_client()
    glossary = client.get("/help/glossary").get_data(as_text=True)
    required = (
        "qer",
        "kl",
        "x[l]",
        "1/255",
        "local",
        "32 MiB",
        "phi",
        "bonferroni",
        "faithfulness",
    )
    for key in required:  # the terms of art the issue found unexplained on screen
        found = lookup(key)
        assert found is not None and len(found.tip) > 40, key
        assert f'id="{found.anchor}"' in glossary, key
        link = term(key)
        assert link.title == found.tip and link.href == f"/help/glossary#{found.anchor}"
    for view in VIEWS.values():
        page, _, anchor = view.docs.partition("#")
        body = client.get(f"/help/{page.removesuffix('.md')}")
        assert body.status_code == 200, view.docs
        assert not anchor or f'id="{anchor}"' in body.get_data(as_text=True), view.docs
        assert all(lookup(t) for t in view.terms), view.name
    assert len(terms()) >= len(required)


def test_pe_upload_error_names_the_file_once():
    from frontend.pages.pe import upload_error

    assert upload_error("README.md", "README.md: not a checkpoint") == "README.md: not a checkpoint"
    assert upload_error("a.pt", "too large") == "a.pt: too large"
