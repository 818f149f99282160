"""The /causal page in a real headless Chromium against the real service (issue 23): the tiny GPT-2
(a decoder with a head) on a clean / corrupted pair, every view drawn, a click on a head opens it in
the text explorer, the share link restores the view. MiniLM is offered but disabled (no head).
Screenshots: ``test-artifacts/browser-causal-*.png``."""

from __future__ import annotations

import pytest
from test_browser import FIGURE_JS, WAIT_MS, Watch, browser, server  # noqa: F401 - fixtures

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CLEAN = "The head of the model is in the text and the word is of the token"
CORRUPTED = "The head of the model is in the text and a word is of the token"
HEAD_CELL_JS = """([id, layer, head]) => {
  const gd = document.querySelector('#' + id + ' .js-plotly-plot'), fl = gd._fullLayout;
  const r = gd.getBoundingClientRect();
  return [r.left + fl.xaxis._offset + fl.xaxis.l2p(head), r.top + fl.yaxis._offset + fl.yaxis.l2p(layer)];
}"""
DONE_JS = "document.querySelector('#causal-status').textContent.trim() === 'done'"


def test_causal_page_views_head_link_and_share(server, browser, tmp_path):
    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        page.goto(server + "/causal")
        assert "tiny-gpt2" in page.inner_text("#causal-models-hint")
        page.click("#causal-model")
        option = page.get_by_role("option", name="minilm").first
        assert "no language-model head" in option.inner_text()
        assert option.get_attribute("aria-disabled") == "true" or option.is_disabled()
        page.keyboard.press("Escape")
        page.click("#causal-model")
        page.get_by_role(
            "option", name="tiny-gpt2"
        ).first.click()  # not the default SmolLM2: seconds, not minutes
        page.fill("#causal-text", CLEAN)
        page.fill("#causal-corrupted", CORRUPTED)
        page.fill(
            "#causal-target", "#5|#9"
        )  # a random model: name the pair instead of its top predictions
        page.click("#causal-analyze")
        page.wait_for_function(
            DONE_JS + " || document.querySelector('#causal-error').textContent", timeout=WAIT_MS
        )
        assert not page.inner_text("#causal-error"), page.inner_text("#causal-error")
        for gid in (
            "causal-surprisal-graph",
            "causal-lens-graph",
            "causal-attribution-graph",
            "causal-ablation-graph",
            "causal-patch-residual-graph",
            "causal-patch-heads-graph",
        ):
            page.wait_for_selector(f"#{gid} .heatmaplayer", timeout=WAIT_MS)
        att = page.evaluate(FIGURE_JS, "causal-attribution-graph")
        assert "frozen" in att["title"] and len(att["data"][0]["y"]) == 2  # two layers
        assert page.locator("#causal-topk-table tr").count() == 11  # header + top 10
        assert page.locator("#causal-pair td.differ").count() == 2  # 'the' / 'a', in both rows
        w.shot("causal-1-views")

        page.locator("#causal-attribution-graph").scroll_into_view_if_needed()
        x, y = page.evaluate(HEAD_CELL_JS, ["causal-attribution-graph", 1, 2])
        page.mouse.click(x, y)
        page.wait_for_selector("#causal-open-head", timeout=WAIT_MS)
        assert "L1H2" in page.inner_text("#causal-open-head")
        assert "head=L1H2" in page.url
        page.click("#causal-share-button")
        page.wait_for_function("document.querySelector('#causal-share-url').href", timeout=WAIT_MS)
        link = page.get_attribute("#causal-share-url", "href")
        page.click("#causal-open-head")
        page.wait_for_selector("#head-tsne-graph .scatterlayer .point", timeout=WAIT_MS)
        assert "L1H2" in page.evaluate(FIGURE_JS, "head-tsne-graph")["title"]
        w.shot("causal-2-text-explorer")
        assert not w.problems, w.problems
    finally:
        w.close()

    fresh = Watch(browser, server, tmp_path)
    try:
        fresh.page.goto(link)
        fresh.page.wait_for_selector("#causal-attribution-graph .heatmaplayer", timeout=WAIT_MS)
        again = fresh.page.evaluate(FIGURE_JS, "causal-attribution-graph")
        assert again["title"] == att["title"] and again["data"][0]["y"] == att["data"][0]["y"]
        assert fresh.page.input_value("#causal-corrupted") == CORRUPTED
        assert not fresh.problems, fresh.problems
    finally:
        fresh.close()


def test_causal_page_on_gemma3(server, browser, tmp_path):
    """Gemma 3 270M (real weights, a 262,144-token vocabulary, 72 heads): every causal view drawn on
    the Eiffel Tower / Colosseum pair; the top prediction is " Paris"."""
    from test_browser import ARTIFACTS

    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        page.goto(server + "/causal")
        page.click("#causal-model")
        page.get_by_role("option", name="gemma3-270m").first.click()
        page.fill("#causal-text", "The Eiffel Tower is located in the city of")
        page.fill("#causal-corrupted", "The Colosseum is located in the city of")
        page.click("#causal-analyze")
        page.wait_for_function(
            DONE_JS + " || document.querySelector('#causal-error').textContent", timeout=WAIT_MS
        )
        assert not page.inner_text("#causal-error"), page.inner_text("#causal-error")
        for gid in (
            "causal-surprisal-graph",
            "causal-lens-graph",
            "causal-attribution-graph",
            "causal-ablation-graph",
            "causal-patch-residual-graph",
            "causal-patch-heads-graph",
        ):
            page.wait_for_selector(f"#{gid} .heatmaplayer", timeout=WAIT_MS)
        att = page.evaluate(FIGURE_JS, "causal-attribution-graph")
        assert len(att["data"][0]["y"]) == 18  # one row a layer
        assert "Paris" in page.inner_text("#causal-topk-table")
        w.shot("causal-gemma3")
        for gid in ("causal-lens-graph", "causal-attribution-graph", "causal-patch-heads-graph"):
            page.locator(f"#{gid}").screenshot(
                path=str(ARTIFACTS / f"browser-causal-gemma3-{gid}.png")
            )
        assert not w.problems, w.problems
    finally:
        w.close()
