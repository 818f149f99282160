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
DONE_JS = (
    "document.querySelector('#circuits-status').textContent.trim() === 'done'"
    " || document.querySelector('#circuits-error').textContent"
)
POINT_JS = """([id, trace, k]) => {
  const gd = document.querySelector('#' + id + ' .js-plotly-plot'), fl = gd._fullLayout, t = gd.data[trace];
  const r = gd.getBoundingClientRect();
  return [r.left + fl.xaxis._offset + fl.xaxis.l2p(t.x[k]), r.top + fl.yaxis._offset + fl.yaxis.l2p(t.y[k])];
}"""


def test_circuits_page_on_smollm2(server, browser, tmp_path):
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
        page.wait_for_function(
            "document.querySelector('#circuits-status').textContent.includes('%')", timeout=WAIT_MS
        )  # progress shows while the jobs run
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

        if (
            edge_attribution_available()
        ):  # the circuit of the top N edges beside its faithfulness curve
            page.wait_for_selector("#circuits-circuit-graph .scatterlayer .point", timeout=WAIT_MS)
            circuit = page.evaluate(FIGURE_JS, "circuits-circuit-graph")
            scores = next(t for t in circuit["data"] if t["text"] and "→" in str(t["text"][0]))
            assert len(scores["x"]) > 0 and "faithfulness" in circuit["title"]
            curve = page.evaluate(FIGURE_JS, "circuits-curve-graph")
            assert (
                len(curve["data"][0]["x"]) >= 12 and len(curve["data"][1]["x"]) == 1
            )  # the chosen N marked
            page.locator("#circuits-circuit-graph").screenshot(
                path=str(ARTIFACTS / "browser-circuits-circuit.png")
            )
            # the slider's smallest N: the circuit, the curve's mark and the URL follow
            url_n = "new URLSearchParams(window.location.search).get('n')"
            page.wait_for_function(url_n, timeout=WAIT_MS)
            before = int(
                page.evaluate(url_n)
            )  # the smallest listed circuit with faithfulness >= 0.8
            thumb = page.locator("#circuits-n-slider [role=slider]").first
            at_first = thumb.get_attribute("aria-valuenow") == "0"
            thumb.focus()
            page.keyboard.press("End" if at_first else "Home")  # the other end of the sizes
            page.wait_for_function(f"{url_n} !== '{before}'", timeout=WAIT_MS)
            n = int(page.evaluate(url_n))
            assert (n > before) if at_first else (n < before)
            page.wait_for_function(
                """(n) => { const gd = document.querySelector('#circuits-curve-graph .js-plotly-plot');
                return gd && gd.data[1] && gd.data[1].x[0] === n; }""",
                arg=n,
                timeout=WAIT_MS,
            )
            assert f"top {n:,} edges" in page.evaluate(FIGURE_JS, "circuits-circuit-graph")[
                "title"
            ].replace("<br>", " ")
            page.locator("#circuits-circuit-graph").screenshot(
                path=str(ARTIFACTS / "browser-circuits-circuit-n.png")
            )
        w.shot("circuits-1-smollm2")
        page.locator("#circuits-flow-graph").screenshot(
            path=str(ARTIFACTS / "browser-circuits-flow.png")
        )
        page.locator("#circuits-atp-graph").screenshot(
            path=str(ARTIFACTS / "browser-circuits-atp.png")
        )

        # a click on the head AtP ranks first opens it in the text explorer and on the causal page
        ys = atp["data"][1]["y"]
        k = max(range(len(ys)), key=lambda i: abs(ys[i]))
        layer, head = atp["data"][1]["customdata"][k][:2]  # then the atlas label
        page.locator("#circuits-atp-graph").scroll_into_view_if_needed()
        x, y = page.evaluate(POINT_JS, ["circuits-atp-graph", 1, k])
        page.mouse.click(x, y)
        page.wait_for_selector("#circuits-open-causal", timeout=WAIT_MS)
        assert f"L{layer}H{head}" in page.inner_text("#circuits-open-text")
        assert f"head=L{layer}H{head}" in page.url
        assert f"head=L{layer}H{head}" in page.get_attribute("#circuits-open-causal", "href")
        page.click("#circuits-share-button")
        page.wait_for_function(
            "document.querySelector('#circuits-share-url').href", timeout=WAIT_MS
        )
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


def test_circuits_page_flow_graph_on_an_encoder(server, browser, tmp_path):
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
        k = max(
            range(len(mids["x"])),
            key=lambda i: float(mids["text"][i].split("via attention: ")[1].split(";")[0]),
        )
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


# ---------------------------------------------------------------- Cancel and the downloads, on a held queue
TINY_CLEAN = "The head of the model is in the text and the word is of the token"
TINY_CORRUPTED = "The head of the model is in the text and a word is of the token"


@pytest.fixture(scope="module")
def queued_server(tmp_path_factory, tiny_model_dirs):
    """``headscope serve`` with no worker: what the page submits stays queued until the test runs it
    (an RQ worker in the test process, on the service's Redis and store), so Cancel meets a job that is
    certainly not finished, on any machine."""
    from service_helpers import ServeProcess

    proc = ServeProcess.for_tests(
        tmp_path_factory.mktemp("circuits-serve"), tiny_model_dirs, workers=0
    )
    proc.start()
    yield proc
    assert proc.stop() == set()


