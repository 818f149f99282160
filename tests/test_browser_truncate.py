"""A text too long for the model, in a real headless Chromium against the real service: the text
explorer refuses it with the reason and an offer to truncate it to the model's limit (as
``headscope analyze --truncate``); taking the offer ticks the option and analyzes the text's first
tokens; the link keeps the option (docs/dashboard.md, "A text too long")."""

from __future__ import annotations

import pytest
from conftest import ARTIFACTS
from test_browser import WAIT_MS, Watch, _pick, browser, server  # noqa: F401 - fixtures

pytestmark = [pytest.mark.browser, pytest.mark.slow]

OFFER = "#text-truncate-offer"
DONE_JS = (
    "document.querySelector('#text-status').textContent.includes('done')"
    " || document.querySelector('#text-error').textContent"
)
TICKED_JS = (
    "[...document.querySelectorAll('#text-options input')].filter(i => i.checked).map(i => i.value)"
)


def _columns(page) -> int:
    page.wait_for_selector("#max-attention-graph .heatmaplayer", timeout=WAIT_MS)
    # the heatmaps send their weights only: the columns are the figure's tokens (layout.meta.tokens),
    # checked against the width of the first layer's drawn weights
    return page.evaluate(
        """() => {
          const gd = document.querySelector('#max-attention-graph .js-plotly-plot');
          const width = gd.calcdata[0][0].z[0].length, tokens = gd.layout.meta.tokens.length;
          return width === tokens ? tokens : -1;
        }"""
    )


def test_a_text_too_long_offers_truncation_and_the_link_keeps_it(server, browser, tmp_path):
    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        page.goto(server + "/text")
        _pick(page, "text-model", "tiny-llama")  # 64 tokens at most
        assert not page.is_visible(OFFER)
        words = "the cat sat on the mat and the dog ran after it "
        page.fill("#text-input", words * 500)  # 24,000 characters: past the API's 20,000 too
        page.click("#analyze-button")
        page.wait_for_selector(OFFER, state="visible", timeout=WAIT_MS)
        assert "24,000 characters; the limit is 20,000" in page.inner_text("#text-error")
        assert "analysis=" not in page.url  # nothing was queued

        page.fill("#text-input", words * 10)  # past the model's 64 tokens only: the API's words
        page.click("#analyze-button")
        page.wait_for_function(
            "document.querySelector('#text-error').textContent.includes('at most 64')",
            timeout=WAIT_MS,
        )
        assert page.is_visible(OFFER) and "truncation" in page.inner_text("#text-error")
        page.locator("#text-page .controls").screenshot(
            path=str(ARTIFACTS / "browser-truncate-offer.png")
        )

        page.click(OFFER)  # the way on: the option ticked, the text analyzed up to the limit
        page.wait_for_function("window.location.search.includes('analysis=')", timeout=WAIT_MS)
        page.wait_for_function(DONE_JS, timeout=WAIT_MS)
        assert not page.inner_text("#text-error"), page.inner_text("#text-error")
        assert not page.is_visible(OFFER)
        assert "truncate" in page.evaluate(TICKED_JS)
        assert _columns(page) == 64  # the model's limit, special tokens included
        link = page.url
        assert not w.problems, w.problems
    finally:
        w.close()

    fresh = Watch(browser, server, tmp_path)
    try:
        fresh.page.goto(link)  # the link holds the request, and the request the option
        assert _columns(fresh.page) == 64
        assert "truncate" in fresh.page.evaluate(TICKED_JS)
        assert not fresh.problems, fresh.problems
    finally:
        fresh.close()
