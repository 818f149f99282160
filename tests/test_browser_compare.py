"""The compare page in a real headless Chromium against the real service: two tiny models (an encoder
and a decoder, different tokenizers). On one text: the similarity matrix, the pairs table and the joint
map draw; a click on a row of the table shows both heads' word-level maps side by side and puts the
pair in the URL, and the share link reopens the text; the head atlases' panel links /heads for both
models (none stored). The text box shows in text mode only, the corpus
picker in corpus mode only, on the page and in a share link of each. On the shipped corpus: a click on a cell of the matrix selects the pair, the maps are
of a text of the corpus picked on the page, and the share link reopens the same pair and text in a
fresh browser context. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import pytest
from conftest import ARTIFACTS
from test_browser import WAIT_MS, Watch, _pick, browser, server  # noqa: F401 - fixtures

pytestmark = [pytest.mark.browser, pytest.mark.slow]
WAIT = min(WAIT_MS, 120_000)  # tiny models: every step is seconds

DRAWN = (
    "(() => {{ const gd = document.querySelector('#{gid} .js-plotly-plot');"
    " return gd && gd._fullData && gd._fullData.length > 0 && gd._fullData[0].type === 'heatmap'"
    " && gd._fullData[0].z && gd._fullData[0].z.length > 1; }})()"
)


def _assert_mode(page, kind: str) -> None:
    """``text``: the text box shows and the corpus picker does not; ``corpus``: the other way round."""
    on, off = (
        ("#compare-text", "#compare-corpus")
        if kind == "text"
        else ("#compare-corpus", "#compare-text")
    )
    page.wait_for_selector(off, state="hidden", timeout=WAIT)
    page.wait_for_selector(on, state="visible", timeout=WAIT)
    assert page.is_checked(f"#compare-source-kind input[value={kind}]")
    assert page.is_visible("#compare-max-tokens") and page.is_visible("#compare-run")


def _controls_shot(page, name: str) -> None:
    """The form alone (the layout of the controls), beside the full-page shots."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#compare-page .controls").screenshot(path=str(ARTIFACTS / f"browser-{name}.png"))


def _share(page) -> str:
    page.locator("#compare-share-button").scroll_into_view_if_needed()
    page.click("#compare-share-button")
    page.wait_for_function(
        "document.querySelector('#compare-share-url').textContent.includes('share=')", timeout=WAIT
    )
    return page.inner_text("#compare-share-url")


def _run_tiny_pair(page, base: str, *, text: str | None = None) -> None:
    """Compare tiny-bert (A) with tiny-gpt2 (B) at 32 tokens per text on ``text`` (None: the shipped
    English corpus) and wait for the similarity matrix."""
    page.goto(base + "/compare")
    _assert_mode(page, "text")  # a fresh page: one text
    _pick(page, "compare-model-a", "tiny-bert")
    _pick(page, "compare-model-b", "tiny-gpt2")
    page.fill("#compare-max-tokens", "32")
    if text is None:
        page.check("#compare-source-kind input[value=corpus]")
        _assert_mode(page, "corpus")
    else:
        page.fill("#compare-text", text)
    page.click("#compare-run")
    page.wait_for_function(DRAWN.format(gid="compare-sim-graph"), timeout=WAIT)


