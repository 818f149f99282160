"""The /circuits page in a real headless Chromium against the real service (issue 30) on SmolLM2 (real
weights): the indirect-object pair entered and run, AtP against real patching drawn (one point per
head), the information-flow graph over the tokens drawn, a click on a head links it to the text
explorer and the causal page, the share link restores the view, no console errors.
Screenshots: ``test-artifacts/browser-circuits-*.png``."""

from __future__ import annotations

import pytest
from test_browser import FIGURE_JS, WAIT_MS, Watch, _pick, browser, server  # noqa: F401 - fixtures

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"
DONE_JS = ("document.querySelector('#circuits-status').textContent.trim() === 'done'"
           " || document.querySelector('#circuits-error').textContent")
POINT_JS = """([id, trace, k]) => {
  const gd = document.querySelector('#' + id + ' .js-plotly-plot'), fl = gd._fullLayout, t = gd.data[trace];
  const r = gd.getBoundingClientRect();
  return [r.left + fl.xaxis._offset + fl.xaxis.l2p(t.x[k]), r.top + fl.yaxis._offset + fl.yaxis.l2p(t.y[k])];
}"""


def test_circuits_page_on_smollm2(server, browser, tmp_path):  # noqa: F811
    from test_browser import ARTIFACTS

    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        page.goto(server + "/circuits")
        _pick(page, "circuits-model", "smollm2")
        page.fill("#circuits-text", CLEAN)
        page.fill("#circuits-corrupted", CORRUPTED)
        page.fill("#circuits-target", "␣Mary|␣John")
        page.click("#circuits-analyze")
        page.wait_for_function("document.querySelector('#circuits-status').textContent.includes('%')",
                               timeout=WAIT_MS)  # progress shows while the jobs run
        page.wait_for_function(DONE_JS, timeout=WAIT_MS)
        assert not page.inner_text("#circuits-error"), page.inner_text("#circuits-error")
        page.wait_for_selector("#circuits-atp-graph .scatterlayer .point", timeout=WAIT_MS)
        page.wait_for_selector("#circuits-flow-graph .scatterlayer .point", timeout=WAIT_MS)
        atp = page.evaluate(FIGURE_JS, "circuits-atp-graph")
        assert len(atp["data"][1]["x"]) == 30 * 9  # one point per head
        assert "Pearson" in atp["title"] and "Mary" in atp["title"]
        flow = page.evaluate(FIGURE_JS, "circuits-flow-graph")
        mids = next(t for t in flow["data"] if t["customdata"])  # the edges' hover points
        assert len(mids["x"]) > 10 and any("via attention" in s for s in mids["text"])
        assert "into token 13" in flow["title"].replace("<br>", " ")  # the last of the 14 tokens
        from frontend.pages.circuits import edge_attribution_available

        if edge_attribution_available():  # the circuit of the top N edges beside its faithfulness curve
            page.wait_for_selector("#circuits-circuit-graph .scatterlayer .point", timeout=WAIT_MS)
            circuit = page.evaluate(FIGURE_JS, "circuits-circuit-graph")
            scores = next(t for t in circuit["data"] if t["text"] and "→" in str(t["text"][0]))
            assert len(scores["x"]) > 0 and "faithfulness" in circuit["title"]
            curve = page.evaluate(FIGURE_JS, "circuits-curve-graph")
            assert len(curve["data"][0]["x"]) >= 12 and len(curve["data"][1]["x"]) == 1  # the chosen N marked
            page.locator("#circuits-circuit-graph").screenshot(path=str(ARTIFACTS / "browser-circuits-circuit.png"))
            # the slider's smallest N: the circuit, the curve's mark and the URL follow
            url_n = "new URLSearchParams(window.location.search).get('n')"
            page.wait_for_function(url_n, timeout=WAIT_MS)
            before = int(page.evaluate(url_n))  # the smallest listed circuit with faithfulness >= 0.8
            thumb = page.locator("#circuits-n-slider [role=slider]").first
            at_first = thumb.get_attribute("aria-valuenow") == "0"
            thumb.focus()
            page.keyboard.press("End" if at_first else "Home")  # the other end of the sizes
            page.wait_for_function(f"{url_n} !== '{before}'", timeout=WAIT_MS)
            n = int(page.evaluate(url_n))
            assert (n > before) if at_first else (n < before)
            page.wait_for_function("""(n) => { const gd = document.querySelector('#circuits-curve-graph .js-plotly-plot');
                return gd && gd.data[1] && gd.data[1].x[0] === n; }""", arg=n, timeout=WAIT_MS)
            assert f"top {n} edges" in page.evaluate(FIGURE_JS, "circuits-circuit-graph")["title"].replace("<br>", " ")
            page.locator("#circuits-circuit-graph").screenshot(path=str(ARTIFACTS / "browser-circuits-circuit-n.png"))
        w.shot("circuits-1-smollm2")
        page.locator("#circuits-flow-graph").screenshot(path=str(ARTIFACTS / "browser-circuits-flow.png"))
        page.locator("#circuits-atp-graph").screenshot(path=str(ARTIFACTS / "browser-circuits-atp.png"))

        # a click on the head AtP ranks first opens it in the text explorer and on the causal page
        ys = atp["data"][1]["y"]
        k = max(range(len(ys)), key=lambda i: abs(ys[i]))
        layer, head = atp["data"][1]["customdata"][k]
        page.locator("#circuits-atp-graph").scroll_into_view_if_needed()
        x, y = page.evaluate(POINT_JS, ["circuits-atp-graph", 1, k])
        page.mouse.click(x, y)
        page.wait_for_selector("#circuits-open-causal", timeout=WAIT_MS)
        assert f"L{layer}H{head}" in page.inner_text("#circuits-open-text")
        assert f"head={layer}.{head}" in page.url
        assert f"head={layer}.{head}" in page.get_attribute("#circuits-open-causal", "href")
        page.click("#circuits-share-button")
        page.wait_for_function("document.querySelector('#circuits-share-url').href", timeout=WAIT_MS)
        link = page.get_attribute("#circuits-share-url", "href")
        assert "share=" in link  # the flow job's share; the pair job's own share is in its view
        assert not w.problems, w.problems
    finally:
        w.close()

    fresh = Watch(browser, server, tmp_path)
    try:
        fresh.page.goto(link)
        fresh.page.wait_for_selector("#circuits-atp-graph .scatterlayer .point", timeout=WAIT_MS)
        fresh.page.wait_for_selector("#circuits-flow-graph .scatterlayer .point", timeout=WAIT_MS)
        assert fresh.page.evaluate(FIGURE_JS, "circuits-atp-graph")["title"] == atp["title"]
        assert fresh.page.evaluate(FIGURE_JS, "circuits-flow-graph")["title"] == flow["title"]
        assert fresh.page.input_value("#circuits-corrupted") == CORRUPTED
        assert not fresh.problems, fresh.problems
    finally:
        fresh.close()


