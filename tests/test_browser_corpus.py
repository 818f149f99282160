"""The corpus page in a real headless Chromium against the real service: analyze a shipped corpus
with a tiny model, the table fills, a click selects a head (its contexts, the URL), the joint
query–key map draws, a share link reopens the same head. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import pytest
from test_browser import WAIT_MS, Watch, _pick, browser, server  # noqa: F401,F811 - fixtures

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_corpus_page_table_head_joint_map_and_share(server, browser, tmp_path):  # noqa: F811
    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        page.goto(server + "/corpus")
        _pick(page, "corpus-model", "tiny-bert")
        page.fill("#corpus-max-tokens", "16")
        page.click("#corpus-analyze")
        page.wait_for_selector("#corpus-table td[data-dash-column='previous']", timeout=WAIT_MS)
        assert page.locator("#corpus-table tbody tr").count() >= 8  # 2 layers x 4 heads (one page)
        page.wait_for_selector("#corpus-map-graph .scatterlayer .point", timeout=WAIT_MS)
        page.locator("#corpus-table td[data-dash-column='head']").nth(5).click()  # head L1H1
        page.wait_for_function("document.querySelector('#corpus-selected-label').innerText.includes('L1H1')",
                               timeout=WAIT_MS)
        page.wait_for_selector("#corpus-contexts li", timeout=WAIT_MS)
        assert page.locator("#corpus-contexts li").count() == 20
        page.wait_for_function("new URLSearchParams(location.search).get('head') === 'L1H1'", timeout=WAIT_MS)
        w.shot("corpus-1-head")
        page.click("#corpus-joint-button")
        page.wait_for_function(
            "(() => { const gd = document.querySelector('#corpus-joint-graph .js-plotly-plot');"
            " return gd && gd._fullData && gd._fullData.length === 2 && gd._fullData[0].x.length > 0; })()",
            timeout=WAIT_MS)
        w.shot("corpus-2-joint")
        page.click("#corpus-share-button")
        page.wait_for_function("document.querySelector('#corpus-share-url').href.includes('share=')",
                               timeout=WAIT_MS)
        link = page.get_attribute("#corpus-share-url", "href")
        assert not w.problems, w.problems
    finally:
        w.close()
    w2 = Watch(browser, server, tmp_path)
    try:
        w2.page.goto(link)
        w2.page.wait_for_function(
            "document.querySelector('#corpus-selected-label') &&"
            " document.querySelector('#corpus-selected-label').innerText.includes('L1H1')", timeout=WAIT_MS)
        assert w2.page.locator("#corpus-contexts li").count() == 20
        w2.shot("corpus-3-shared")
        assert not w2.problems, w2.problems
    finally:
        w2.close()
