"""The front door in a real headless Chromium against the real service: the start page at "/" with
every view by its question, the grouped nav, old links (a "/?share=" link, "/?model=...&text=...")
still opening the text explorer, a one-click example running, a URL's model that cannot run
named on screen, the causal page on SmolLM2 by default, each page's "?" and terms opening the docs
(rendered, with images, offline), the PE upload error naming the file once.
Screenshots: ``test-artifacts/browser-frontdoor-*.png``."""

from __future__ import annotations

import pytest
from conftest import ROOT
from test_browser import WAIT_MS, Watch, browser, server  # noqa: F401 - fixtures

pytestmark = [pytest.mark.browser, pytest.mark.slow]

QUESTIONS = (
    "What does each head attend to?",
    "Is it the same on every text?",
    "Does another model do it too?",
    "Does a head matter?",
    "Which heads work together?",
    "How are the hidden states built?",
    "What did my positional encodings learn?",
)
TEXT_DONE = (
    "document.querySelector('#text-status') && "
    "(document.querySelector('#text-status').textContent.includes('done') "
    "|| document.querySelector('#text-error').textContent)"
)


def test_start_page_nav_docs_and_model_messages(server, browser, tmp_path):
    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        page.goto(server + "/")
        page.wait_for_selector("#start-page", timeout=WAIT_MS)
        body = page.inner_text("#start-page")
        assert all(q in body for q in QUESTIONS), body
        assert "smollm2" in page.get_attribute("#start-example-causal", "href")
        nav = page.inner_text("nav")
        for group in ("WHAT HEADS DO", "WHETHER HEADS MATTER", "WHAT THE MODEL BUILDS"):
            assert group in nav.upper(), nav
        w.shot("frontdoor-start")

        page.click("#nav-causal")  # the nav label is the page's title; it opens on SmolLM2
        page.wait_for_selector("#causal-page", timeout=WAIT_MS)
        assert page.inner_text("#causal-page h2").startswith("Causal")
        assert "Does a head matter?" in page.inner_text("#causal-page")
        assert "smollm2" in page.inner_text("#causal-model")
        help_href = page.get_attribute("#causal-help", "href")
        got = page.request.get(server + help_href)
        assert got.status == 200 and "<h1" in got.text() and "Causal views" in got.text()
        term = page.locator("#causal-page a.term").first
        tip, href = term.get_attribute("title"), term.get_attribute("href")
        assert len(tip) > 40 and href.startswith("/help/glossary#")
        assert f'id="{href.split("#")[1]}"' in page.request.get(server + href).text()

        page.goto(server + "/causal?model=minilm")  # a model that cannot run the view: named
        page.wait_for_selector("#url-model-error", timeout=WAIT_MS)
        msg = page.inner_text("#url-model-error")
        assert "minilm" in msg and "cannot run the causal views" in msg and "smollm2" in msg
        page.goto(server + "/?model=nope")  # an old-style link: the text explorer, and the message
        page.wait_for_selector("#text-page #url-model-error", timeout=WAIT_MS)
        assert "“nope”" in page.inner_text("#url-model-error")
        w.shot("frontdoor-model-nope")

        page.goto(server + "/help/walkthrough-gemma3")  # the docs, rendered, images from here
        img = page.locator("#help-page img").first
        img.scroll_into_view_if_needed()
        page.wait_for_function(
            "() => { const i = document.querySelector('#help-page img'); "
            "return i.complete && i.naturalWidth > 0; }",
            timeout=60_000,
        )
        assert page.locator("#help-page h2").count() >= 3
        w.shot("frontdoor-help")

        page.goto(server + "/pe")  # an upload that is no checkpoint: the file named once
        page.set_input_files("#pe-upload input[type=file]", str(ROOT / "README.md"))
        page.wait_for_function(
            "document.querySelector('#pe-upload-error').textContent.length > 0", timeout=WAIT_MS
        )
        err = page.inner_text("#pe-upload-error")
        assert err.startswith("README.md: ") and err.count("README.md") == 1, err
        assert not w.problems, w.problems
    finally:
        w.close()


def test_one_click_example_and_old_links_open_the_text_explorer(server, browser, tmp_path):
    """``run=1`` presses Analyze once; the share link (``/?share=ID``) and a ``/?model=&text=`` link
    made before the start page open the text explorer, the share on the same result."""
    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        page.goto(server + "/text?model=tiny-gpt2&text=The+cat+sat+on+the+mat.&run=1")
        page.wait_for_function(TEXT_DONE, timeout=WAIT_MS)
        assert not page.inner_text("#text-error"), page.inner_text("#text-error")
        page.wait_for_selector("#max-attention-graph .heatmaplayer", timeout=WAIT_MS)
        page.wait_for_function(  # ran once; a reload won't rerun (the URL is written a tick later)
            "!location.search.includes('run=') && location.search.includes('analysis=')",
            timeout=WAIT_MS,
        )
        page.click("#text-share-button")
        page.wait_for_function("document.querySelector('#text-share-url').href", timeout=WAIT_MS)
        link = page.get_attribute("#text-share-url", "href")
        assert link.startswith(server + "/?share=")
        assert not w.problems, w.problems
    finally:
        w.close()
    fresh = Watch(browser, server, tmp_path)
    try:
        fresh.page.goto(link)
        fresh.page.wait_for_selector(
            "#text-page #max-attention-graph .heatmaplayer", timeout=WAIT_MS
        )
        assert fresh.page.input_value("#text-input") == "The cat sat on the mat."
        fresh.page.goto(server + "/?model=tiny-gpt2&text=Hello+there")
        fresh.page.wait_for_selector("#text-page", timeout=WAIT_MS)
        assert fresh.page.input_value("#text-input") == "Hello there"
        assert "tiny-gpt2" in fresh.page.inner_text("#text-model")
        assert fresh.page.locator("#start-page").count() == 0
        assert not fresh.problems, fresh.problems
    finally:
        fresh.close()