def test_circuits_page_flow_graph_on_an_encoder(server, browser, tmp_path):  # noqa: F811
    """MiniLM (an encoder, no language-model head): the pair is refused with the reason, the flow graph
    from a chosen position is drawn all the same, and a click on an attention edge opens its head."""
    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        page.goto(server + "/circuits")
        _pick(page, "circuits-model", "minilm")
        page.fill("#circuits-text", "The cat sat on the mat because it was tired.")
        page.fill("#circuits-corrupted", "The dog sat on the mat because it was tired.")
        page.fill("#circuits-position", "8")  # [CLS] The cat sat on the mat because it: "it"
        page.click("#circuits-analyze")
        page.wait_for_selector("#circuits-flow-graph .scatterlayer .point", timeout=WAIT_MS)
        assert "no language-model head" in page.inner_text("#circuits-error")
        flow = page.evaluate(FIGURE_JS, "circuits-flow-graph")
        assert "into token 8 (it)" in flow["title"].replace("<br>", " ")
        mids = next(t for t in flow["data"] if t["customdata"])
        assert mids["x"], "MiniLM's graph has attention edges"
        k = max(range(len(mids["x"])), key=lambda i: float(mids["text"][i].split("via attention: ")[1].split(";")[0]))
        idx = flow["data"].index(mids)
        page.locator("#circuits-flow-graph").scroll_into_view_if_needed()
        x, y = page.evaluate(POINT_JS, ["circuits-flow-graph", idx, k])
        page.mouse.click(x, y)
        page.wait_for_selector("#circuits-open-text", timeout=WAIT_MS)
        layer, head = mids["customdata"][k]
        assert f"L{layer}H{head}" in page.inner_text("#circuits-open-text")
        assert page.locator("#circuits-open-causal").count() == 0  # no pair: no causal page
        w.shot("circuits-2-minilm-flow")
        assert not w.problems, w.problems
    finally:
        w.close()
