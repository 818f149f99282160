"""The head atlas page (/heads) in a real headless Chromium against the real service: the atlas of a
tiny decoder computed under the labelling rule picked on the page (reached from the text explorer by
the navigation, with no page error), its grid and its table drawn (every head, sortable), a click on
a head opening it in the text explorer. Screenshot:
``test-artifacts/browser-heads-1-atlas.png``."""

from __future__ import annotations

import pytest
from test_browser import WAIT_MS, Watch, _pick, browser, server  # noqa: F401 - fixtures

pytestmark = [pytest.mark.browser, pytest.mark.slow]

GRID = "#heads-table"
ROWS_JS = """() => [...document.querySelectorAll('#heads-table .ag-center-cols-container .ag-row')]
  .sort((a, b) => Number(a.getAttribute('row-index')) - Number(b.getAttribute('row-index')))
  .map(r => [r.getAttribute('row-id'), r.querySelector(".ag-cell[col-id='previous-token']").innerText])"""


def test_heads_page_grid_table_and_a_click_to_the_text_explorer(server, browser, tmp_path):
    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        # reached by the navigation from the start page through the text explorer, both served
        # without AG Grid's bundle: its stub loads the bundle once the grid is drawn
        # (frontend/kit/lazygrid.py); the text explorer's timers must not write to its stores once
        # it is left (assets/gallery.js), a page error on the heads page's Analyze otherwise
        page.goto(server + "/start")
        assert page.evaluate("window.dash_ag_grid.headscopeStub") is True
        page.click("#nav-text")
        page.wait_for_selector("#text-page", timeout=WAIT_MS)
        page.click("#nav-heads")
        _pick(page, "heads-model", "tiny-gpt2")
        page.fill("#heads-seqs", "3")
        page.fill("#heads-len", "8")
        _pick(page, "heads-rule", "largest score (SPEC 15)")  # the labelling rule, docs/atlas.md
        page.click("#heads-analyze")
        page.wait_for_selector(f"{GRID} .ag-row .ag-cell[col-id='label']", timeout=WAIT_MS)
        rows = page.evaluate(ROWS_JS)
        assert sorted(h for h, _ in rows) == [f"L{a}H{b}" for a in range(2) for b in range(4)]
        assert page.evaluate("window.dash_ag_grid.headscopeStub") is None  # the real bundle now
        # the grid: one marker per head over its traces (one trace per label and confidence)
        n = page.evaluate(
            "document.querySelector('#heads-grid-graph .js-plotly-plot')._fullData"
            ".reduce((s, t) => s + t.x.length, 0)"
        )
        assert n == 8
        assert "no label" in page.inner_text("#heads-summary") or "broad" in page.inner_text(
            "#heads-summary"
        )
        assert "Evidence: exact mean ablation of the 0 labelled heads" in page.inner_text(
            "#heads-summary"
        )
        summary = page.inner_text("#heads-summary")
        assert "Corpus builtin-english" in summary, summary
        assert "labels: the largest score that clears (SPEC 15)" in summary, summary
        header = page.locator(
            f"{GRID} .ag-header-cell[col-id='previous-token'] .ag-header-cell-label"
        )
        header.click()
        header.click()
        page.wait_for_function(
            f"({ROWS_JS})().map(r => Number(r[1])).every((v, i, a) => !i || a[i - 1] >= v)",
            timeout=WAIT_MS,
        )
        w.shot("heads-1-atlas")
        page.locator(f"{GRID} .ag-row[row-id='L1H2'] .ag-cell[col-id='label']").click()
        page.wait_for_url("**/text?**", timeout=WAIT_MS)
        query = page.evaluate("Object.fromEntries(new URLSearchParams(location.search))")
        assert (query.get("model"), query.get("layer"), query.get("head")) == (
            "tiny-gpt2",
            "1",
            "2",
        )
        page.wait_for_selector("#text-page, #text-analyze", timeout=WAIT_MS)
        # no page error along the way: none from the text explorer's timers after it was left
        assert not w.problems, w.problems
    finally:
        w.close()
