"""The circuit graph on /circuits in a real headless Chromium against the real service, on a tiny
GPT-2 (docs/circuits.md, "The circuit on the page"): the page opens at a readable circuit (the
smallest size on the faithfulness curve at least ``FAITHFUL`` faithful, said under the slider), the
slider runs over the curve's whole range, the nodes are labelled, and the layout by token position
sits beside the layout by head (kept in the URL)."""

from __future__ import annotations

import httpx
import pytest
from test_browser import FIGURE_JS, WAIT_MS, Watch, _pick, browser, server  # noqa: F401 - fixtures

from frontend.figures import circuits as F

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CLEAN, CORRUPTED = "the cat sat on the mat", "the cat sat on the hat"
URL_JS = "(k) => new URLSearchParams(window.location.search).get(k)"


def url(key: str) -> str:
    """A JS expression: the URL's ``key``."""
    return f"new URLSearchParams(window.location.search).get('{key}')"


NODES_JS = """() => { const gd = document.querySelector('#circuits-circuit-graph .js-plotly-plot');
  const t = gd.data.find(d => d.name === 'nodes');
  return {x: Array.from(t.x), text: Array.from(t.text), ticks: gd.layout.xaxis.ticktext}; }"""


def test_the_circuit_opens_readable_over_the_whole_curve(server, browser, tmp_path):
    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        page.goto(server + "/circuits")
        _pick(page, "circuits-model", "tiny-gpt2")
        page.fill("#circuits-text", CLEAN)
        page.fill("#circuits-corrupted", CORRUPTED)
        page.fill("#circuits-target", "#5 #9")
        page.click("#circuits-analyze")
        page.wait_for_selector("#circuits-circuit-graph .scatterlayer .point", timeout=WAIT_MS)
        page.wait_for_function(url("n"), timeout=WAIT_MS)
        pair = page.evaluate(URL_JS, "pair")
        result = httpx.get(f"{server}/api/analyses/{pair}", timeout=60).json()["result"]
        sizes = F.circuit_sizes(result)
        curve = [int(n) for n, _ in result["edge-attribution"]["curve"]]
        assert sizes[0] == curve[0] and sizes[-1] >= curve[-1]

        opening = F.opening_size(result)  # the smallest size at least 0.8 faithful
        assert int(page.evaluate(URL_JS, "n")) == opening
        note = page.inner_text("#circuits-n-note")
        assert f"N = {opening:,} edges" in note and "faithfulness ≥ 0.8" in note
        nodes = page.evaluate(NODES_JS)
        named = {t for t in nodes["text"] if t}
        assert named and named <= {n["id"] for n in result["edge-attribution"]["nodes"]} | {
            "embeddings"
        }
        assert "logits" in named  # every drawn circuit ends there

        thumb = page.locator("#circuits-n-slider [role=slider]").first
        assert int(thumb.get_attribute("aria-valuemax")) == len(sizes) - 1
        thumb.focus()
        page.keyboard.press("End")  # the slider's far end: the curve's largest size
        page.wait_for_function(f"{url('n')} === '{sizes[-1]}'", arg=None, timeout=WAIT_MS)
        page.wait_for_function(
            "(n) => document.querySelector('#circuits-n-note').textContent.includes(n)",
            arg=f"N = {sizes[-1]:,} edges",
            timeout=WAIT_MS,
        )

        by_head = page.evaluate(NODES_JS)
        page.get_by_label("by token position").check()
        page.wait_for_function(f"{url('layout')} === 'position'", arg=None, timeout=WAIT_MS)
        page.wait_for_function(
            "(x) => { const gd = document.querySelector('#circuits-circuit-graph .js-plotly-plot');"
            " const t = gd.data.find(d => d.name === 'nodes'); return JSON.stringify(Array.from(t.x)) !== x; }",
            arg=str(by_head["x"]).replace(" ", ""),
            timeout=WAIT_MS,
        )
        by_pos = page.evaluate(NODES_JS)
        assert by_pos["x"] != by_head["x"] and "cat" in "".join(by_pos["ticks"])
        link = page.url
        assert not w.problems, w.problems
    finally:
        w.close()

    fresh = Watch(browser, server, tmp_path)
    try:
        fresh.page.goto(link)  # the link keeps the size and the layout
        fresh.page.wait_for_selector(
            "#circuits-circuit-graph .scatterlayer .point", timeout=WAIT_MS
        )
        assert fresh.page.is_checked("#circuits-layout input[value=position]")
        assert fresh.page.evaluate(NODES_JS)["x"] == by_pos["x"]
        assert not fresh.problems, fresh.problems
    finally:
        fresh.close()
