"""The compare page in a real headless Chromium against the real service: two tiny models (an encoder
and a decoder, different tokenizers) on one text; the similarity matrix, the pairs table and the joint
map draw; a click on a matrix cell shows both heads' word-level maps side by side and puts the cell in
the URL; (the share of a comparison is tested through the API in test_compare_service.py). Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import pytest
from test_browser import WAIT_MS, Watch, _pick, browser, server  # noqa: F401,F811 - fixtures

pytestmark = [pytest.mark.browser, pytest.mark.slow]
WAIT = min(WAIT_MS, 120_000)  # tiny models: every step is seconds

DRAWN = ("(() => {{ const gd = document.querySelector('#{gid} .js-plotly-plot');"
         " return gd && gd._fullData && gd._fullData.length > 0 && gd._fullData[0].type === 'heatmap'"
         " && gd._fullData[0].z && gd._fullData[0].z.length > 1; }})()")


def test_compare_page_matrix_click_word_maps_and_share(server, browser, tmp_path):  # noqa: F811
    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        page.goto(server + "/compare")
        _pick(page, "compare-model-a", "tiny-bert")
        _pick(page, "compare-model-b", "tiny-gpt2")
        page.fill("#compare-max-tokens", "32")
        page.fill("#compare-text", "the cat sat on the mat and the dog slept by the door")  # within 32 tokens in both
        page.click("#compare-run")
        page.wait_for_function(DRAWN.format(gid="compare-sim-graph"), timeout=WAIT)
        page.wait_for_selector("#compare-table .ag-center-cols-container .ag-row .ag-cell[col-id='similarity']", timeout=WAIT)
        assert page.locator("#compare-table .ag-center-cols-container .ag-row .ag-cell[col-id='similarity']").count() == 8  # one partner each
        page.wait_for_selector("#compare-joint-graph .scatterlayer .point", timeout=WAIT)
        w.shot("compare-0-matrix")
        page.locator("#compare-table .ag-center-cols-container .ag-row .ag-cell[col-id='similarity']").first.click()  # the best pair
        page.wait_for_function("document.querySelector('#compare-cell-label').innerText.includes(': similarity')",
                               timeout=WAIT)
        label = page.inner_text("#compare-cell-label")
        first = page.inner_text("#compare-table .ag-center-cols-container .ag-row[row-index='0'] .ag-cell[col-id='head_a']")
        assert f"A tiny-bert {first}" in label, label
        cell = page.evaluate("new URLSearchParams(location.search).get('cell')")
        assert cell and cell.count("-") == 1, cell
        page.wait_for_function(DRAWN.format(gid="compare-map-a"), timeout=WAIT)
        page.wait_for_function(DRAWN.format(gid="compare-map-b"), timeout=WAIT)
        n_words = page.evaluate("document.querySelector('#compare-map-a .js-plotly-plot')._fullData[0].z.length")
        n_words_b = page.evaluate("document.querySelector('#compare-map-b .js-plotly-plot')._fullData[0].z.length")
        assert n_words == n_words_b == 13  # the same words in both models
        w.shot("compare-1-cell")
        assert not w.problems, w.problems
    finally:
        w.close()