def test_compare_page_matrix_click_word_maps_and_share(server, browser, tmp_path):
    text = "the cat sat on the mat and the dog slept by the door"  # within 32 tokens
    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        page.goto(server + "/compare")
        page.check("#compare-source-kind input[value=corpus]")  # the source switch, both ways
        _assert_mode(page, "corpus")
        _controls_shot(page, "compare-controls-corpus")
        page.check("#compare-source-kind input[value=text]")
        _assert_mode(page, "text")
        _controls_shot(page, "compare-controls-text")
        _run_tiny_pair(page, server, text=text)
        page.wait_for_selector(
            "#compare-table .ag-center-cols-container .ag-row .ag-cell[col-id='similarity']",
            timeout=WAIT,
        )
        assert (
            page.locator(
                "#compare-table .ag-center-cols-container .ag-row .ag-cell[col-id='similarity']"
            ).count()
            == 8
        )  # one partner each
        page.wait_for_selector("#compare-joint-graph .scatterlayer .point", timeout=WAIT)
        for model in (
            "tiny-bert",
            "tiny-gpt2",
        ):  # no stored atlas: the side-by-side panel links /heads
            page.wait_for_selector(
                f"#compare-atlas-note a[href='/heads?model={model}']", timeout=WAIT
            )
        w.shot("compare-0-matrix")
        page.locator(
            "#compare-table .ag-center-cols-container .ag-row .ag-cell[col-id='similarity']"
        ).first.click()  # the best pair
        page.wait_for_function(
            "document.querySelector('#compare-cell-label').innerText.includes(': similarity')",
            timeout=WAIT,
        )
        label = page.inner_text("#compare-cell-label")
        first = page.inner_text(
            "#compare-table .ag-center-cols-container .ag-row[row-index='0'] .ag-cell[col-id='head_a']"
        )
        assert f"A tiny-bert {first}" in label, label
        page.wait_for_function(
            "(new URLSearchParams(location.search).get('cell') || '').split('-').length === 2",
            timeout=WAIT,
        )  # the pair is in the URL
        page.wait_for_function(DRAWN.format(gid="compare-map-a"), timeout=WAIT)
        page.wait_for_function(DRAWN.format(gid="compare-map-b"), timeout=WAIT)
        n_words = page.evaluate(
            "document.querySelector('#compare-map-a .js-plotly-plot')._fullData[0].z.length"
        )
        n_words_b = page.evaluate(
            "document.querySelector('#compare-map-b .js-plotly-plot')._fullData[0].z.length"
        )
        assert n_words == n_words_b == 13  # the same words in both models
        w.shot("compare-1-cell")
        link = _share(page)
        assert not w.problems, w.problems
    finally:
        w.close()

    fresh = Watch(browser, server, tmp_path)  # the share of a text comparison reopens in text mode
    try:
        fresh.page.goto(link)
        fresh.page.wait_for_function(DRAWN.format(gid="compare-sim-graph"), timeout=WAIT)
        _assert_mode(fresh.page, "text")
        assert fresh.page.input_value("#compare-text") == text
        assert not fresh.problems, fresh.problems
    finally:
        fresh.close()


# page coordinates of cell (a, b) of the similarity matrix: row a (head of A), column b (head of B)
MATRIX_CELL_JS = """([a, b]) => {
  const gd = document.querySelector('#compare-sim-graph .js-plotly-plot');
  const fl = gd._fullLayout, r = gd.getBoundingClientRect();
  return [r.left + fl.xaxis._offset + fl.xaxis.l2p(b), r.top + fl.yaxis._offset + fl.yaxis.l2p(a)];
}"""
SELECTED_JS = """([a, b]) => {
  const gd = document.querySelector('#compare-sim-graph .js-plotly-plot');
  const s = ((gd && gd.layout.shapes) || []).filter(s => s.type === 'rect');
  return s.length === 1 && Math.round(s[0].y0 + 0.5) === a && Math.round(s[0].x0 + 0.5) === b;
}"""  # the matrix marks cell (a, b), and only it
URL_JS = "([key, value]) => new URLSearchParams(location.search).get(key) === value"
SEARCH_FOCUSED_JS = (
    "() => document.activeElement && document.activeElement.matches('input.dash-dropdown-search')"
)
WORDS_JS = "(id) => document.querySelector('#' + id + ' .js-plotly-plot')._fullData[0].x"


def _wait_pair_drawn(page, label: str, n_words: int) -> None:
    page.wait_for_function(
        f"document.querySelector('#compare-cell-label').innerText.includes({label!r})", timeout=WAIT
    )
    for gid in ("compare-map-a", "compare-map-b"):
        page.wait_for_function(
            f"(() => {{ const gd = document.querySelector('#{gid} .js-plotly-plot');"
            f" return gd && gd._fullData && gd._fullData.length && gd._fullData[0].type === 'heatmap'"
            f" && gd._fullData[0].z && gd._fullData[0].z.length === {n_words}; }})()",
            timeout=WAIT,
        )


