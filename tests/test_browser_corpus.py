"""The corpus page in a real headless Chromium against the real service: analyze a shipped corpus
with a tiny model, the table (dash-ag-grid) fills, sorts, filters and exports CSV, a click selects a head (its contexts, the URL), the joint
query–key map draws, a share link reopens the same head. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import pytest
from test_browser import WAIT_MS, Watch, _pick, browser, server  # noqa: F401 - fixtures

pytestmark = [pytest.mark.browser, pytest.mark.slow]


GRID = "#corpus-table"
# the grid's rows as shown, top to bottom: [[head, previous-token weight], ...]
SHOWN_JS = """(grid) => [...document.querySelectorAll(grid + ' .ag-center-cols-container .ag-row')]
  .sort((a, b) => Number(a.getAttribute('row-index')) - Number(b.getAttribute('row-index')))
  .map(r => [r.getAttribute('row-id'), r.querySelector(".ag-cell[col-id='previous']").innerText])"""
# the floating filter (the header row under the names) of a column
FILTER_JS = """([grid, col]) => {
  const head = document.querySelector(grid + ` .ag-header-cell[col-id='${col}']`);
  const i = head.getAttribute('aria-colindex');
  const cell = document.querySelector(grid + ` .ag-floating-filter[aria-colindex='${i}'] input`);
  cell.setAttribute('data-test', 'filter-' + col);
}"""


def _shown(page) -> dict[str, float]:
    return {head: float(v) for head, v in page.evaluate(SHOWN_JS, GRID)}


def _sort_filter_and_export(page, tmp_path) -> None:
    """The table sorts by a column (a click on its name, twice: descending), keeps the heads above
    a number typed in its filter, and exports what it shows as CSV (dash-ag-grid's AgGrid)."""
    values = _shown(page)
    # the head column's order (frontend/assets/grid.js): by layer, then head, not as text
    assert page.evaluate(
        "['L10H0', 'L2H10', 'L2H9', 'L0H1'].sort(window.dashAgGridFunctions.headOrder)"
    ) == ["L0H1", "L2H9", "L2H10", "L10H0"]
    label = page.locator(f"{GRID} .ag-header-cell[col-id='previous'] .ag-header-cell-label")
    label.click()
    label.click()
    page.wait_for_function(
        f"({SHOWN_JS})('{GRID}').map(r => Number(r[1])).every((v, i, a) => !i || a[i - 1] >= v)"
        ' && document.querySelector("' + GRID + " .ag-header-cell[col-id='previous']\")"
        ".getAttribute('aria-sort') === 'descending'",
        timeout=WAIT_MS,
    )
    order = list(page.evaluate(SHOWN_JS, GRID))
    assert [float(v) for _, v in order] == sorted(values.values(), reverse=True)
    threshold = sorted(values.values())[len(values) // 2]
    page.evaluate(FILTER_JS, [GRID, "previous"])
    page.fill(f"{GRID} input[data-test='filter-previous']", str(threshold))
    above = {h for h, v in values.items() if v > threshold}
    assert 0 < len(above) < len(values)
    page.wait_for_function(f"({SHOWN_JS})('{GRID}').length === {len(above)}", timeout=WAIT_MS)
    assert set(_shown(page)) == above
    with page.expect_download() as dl:
        page.click("#corpus-table-csv")
    path = tmp_path / "corpus.csv"
    dl.value.save_as(path)
    import csv

    rows = list(csv.DictReader(path.open(encoding="utf-8-sig")))  # AG Grid writes a BOM (Excel)
    assert [r["head"] for r in rows] == [
        h for h, _ in order if h in above
    ]  # sorted and filtered, as shown
    assert {float(r["previous token"]) for r in rows} == {values[h] for h in above}
    page.fill(f"{GRID} input[data-test='filter-previous']", "")
    page.wait_for_function(f"({SHOWN_JS})('{GRID}').length === {len(values)}", timeout=WAIT_MS)


def test_corpus_page_table_head_joint_map_and_share(server, browser, tmp_path):
    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        page.goto(server + "/corpus")
        _pick(page, "corpus-model", "tiny-bert")
        page.fill("#corpus-max-tokens", "16")
        page.click("#corpus-analyze")
        page.wait_for_selector(f"{GRID} .ag-row .ag-cell[col-id='previous']", timeout=WAIT_MS)
        assert sorted(_shown(page)) == [f"L{a}H{b}" for a in range(2) for b in range(4)]  # one page
        page.wait_for_selector("#corpus-map-graph .scatterlayer .point", timeout=WAIT_MS)
        page.locator(f"{GRID} .ag-row[row-id='L1H1'] .ag-cell[col-id='previous']").click()
        page.wait_for_function(
            "document.querySelector('#corpus-selected-label').innerText.includes('L1H1')",
            timeout=WAIT_MS,
        )
        page.wait_for_selector("#corpus-contexts li", timeout=WAIT_MS)
        assert page.locator("#corpus-contexts li").count() == 20
        page.wait_for_function(
            "new URLSearchParams(location.search).get('head') === 'L1H1'", timeout=WAIT_MS
        )
        w.shot("corpus-1-head")
        _sort_filter_and_export(page, tmp_path)
        page.click("#corpus-joint-button")
        page.wait_for_function(
            "(() => { const gd = document.querySelector('#corpus-joint-graph .js-plotly-plot');"
            " return gd && gd._fullData && gd._fullData.length === 2 && gd._fullData[0].x.length > 0; })()",
            timeout=WAIT_MS,
        )
        w.shot("corpus-2-joint")
        page.click("#corpus-share-button")
        page.wait_for_function(
            "document.querySelector('#corpus-share-url').href.includes('share=')", timeout=WAIT_MS
        )
        link = page.get_attribute("#corpus-share-url", "href")
        assert not w.problems, w.problems
    finally:
        w.close()
    w2 = Watch(browser, server, tmp_path)
    try:
        w2.page.goto(link)
        w2.page.wait_for_function(
            "document.querySelector('#corpus-selected-label') &&"
            " document.querySelector('#corpus-selected-label').innerText.includes('L1H1')",
            timeout=WAIT_MS,
        )
        assert w2.page.locator("#corpus-contexts li").count() == 20
        # the share link's page ("/?share=ID") is served without AG Grid's bundle; its stub loads the
        # bundle once the grid is drawn, once (frontend/kit/lazygrid.py)
        w2.page.wait_for_selector(f"{GRID} .ag-row[row-id='L1H1']", timeout=WAIT_MS)
        assert sorted(_shown(w2.page)) == [f"L{a}H{b}" for a in range(2) for b in range(4)]
        assert w2.page.evaluate(
            "[window.dash_ag_grid.headscopeStub, performance.getEntriesByType('resource')"
            ".filter((e) => e.name.includes('/dash_ag_grid/dash_ag_grid')).length,"
            " document.querySelectorAll('script[src*=\"/dash_ag_grid/dash_ag_grid\"]').length]"
        ) == [None, 1, 1]
        w2.shot("corpus-3-shared")
        assert not w2.problems, w2.problems
    finally:
        w2.close()


def test_corpus_page_on_gemma3(server, browser, tmp_path):
    """Gemma 3 270M (real weights) over the shipped English corpus: the table and the map hold its 72
    heads; sorted by induction, the first head is in a global layer (5, 11, 17: measured L5H3/L5H1,
    0.50, docs/walkthrough-gemma3.md); its contexts and joint query–key map draw."""
    from test_browser import ARTIFACTS

    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        page.goto(server + "/corpus")
        _pick(page, "corpus-model", "gemma3-270m")
        page.click("#corpus-analyze")
        page.wait_for_function(
            "document.querySelector('#corpus-status').textContent.trim() === 'done'"
            " || document.querySelector('#corpus-error').textContent",
            timeout=WAIT_MS,
        )
        assert not page.inner_text("#corpus-error"), page.inner_text("#corpus-error")
        page.wait_for_selector(f"{GRID} .ag-row .ag-cell[col-id='induction']", timeout=WAIT_MS)
        page.wait_for_selector("#corpus-map-graph .scatterlayer .point", timeout=WAIT_MS)
        points = page.evaluate(
            "() => document.querySelector('#corpus-map-graph .js-plotly-plot')._fullData"
            ".reduce((s, t) => s + (t.x ? t.x.length : 0), 0)"
        )
        assert points == 72  # 18 layers x 4 query heads
        label = page.locator(f"{GRID} .ag-header-cell[col-id='induction'] .ag-header-cell-label")
        label.click()
        label.click()
        page.wait_for_function(
            f"document.querySelector(\"{GRID} .ag-header-cell[col-id='induction']\")"
            ".getAttribute('aria-sort') === 'descending'",
            timeout=WAIT_MS,
        )
        first = page.locator(f"{GRID} .ag-center-cols-container .ag-row[row-index='0']")
        head = first.get_attribute("row-id")
        assert head is not None and int(head[1:].split("H")[0]) in (5, 11, 17), (
            head
        )  # a global layer
        first.locator(".ag-cell[col-id='induction']").click()
        page.wait_for_function(
            f"document.querySelector('#corpus-selected-label').innerText.includes('{head}')",
            timeout=WAIT_MS,
        )
        page.wait_for_selector("#corpus-contexts li", timeout=WAIT_MS)
        page.click("#corpus-joint-button")
        page.wait_for_function(
            "(() => { const gd = document.querySelector('#corpus-joint-graph .js-plotly-plot');"
            " return gd && gd._fullData && gd._fullData.length === 2 && gd._fullData[0].x.length > 0; })()",
            timeout=WAIT_MS,
        )
        w.shot("corpus-gemma3")
        for gid in ("corpus-map-graph", "corpus-joint-graph"):
            page.locator(f"#{gid}").screenshot(
                path=str(ARTIFACTS / f"browser-corpus-gemma3-{gid}.png")
            )
        page.locator(GRID).screenshot(path=str(ARTIFACTS / "browser-corpus-gemma3-table.png"))
        assert not w.problems, w.problems
    finally:
        w.close()