def _run_queued(served, monkeypatch) -> None:
    from redis import Redis
    from rq import SimpleWorker

    import workers.queue.reporter
    from workers.queue import keys as protocol

    store = served.store()
    monkeypatch.setattr(workers.queue.reporter, "store", lambda: store)
    conn = Redis.from_url(served.info()["redis_url"])
    SimpleWorker(
        [protocol.queue(conn, q) for q in protocol.QUEUES],
        connection=conn,
        serializer=protocol.SERIALIZER,
    ).work(burst=True)
    store.close()


def _wait_queued(base: str, ids: list[str]) -> None:
    """Until every job of ``ids`` is queued (a state, not a time: the limit only stops a hang)."""
    import time

    import httpx

    deadline = time.monotonic() + WAIT_MS / 1000
    while (states := [httpx.get(f"{base}/api/analyses/{i}").json()["status"] for i in ids]) != [
        "queued"
    ] * len(ids):
        assert time.monotonic() < deadline, states
        time.sleep(0.2)


def test_circuits_page_cancel_and_downloads(
    queued_server,
    browser,
    tmp_path,
    catalogue,
    one_torch_thread,
    monkeypatch,
):
    """Cancel on the page cancels both queued jobs (they never run, nothing is kept); Analyze again runs
    them; then the circuit and the flow graph download as JSON and GraphML that parse to the same
    nodes and edges, the results as JSON, and a figure as SVG."""
    import json
    import xml.etree.ElementTree as ET
    from pathlib import Path

    import httpx

    base = queued_server.url
    w = Watch(browser, base, tmp_path)
    page = w.page
    try:
        page.goto(base + "/circuits")
        _pick(page, "circuits-model", "tiny-gpt2")
        page.fill("#circuits-text", TINY_CLEAN)
        page.fill("#circuits-corrupted", TINY_CORRUPTED)
        page.fill(
            "#circuits-target", "#5|#9"
        )  # token ids: the random model predicts one token for both texts
        page.click("#circuits-analyze")
        page.wait_for_function("new URLSearchParams(location.search).get('pair')", timeout=WAIT_MS)
        query = dict(p.split("=", 1) for p in page.url.split("?", 1)[1].split("&"))
        ids = [query["analysis"], query["pair"]]
        states = [httpx.get(f"{base}/api/analyses/{i}").json()["status"] for i in ids]
        assert states == ["queued", "queued"], (
            states
        )  # no worker: nothing runs until the test says so
        page.click("#circuits-cancel")
        page.wait_for_function(
            "document.querySelector('#circuits-cancelled').textContent.trim()", timeout=WAIT_MS
        )
        assert page.inner_text("#circuits-cancelled") == "cancelled; cancelled"
        _run_queued(queued_server, monkeypatch)
        for i in ids:
            st = httpx.get(f"{base}/api/analyses/{i}").json()
            assert (
                st["status"] == "failed" and "cancelled" in st["error"] and not st.get("result")
            ), st
        page.wait_for_function(
            "document.querySelector('#circuits-status').textContent.includes('cancelled')",
            timeout=WAIT_MS,
        )
        w.shot("circuits-3-cancelled")

        page.click("#circuits-analyze")  # submitted again, the same jobs run to the end
        _wait_queued(
            base, ids
        )  # the URL holds these ids already: wait for the service to queue them again
        _run_queued(queued_server, monkeypatch)
        page.wait_for_function(DONE_JS, timeout=WAIT_MS)
        assert not page.inner_text("#circuits-error"), page.inner_text("#circuits-error")
        for gid in ("circuits-circuit-graph", "circuits-flow-graph"):
            page.wait_for_selector(f"#{gid} .scatterlayer .point", timeout=WAIT_MS)

        def download(button: str) -> Path:
            with page.expect_download() as dl:
                page.click(f"#{button}")
            return Path(dl.value.path())

        ns = {"g": "http://graphml.graphdrawing.org/xmlns"}
        for which in ("circuit", "flow"):
            graph = json.loads(download(f"circuits-dl-{which}-json").read_text())
            assert graph["nodes"] and graph["edges"], (which, page.url, graph)
            root = ET.parse(download(f"circuits-dl-{which}-graphml")).getroot()
            nodes = {n.get("id") for n in root.iterfind(".//g:node", ns)}
            edges = [(e.get("source"), e.get("target")) for e in root.iterfind(".//g:edge", ns)]
            assert nodes == {str(n["id"]) for n in graph["nodes"]}
            assert sorted(edges) == sorted(
                (str(e["source"]), str(e["target"])) for e in graph["edges"]
            )
            assert {s for e in edges for s in e} <= nodes  # every edge between nodes of the file
        both = json.loads(download("circuits-export-json").read_text())
        assert both["flow"]["result"]["information-flow"]["nodes"]
        assert both["pair"]["result"]["edge-attribution"]["curve"]
        page.check("#circuits-image-format input[value=svg]")
        page.wait_for_function(
            "document.querySelector('#circuits-circuit-graph .js-plotly-plot')"
            "._context.toImageButtonOptions.format === 'svg'",
            timeout=WAIT_MS,
        )
        with page.expect_download() as dl:
            page.locator("#circuits-circuit-graph .modebar-btn[data-title^='Download']").click()
        assert Path(dl.value.path()).read_text().lstrip().startswith("<svg")
        page.click("#circuits-cancel")  # a finished job is not cancelled
        page.wait_for_function(
            "document.querySelector('#circuits-cancelled').textContent.includes('finished')",
            timeout=WAIT_MS,
        )
        assert (
            page.inner_text("#circuits-cancelled")
            == "not running (finished); not running (finished)"
        )
        assert not w.problems, w.problems
    finally:
        w.close()
