"""The /lasf page in a real headless Chromium against the real service: Phi shows, a click opens a
field (weights, t-SNE), the share link restores it. Screenshot: ``test-artifacts/browser-lasf.png``."""

from __future__ import annotations

import pytest
from test_browser import FIGURE_JS, Watch, browser, server  # noqa: F401 - fixtures

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PHI_CELL_JS = """([row, col]) => {
  const gd = document.querySelector('#lasf-phi-graph .js-plotly-plot'), fl = gd._fullLayout;
  const r = gd.getBoundingClientRect();
  return [r.left + fl.xaxis._offset + fl.xaxis.l2p(col), r.top + fl.yaxis._offset + fl.yaxis.l2p(row)];
}"""
FIELD = 3
FIELD_OPEN_JS = (
    "(f) => { const gd = document.querySelector('#lasf-field-graph .js-plotly-plot');"
    " const t = gd && gd.layout.title && gd.layout.title.text; return (t || '').startsWith('Field ' + f); }"
)


def test_lasf_page_phi_click_opens_a_field_and_shares(server, browser, tmp_path):
    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        page.goto(server + "/lasf")
        page.click("#lasf-analyze")
        page.wait_for_selector("#lasf-phi-graph .heatmaplayer", timeout=240_000)
        page.wait_for_function(
            "document.querySelector('#lasf-status').textContent.includes('done')", timeout=240_000
        )
        phi = page.evaluate(FIGURE_JS, "lasf-phi-graph")
        assert len(phi["data"][0]["y"]) == 12  # 12 fields
        page.wait_for_selector("#lasf-spec tbody tr", timeout=30_000)
        page.locator("#lasf-phi-graph").scroll_into_view_if_needed()
        x, y = page.evaluate(PHI_CELL_JS, [FIELD, 0])
        page.mouse.click(x, y)
        page.wait_for_function(FIELD_OPEN_JS, arg=FIELD, timeout=60_000)
        page.wait_for_selector("#lasf-tsne-graph .scatterlayer .point", timeout=60_000)
        assert f"field={FIELD}" in page.url
        w.shot("lasf")
        page.click("#lasf-share-button")
        page.wait_for_function("document.querySelector('#lasf-share-url').href", timeout=30_000)
        link = page.get_attribute("#lasf-share-url", "href")
        assert w.problems == []
    finally:
        w.close()
    w2 = Watch(browser, server, tmp_path)
    try:
        w2.page.goto(link)
        w2.page.wait_for_function(FIELD_OPEN_JS, arg=FIELD, timeout=120_000)
        assert w2.problems == []
    finally:
        w2.close()