def test_corpus_compare_matrix_click_text_pick_and_share_link(server, browser, tmp_path):
    """Corpus mode: a click on a cell of the similarity matrix selects that pair; the word-level maps
    are of a text of the corpus, picked in the page (and the surprisal follows it); the share link
    opens the same pair and text in a fresh browser context."""
    from workers.inputs.corpora import shipped_corpus

    texts = shipped_corpus("builtin-english").texts
    pick = next(
        i for i in range(1, 10) if len(texts[i].split()) != len(texts[0].split())
    )  # told apart by
    words = texts[pick].split()  # its word count
    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        _run_tiny_pair(page, server)
        page.wait_for_selector("#compare-text-row:not([style*='none'])", timeout=WAIT)

        a, b = 1, 6  # A's layer 0 head 1, B's layer 1 head 2 (tiny models: 2 layers x 4 heads)
        page.mouse.click(*page.evaluate(MATRIX_CELL_JS, [a, b]))
        _wait_pair_drawn(page, "A tiny-bert L0H1 · B tiny-gpt2 L1H2", len(texts[0].split()))
        page.wait_for_function(URL_JS, arg=["cell", f"{a}-{b}"], timeout=WAIT)
        page.wait_for_function(
            SELECTED_JS, arg=[a, b], timeout=WAIT
        )  # the matrix marks the clicked cell
        assert "text 0 of 147" in page.inner_text("#compare-cell-label")

        page.click("#compare-text-pick")
        # the picker (Dash 4) is a button that opens a menu and moves the focus to its search field: keys
        # typed before that reach the button, where a space closes the menu again (a loaded machine)
        page.wait_for_function(SEARCH_FOCUSED_JS, timeout=WAIT)
        page.keyboard.type(f"{pick}: {texts[pick][:20]}")
        # the option filtered in by the search, clicked once it is shown (an Enter pressed before the
        # menu has filtered picks nothing)
        option = page.get_by_role("option", name=f"{pick}: {texts[pick][:20]}")
        option.first.wait_for(timeout=WAIT)
        option.first.click()
        _wait_pair_drawn(page, f"text {pick} of 147", len(words))
        assert page.evaluate(WORDS_JS, "compare-map-b") == [f"{i}:{x}" for i, x in enumerate(words)]
        page.wait_for_function(URL_JS, arg=["text", str(pick)], timeout=WAIT)
        page.wait_for_function(
            "document.querySelector('#compare-surprisal .js-plotly-plot')._fullData[0]"
            f".x.length === {len(words)}",
            timeout=WAIT,
        )  # the surprisal of the same text
        w.shot("compare-2-corpus-cell")

        link = _share(page)
        assert link.startswith(server + "/compare?share=")
        assert not w.problems, w.problems
    finally:
        w.close()

    fresh = Watch(browser, server, tmp_path)  # a colleague: new context, no cookies, no cache
    try:
        fresh.page.goto(link)
        fresh.page.wait_for_function(DRAWN.format(gid="compare-sim-graph"), timeout=WAIT)
        _assert_mode(
            fresh.page, "corpus"
        )  # the share of a corpus comparison: corpus mode, no text box
        _wait_pair_drawn(fresh.page, "A tiny-bert L0H1 · B tiny-gpt2 L1H2", len(words))
        assert f"text {pick} of 147" in fresh.page.inner_text("#compare-cell-label")
        fresh.page.wait_for_function(SELECTED_JS, arg=[a, b], timeout=WAIT)
        assert fresh.page.evaluate(WORDS_JS, "compare-map-a") == [
            f"{i}:{x}" for i, x in enumerate(words)
        ]
        assert "shared result" in fresh.page.inner_text("#compare-status")
        fresh.shot("compare-3-shared-link")
        assert not fresh.problems, fresh.problems
    finally:
        fresh.close()
