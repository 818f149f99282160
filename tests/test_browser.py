"""The dashboard in a real headless Chromium against the real service (``headscope serve``).

Flows: paste a text -> heatmaps -> click a head -> scatter -> hover highlight -> share -> open the
link in a fresh browser context -> same head, same map; PE upload of a demo checkpoint -> heatmap
and metrics. No page errors, no console errors, no request leaves the server's origin.
Screenshots go to ``test-artifacts/``.

``HEADSCOPE_BROWSER_BASE_URL=http://host:port`` runs the flows against a server already running
instead of starting ``python -m backend.cli serve``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from conftest import ARTIFACTS, ROOT

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
# a wait longer than this is a hang: a guard, never a speed claim (a busy machine must pass)
WAIT_MS = 600_000
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TEXT = "The cat sat on the mat because the dog was tired."
LAYER, HEAD = 1, 2
GRAPHS = ["max-attention-graph", "head-tsne-graph", "hidden-tsne-graph", "attention-matrix-graph"]

# page coordinates of heatmap cell (layer, head, token column) / of point k of a scatter
CELL_JS = """([layer, head, col]) => {
  const gd = document.querySelector('#max-attention-graph .js-plotly-plot');
  const t = gd.layout.meta.layers.indexOf(layer), tr = gd.data[t], fl = gd._fullLayout;
  const xa = fl[(tr.xaxis || 'x').replace('x', 'xaxis')], ya = fl[(tr.yaxis || 'y').replace('y', 'yaxis')];
  const r = gd.getBoundingClientRect();
  return [r.left + xa._offset + xa.l2p(col), r.top + ya._offset + ya.l2p(head)];
}"""
POINT_JS = """([id, k]) => {
  const gd = document.querySelector('#' + id + ' .js-plotly-plot');
  const tr = gd.data[0], fl = gd._fullLayout, r = gd.getBoundingClientRect();
  return [r.left + fl.xaxis._offset + fl.xaxis.l2p(tr.x[k]), r.top + fl.yaxis._offset + fl.yaxis.l2p(tr.y[k])];
}"""
MATRIX_CELL_JS = """([key, query]) => {
  const gd = document.querySelector('#attention-matrix-graph .js-plotly-plot'), fl = gd._fullLayout;
  const r = gd.getBoundingClientRect();
  return [r.left + fl.xaxis._offset + fl.xaxis.l2p(key), r.top + fl.yaxis._offset + fl.yaxis.l2p(query)];
}"""
URL_HEAD_JS = """([layer, head]) => {
  const q = new URLSearchParams(window.location.search);
  return q.get('layer') === String(layer) && q.get('head') === String(head);
}"""
FIGURE_JS = (
    "(id) => { const gd = document.querySelector('#' + id + ' .js-plotly-plot'); "
    "return {title: gd.layout.title && gd.layout.title.text, data: gd.data.map(t => ({x: Array.from(t.x || []), "
    "y: Array.from(t.y || []), text: t.text, customdata: t.customdata})), shapes: (gd.layout.shapes || []).length}; }"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_healthy(url: str, proc: subprocess.Popen | None, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"headscope serve exited with status {proc.returncode}")
        try:
            body = httpx.get(f"{url}/api/health", timeout=2).json()
            if body.get("status") == "ok" and body.get("workers", 0) >= 1:
                return
            last = json.dumps(body)
        except (httpx.HTTPError, ValueError) as exc:
            last = repr(exc)
        time.sleep(0.5)
    raise RuntimeError(f"the service did not become healthy in {timeout_s:.0f} s: {last}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tiny_model_dirs: dict[str, Path]):
    """Base URL of a running headscope: the real ``serve`` (Redis + 1 worker + API + dashboard),
    with MiniLM (the default) and the tiny models (``tiny-llama``: a Llama with GQA and a BOS)."""
    given = os.environ.get("HEADSCOPE_BROWSER_BASE_URL")
    if given:
        _wait_healthy(given.rstrip("/"), None, 30)
        yield given.rstrip("/")
        return
    pytest.importorskip(
        "backend.app", reason="the service (backend.app, `headscope serve`) is not in this build"
    )
    port = _free_port()
    data = tmp_path_factory.mktemp("serve-data")
    from service_helpers import write_catalogue

    catalogue = write_catalogue(data / "models.json", tiny_model_dirs)
    env = {
        **os.environ,
        "HEADSCOPE_DATA_DIR": str(data),
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "HEADSCOPE_MODELS": str(catalogue),
    }
    log = open(data / "serve.log", "wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "backend.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, WAIT_MS / 1000)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / "browser-serve.log").write_bytes((data / "serve.log").read_bytes()[-200_000:])


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (make system-deps)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Watch:
    """A fresh browser context and page that records page errors, console errors and foreign requests."""

    def __init__(self, browser, base: str, tmp: Path):
        self.context = browser.new_context(
            viewport={"width": 1400, "height": 1000},
            accept_downloads=True,
            user_agent="headscope-browser-test",
        )
        self.page = self.context.new_page()
        self.problems: list[str] = []
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        self.page.on(
            "console",
            lambda m: (
                self.problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None
            ),
        )
        self.page.on(
            "request",
            lambda r: (
                self.problems.append(f"foreign request: {r.url}")
                if not r.url.startswith((base, "data:", "blob:"))
                else None
            ),
        )

    def shot(self, name: str) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"browser-{name}.png"), full_page=True)

    def close(self) -> None:
        self.context.close()


def _wait_points(page, gid: str, timeout: float = WAIT_MS) -> None:
    page.wait_for_selector(f"#{gid} .scatterlayer .point", timeout=timeout)


def test_text_explorer_head_view_and_share_link(server, browser, tmp_path):
    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        page.goto(server + "/text")
        page.fill("#text-input", TEXT)
        page.click("#analyze-button")
        page.wait_for_selector("#max-attention-graph .heatmaplayer", timeout=WAIT_MS)
        page.wait_for_function(
            "document.querySelector('#text-status').textContent.includes('done')", timeout=WAIT_MS
        )
        heat = page.evaluate(FIGURE_JS, "max-attention-graph")
        assert len(heat["data"]) == 6  # MiniLM: one heatmap per layer
        tokens = page.evaluate(
            "document.querySelector('#max-attention-graph .js-plotly-plot')"
            ".layout['xaxis6'].ticktext"
        )
        assert tokens[0] == "[CLS]" and "cat" in tokens and tokens[-1] == "[SEP]"
        w.shot("1-heatmaps")

        page.locator("#max-attention-graph").scroll_into_view_if_needed()
        x, y = page.evaluate(CELL_JS, [LAYER, HEAD, 3])
        page.mouse.click(x, y)
        # the URL holds the head from the click on (written in the browser, no server round)
        page.wait_for_function(URL_HEAD_JS, arg=[LAYER, HEAD], timeout=WAIT_MS)
        _wait_points(page, "head-tsne-graph")
        _wait_points(page, "hidden-tsne-graph")
        page.wait_for_selector("#attention-matrix-graph .heatmaplayer", timeout=WAIT_MS)
        head = page.evaluate(FIGURE_JS, "head-tsne-graph")
        assert f"L{LAYER}H{HEAD}" in head["title"]
        assert list(head["data"][0]["text"]) == tokens  # tokens as labels
        assert page.evaluate(URL_HEAD_JS, [LAYER, HEAD])  # still there once every view is drawn
        assert "X[2] (output of layer 1)" in page.evaluate(FIGURE_JS, "hidden-tsne-graph")["title"]
        assert "KL" in page.inner_text("#text-kl")

        page.locator("#head-tsne-graph").scroll_into_view_if_needed()
        x, y = page.evaluate(POINT_JS, ["head-tsne-graph", 2])
        page.mouse.move(x - 40, y - 40)
        page.mouse.move(x, y, steps=4)
        page.wait_for_function(
            "document.querySelector('#hidden-tsne-graph .js-plotly-plot').layout.shapes"
            " && document.querySelector('#hidden-tsne-graph .js-plotly-plot').layout.shapes.length",
            timeout=WAIT_MS,
        )
        assert [page.evaluate(FIGURE_JS, g)["shapes"] for g in GRAPHS] == [
            1,
            1,
            1,
            2,
        ]  # token 2 in every view
        # the matrix sends only weights per cell: its hover names the tokens through the axes' labels
        page.locator("#attention-matrix-graph").scroll_into_view_if_needed()
        x, y = page.evaluate(MATRIX_CELL_JS, [2, 3])  # key "cat", query "sat"
        page.mouse.move(x - 5, y - 5)
        page.mouse.move(x, y, steps=3)
        page.wait_for_selector("#attention-matrix-graph .hoverlayer .hovertext", timeout=WAIT_MS)
        hover = page.text_content("#attention-matrix-graph .hoverlayer .hovertext") or ""
        assert f"query → key: {tokens[3]} → {tokens[2]}" in hover and "attention 0." in hover, hover
        w.shot("2-matrix-hover")
        # so do the heatmaps: the hover names the column's token through its axis' labelalias
        page.locator("#max-attention-graph").scroll_into_view_if_needed()
        x, y = page.evaluate(CELL_JS, [LAYER, HEAD, 2])
        page.mouse.move(x - 5, y - 5)
        page.mouse.move(x, y, steps=3)
        page.wait_for_selector("#max-attention-graph .hoverlayer .hovertext", timeout=WAIT_MS)
        hover = page.text_content("#max-attention-graph .hoverlayer .hovertext") or ""
        assert f"L{LAYER}H{HEAD}" in hover and f"token {tokens[2]}" in hover, hover
        w.shot("2-heatmap-hover")
        w.shot("2-head-view")

        with page.expect_download() as dl:
            page.click("#text-export-json")
        exported = json.loads(Path(dl.value.path()).read_text())
        from frontend.figures.tokens import readable_tokens

        assert (
            readable_tokens(exported["result"]) == tokens
        )  # the labels shown are the export's tokens
        assert (
            exported["request"]["options"]["hidden_layer"] == "all"
        )  # every state: heads switch in place
        assert exported["request"]["options"]["all_heads"] is True
        with page.expect_download() as dl:
            page.click("#text-export-html")
        html_page = Path(dl.value.path()).read_text()
        # heatmaps, map, hidden map, matrix, gallery, head view, model view
        assert html_page.count("Plotly.newPlot") == 7 and "<script src=" not in html_page
        page.check("#text-image-format input[value=svg]")  # the camera button now saves SVG
        page.wait_for_function(
            "document.querySelector('#head-tsne-graph .js-plotly-plot')"
            "._context.toImageButtonOptions.format === 'svg'",
            timeout=WAIT_MS,
        )
        with page.expect_download() as dl:
            page.locator("#head-tsne-graph .modebar-btn[data-title^='Download']").click()
        assert dl.value.suggested_filename == "headscope-head-tsne-graph.svg"
        assert Path(dl.value.path()).read_text().lstrip().startswith("<svg")

        page.locator("#text-share-button").scroll_into_view_if_needed()
        page.click("#text-share-button")
        page.wait_for_function(
            "document.querySelector('#text-share-url').textContent.includes('share=')",
            timeout=WAIT_MS,
        )
        link = page.inner_text("#text-share-url")
        assert link.startswith(server + "/?share=")
        assert not w.problems, w.problems
    finally:
        w.close()

    fresh = Watch(browser, server, tmp_path)  # a colleague: new context, no cookies, no cache
    try:
        fresh.page.goto(
            link
        )  # no timing claim: the stored map (below) shows nothing was recomputed
        _wait_points(fresh.page, "head-tsne-graph", timeout=WAIT_MS)
        again = fresh.page.evaluate(FIGURE_JS, "head-tsne-graph")
        assert again["title"] == head["title"]
        assert (
            again["data"][0]["customdata"] == head["data"][0]["customdata"]
        )  # the stored map, not a new one
        assert fresh.page.input_value("#text-input") == TEXT
        fresh.page.wait_for_function(URL_HEAD_JS, arg=[LAYER, HEAD], timeout=WAIT_MS)
        assert "shared result" in fresh.page.inner_text("#text-status")
        _wait_points(fresh.page, "hidden-tsne-graph", timeout=WAIT_MS)
        fresh.page.wait_for_selector("#max-attention-graph .heatmaplayer", timeout=WAIT_MS)
        fresh.shot("3-shared-link")
        assert not fresh.problems, fresh.problems
    finally:
        fresh.close()


def test_pe_upload_of_a_demo_checkpoint(server, browser, tmp_path):
    pe_demo = pytest.importorskip(
        "workers.data.pe_demo", reason="no shipped PE demo checkpoints in this build"
    )
    demos = pe_demo.demo_checkpoints()
    assert demos, "the build ships demo checkpoints"
    path = Path(demos[0]["path"])
    upload = (
        path
        if path.is_file()
        else next(p for p in sorted(path.iterdir()) if p.suffix in (".safetensors", ".npy"))
    )
    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        page.goto(server + "/pe")
        page.set_input_files("#pe-upload input[type=file]", str(upload))
        page.wait_for_selector("#pe-checkpoint-list .checkpoint", timeout=WAIT_MS)
        assert upload.name in page.inner_text("#pe-checkpoint-list")
        page.click("#pe-run-button")  # defaults: 2d-fixed 4x4 reference, grid-row partition
        page.wait_for_selector("#pe-metrics-table", timeout=WAIT_MS)
        page.wait_for_selector("#pe-distance-graph .heatmaplayer", timeout=WAIT_MS)
        _wait_points(page, "pe-map-graph", timeout=WAIT_MS)
        rows = page.locator("#pe-metrics-table tbody tr")
        assert rows.count() == 1
        cells = [c.strip() for c in rows.nth(0).inner_text().split("\t")]
        procrustes, normalised, q, c = (float(v) for v in cells[2:6])
        assert procrustes > 0 and 0 <= normalised <= 2 and -0.5 <= q <= 1 and c <= 1
        z = page.evaluate("document.querySelector('#pe-distance-graph .js-plotly-plot').data[0].z")
        assert len(z) == len(z[0]) and all(z[i][i] == 0 for i in range(len(z)))
        w.shot("4-pe")
        page.click("#pe-demo-button")  # the shipped demos, one click away
        page.wait_for_function(
            "document.querySelectorAll('#pe-checkpoint-list .checkpoint').length > 1",
            timeout=WAIT_MS,
        )
        assert not w.problems, w.problems
    finally:
        w.close()


def _pick(page, dropdown_id: str, label: str) -> None:
    """Choose the option whose label starts with ``label`` in a dcc.Dropdown."""
    page.click(f"#{dropdown_id}")
    page.get_by_role("option", name=label).first.click()


def test_tiny_llama_paste_heatmaps_head_and_terms(server, browser, tmp_path):
    """A Llama-family decoder end to end: pick it, paste, causal heatmaps with BOS, open a head, Terms."""
    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        page.goto(server + "/text")
        _pick(page, "text-model", "tiny-llama — llama, 2x4 (2 kv), 64 tokens")
        page.fill("#text-input", TEXT)
        page.click("#analyze-button")
        page.wait_for_function(
            "document.querySelector('#text-status').textContent.includes('done')"
            " || document.querySelector('#text-error').textContent",
            timeout=120_000,
        )
        assert not page.inner_text("#text-error"), page.inner_text("#text-error")
        page.wait_for_selector("#max-attention-graph .heatmaplayer", timeout=60_000)
        heat = page.evaluate(FIGURE_JS, "max-attention-graph")
        assert len(heat["data"]) == 2, page.inner_text("#text-status")  # two layers
        assert "queries i >= j (causal)" in heat["title"]
        tokens = page.evaluate(
            "document.querySelector('#max-attention-graph .js-plotly-plot')"
            ".layout['xaxis2'].ticktext"
        )
        assert (
            tokens[0] == "&lt;s&gt;" and len(tokens) > 5
        )  # BOS, shown as <s> (not plotly's strike tag)
        w.shot("5-llama-heatmaps")
        page.locator("#max-attention-graph").scroll_into_view_if_needed()
        x, y = page.evaluate(CELL_JS, [1, 3, 2])
        page.mouse.click(x, y)
        _wait_points(page, "head-tsne-graph")
        assert "L1H3" in page.evaluate(FIGURE_JS, "head-tsne-graph")["title"]
        page.wait_for_selector("#attention-matrix-graph .heatmaplayer", timeout=60_000)
        w.shot("6-llama-head")

        page.goto(server + "/terms")
        _pick(page, "terms-model", "tiny-llama")
        page.fill("#terms-text", TEXT)
        page.click("#terms-analyze")
        page.wait_for_selector("#terms-curves-graph .scatterlayer .trace", timeout=120_000)
        curves = page.evaluate(FIGURE_JS, "terms-curves-graph")
        assert any(len(t["x"]) == 3 for t in curves["data"])  # states 0, 1, 2
        w.shot("7-llama-terms")
        assert not w.problems, w.problems
    finally:
        w.close()


# ------------------------------------------------------------------ every head at a glance (issue 14)

PANEL_JS = """([id, layer, head]) => {
  const gd = document.querySelector('#' + id + ' .js-plotly-plot'), m = gd.layout.meta.gallery;
  const fl = gd._fullLayout, r = gd.getBoundingClientRect();
  const c = m.heads.indexOf(head), i = m.layers.indexOf(layer), per = m.per_row || 1;  // per_row layers a row
  const x = (i % per) * (m.slot || 0) + c * m.sx + 0.5, y = Math.floor(i / per) * m.sy + 0.5;
  return [r.left + fl.xaxis._offset + fl.xaxis.l2p(x), r.top + fl.yaxis._offset + fl.yaxis.l2p(y)];
}"""
# performance.now() at the click (window, capture phase: before any handler) and at each redraw of the map
TIMING_JS = """() => {
  window.__hs = {clicks: [], drawn: [], calls: []};
  window.addEventListener('click', () => window.__hs.clicks.push(performance.now()), true);
  const fetch0 = window.fetch;  // when the page next asks its server anything (Dash callbacks)
  window.fetch = function (url) { window.__hs.calls.push(performance.now()); return fetch0.apply(this, arguments); };
  const gd = document.querySelector('#head-tsne-graph .js-plotly-plot');
  gd.on('plotly_afterplot', () => window.__hs.drawn.push([performance.now(), (gd.layout.title || {}).text || '']));
}"""
DRAWN_JS = """(want) => { const d = window.__hs.drawn.find(([t, title]) => title.includes(want) && t > window.__hs.clicks.at(-1));
  return d ? d[0] - window.__hs.clicks.at(-1) : null; }"""
# milliseconds from the map of ``want`` being drawn to the page's first server call after the click
BEFORE_SERVER_JS = """(want) => { const click = window.__hs.clicks.at(-1);
  const d = window.__hs.drawn.find(([t, title]) => title.includes(want) && t > click);
  const call = window.__hs.calls.find(t => t > click); return call === undefined ? 1e9 : call - d[0]; }"""
# line segments actually drawn in the head view's SVG (each line starts a subpath with M)
LINES_JS = """() => { const gd = document.querySelector('#head-view-graph .js-plotly-plot');
  const traces = gd.layout.meta.headview.traces;
  return Array.from(gd.querySelectorAll('.scatterlayer .trace')).slice(0, traces.length)
    .map(t => Array.from(t.querySelectorAll('path.js-line')).map(p => (p.getAttribute('d').match(/M/g) || []).length)
    .reduce((a, b) => a + b, 0)).reduce((a, b) => a + b, 0); }"""


def _click_to_map_ms(page, x: float, y: float, want: str) -> float:
    """Click, wait for the map of ``want`` and for the views that follow it; the click-to-map time."""
    page.mouse.click(x, y)
    page.wait_for_function(DRAWN_JS, arg=want, timeout=10_000)
    for gid in (
        "attention-matrix-graph",
        "head-view-graph",
    ):  # let the followers land before the next click
        page.wait_for_function(
            f"document.querySelector('#{gid} .js-plotly-plot')?.layout?.title?.text?.includes('{want}')",
            timeout=30_000,
        )
    page.wait_for_timeout(300)
    assert (
        page.evaluate(BEFORE_SERVER_JS, want) > 0
    )  # drawn before the page asked its server anything
    return float(page.evaluate(DRAWN_JS, want))


def test_gallery_switches_heads_in_the_browser(server, browser, tmp_path):
    from frontend.kit.heads import head_attention

    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        page.goto(server + "/text")
        page.fill("#text-input", TEXT)
        page.click("#analyze-button")
        page.wait_for_function(
            "document.querySelector('#text-status').textContent.includes('done')", timeout=120_000
        )
        page.wait_for_function(
            "(document.querySelector('#head-gallery .js-plotly-plot')?.layout?.meta?.gallery"
            "?.panels?.length || 0) === 72",
            timeout=30_000,
        )
        page.wait_for_function("location.search.includes('analysis=')", timeout=30_000)
        analysis = page.url.split("analysis=")[1].split("&")[0]
        result = httpx.get(f"{server}/api/analyses/{analysis}", timeout=30).json()["result"]
        gallery = page.evaluate(
            "document.querySelector('#head-gallery .js-plotly-plot').layout.meta.gallery"
        )
        assert gallery["panels"] == [
            [la, h] for la in range(6) for h in range(12)
        ]  # one panel per head
        # each layer's row of panels is one picture, placed, not plotted point by point
        assert page.locator("#head-gallery .layer-above .imagelayer image").count() == 6
        assert (
            page.locator("#head-gallery .scatterlayer .point").count() <= 1
        )  # the colour bar's hidden point
        page.locator("#head-gallery").scroll_into_view_if_needed()
        w.shot("5-gallery")
        page.locator("#head-gallery").screenshot(
            path=str(ARTIFACTS / "browser-5-gallery-panel.png")
        )

        dash_calls: list[str] = []
        page.on(
            "response",
            lambda r: (
                dash_calls.append(r.text())
                if "_dash-update-component" in r.url and r.status == 200
                else None
            ),
        )
        page.evaluate(TIMING_JS)
        page.locator("#head-gallery").scroll_into_view_if_needed()
        _click_to_map_ms(page, *page.evaluate(PANEL_JS, ["head-gallery", 1, 1]), "L1H1")  # warm-up
        times = []
        for layer, head in [(3, 4), (0, 7), (5, 11), (4, 0), (2, 5), (1, 10)]:  # gallery panels
            page.locator("#head-gallery").scroll_into_view_if_needed()
            times.append(
                _click_to_map_ms(
                    page,
                    *page.evaluate(PANEL_JS, ["head-gallery", layer, head]),
                    f"L{layer}H{head}",
                )
            )
        page.locator("#max-attention-graph").scroll_into_view_if_needed()  # a max-attention cell
        times.append(_click_to_map_ms(page, *page.evaluate(CELL_JS, [2, 9, 3]), "L2H9"))
        print(f"click-to-map times (ms, in the browser): {[round(t, 1) for t in times]}")
        # Target 100 ms. Every switch is drawn before the page calls its server (asserted in
        # _click_to_map_ms, whatever the load); of seven, the best — one the browser had the CPU
        # for — must be within the target. On an overloaded machine (load average above 1.5 per
        # core: Plotly's redraw alone then takes 100-300 ms) the times are printed, not asserted.
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
        print(f"load average per core: {load:.1f}")
        if load < 1.5:
            assert min(times) < 100, times
        page.wait_for_function(
            "document.querySelector('#attention-matrix-graph .js-plotly-plot').layout.title"
            ".text.includes('L2H9')",
            timeout=30_000,
        )
        page.wait_for_function(
            "document.querySelector('#hidden-tsne-graph .js-plotly-plot').layout.title"
            ".text.includes('X[3]')",
            timeout=30_000,
        )
        assert f"analysis={analysis}" in page.url and "layer=2" in page.url and "head=9" in page.url
        assert not any(
            '"text-source"' in body for body in dash_calls
        )  # no new analysis was submitted

        # head view: one line per (query, key) pair at or above the threshold, then a hovered token's only
        page.wait_for_function(
            "document.querySelector('#head-view-graph .js-plotly-plot').layout.title"
            ".text.includes('L2H9')",
            timeout=30_000,
        )
        a = head_attention(result, 2, 9)[0]  # [query, key], the weights the page has
        threshold = float(page.input_value("#text-hv-threshold"))
        assert page.evaluate(LINES_JS) == int((a >= threshold).sum())
        page.locator("#head-view-graph").scroll_into_view_if_needed()
        q = 3  # hover the query token "sat"
        xy = page.evaluate(
            """(q) => { const gd = document.querySelector('#head-view-graph .js-plotly-plot');
          const fl = gd._fullLayout, r = gd.getBoundingClientRect();
          return [r.left + fl.xaxis._offset + fl.xaxis.l2p(0), r.top + fl.yaxis._offset + fl.yaxis.l2p(q)]; }""",
            q,
        )
        page.mouse.move(xy[0] - 30, xy[1] - 30)
        page.mouse.move(*xy, steps=4)
        want = int((a[q] >= threshold).sum())
        page.wait_for_function(f"({LINES_JS})() === {want}", timeout=10_000)
        w.shot("6-head-view")
        page.locator("#head-view-graph").screenshot(
            path=str(ARTIFACTS / "browser-6-head-view-lines.png")
        )
        page.mouse.move(5, 5)

        # a second head of the layer in its own colour
        page.fill("#text-hv-threshold", "0.3")
        page.press("#text-hv-threshold", "Enter")
        page.wait_for_function(
            "document.querySelector('#head-view-graph .js-plotly-plot').layout.meta.headview"
            ".threshold === 0.3",
            timeout=30_000,
        )
        assert page.evaluate(LINES_JS) == int((a >= 0.3).sum())

        # model view: clicking a head selects it everywhere
        page.locator("#model-view-graph").scroll_into_view_if_needed()
        mv = page.evaluate("""() => { const gd = document.querySelector('#model-view-graph .js-plotly-plot');
          const m = gd.layout.meta.modelview, fl = gd._fullLayout, r = gd.getBoundingClientRect();
          const x = 6 * m.stride + 2, y = 4 * m.stride + 2;
          return [r.left + fl.xaxis._offset + fl.xaxis.l2p(x), r.top + fl.yaxis._offset + fl.yaxis.l2p(y)]; }""")
        _click_to_map_ms(page, *mv, "L4H6")
        page.locator("#model-view-graph").screenshot(
            path=str(ARTIFACTS / "browser-7-model-view.png")
        )

        # the gallery exports as one image; a share reopens the head and the gallery page
        page.locator("#head-gallery").scroll_into_view_if_needed()
        with page.expect_download() as dl:
            page.locator("#head-gallery .modebar-btn[data-title^='Download']").click()
        assert dl.value.suggested_filename == "headscope-head-gallery.png"
        page.locator("#text-share-button").scroll_into_view_if_needed()
        page.click("#text-share-button")
        page.wait_for_function(
            "document.querySelector('#text-share-url').textContent.includes('share=')",
            timeout=30_000,
        )
        link = page.inner_text("#text-share-url")
        assert not w.problems, w.problems
    finally:
        w.close()

    fresh = Watch(browser, server, tmp_path)
    try:
        fresh.page.goto(link)
        fresh.page.wait_for_function(
            "document.querySelector('#head-tsne-graph .js-plotly-plot')?.layout?.title"
            "?.text?.includes('L4H6')",
            timeout=30_000,
        )
        fresh.page.wait_for_function(
            "(document.querySelector('#head-gallery .js-plotly-plot')?.layout?.meta"
            "?.gallery?.panels?.length || 0) === 72",
            timeout=30_000,
        )
        assert "gallery" in fresh.page.evaluate(
            "document.querySelector('#head-gallery .js-plotly-plot').layout.meta"
        )
        assert not fresh.problems, fresh.problems
    finally:
        fresh.close()


def test_pe_colour_scales_per_panel_or_shared(server, browser, tmp_path):
    pytest.importorskip(
        "workers.data.pe_demo", reason="no shipped PE demo checkpoints in this build"
    )
    ranges_js = """() => { const gd = document.querySelector('#pe-distance-graph .js-plotly-plot');
      return gd.data.map(t => { const ax = gd._fullLayout[t.coloraxis || 'coloraxis']; return [t.coloraxis, ax.cmin, ax.cmax]; }); }"""
    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        page.goto(server + "/pe")
        page.click("#pe-demo-button")
        page.wait_for_function(
            "document.querySelectorAll('#pe-checkpoint-list .checkpoint').length > 1",
            timeout=60_000,
        )
        page.click("#pe-run-button")
        page.wait_for_selector("#pe-distance-graph .heatmaplayer", timeout=120_000)
        page.wait_for_function(
            "document.querySelector('#pe-distance-graph .js-plotly-plot').data.length > 1",
            timeout=60_000,
        )
        own = page.evaluate(ranges_js)
        assert len({axis for axis, _, _ in own}) == len(own) > 1  # one colour scale per panel
        w.shot("8-pe-own-scales")
        page.check("#pe-shared-scale input[value=shared]")
        page.wait_for_function(
            "new Set(document.querySelector('#pe-distance-graph .js-plotly-plot').data"
            ".map(t => t.coloraxis)).size === 1",
            timeout=30_000,
        )
        shared = page.evaluate(ranges_js)
        assert len({(lo, hi) for _, lo, hi in shared}) == 1
        assert shared[0][2] == pytest.approx(
            max(hi for _, _, hi in own)
        )  # one range spans every panel
        assert [hi for _, _, hi in own] != [
            hi for _, _, hi in shared
        ]  # the toggle changed the ranges
        assert "shared=1" in page.url
        w.shot("9-pe-shared-scale")
        assert not w.problems, w.problems
    finally:
        w.close()


# ------------------------------------------------------------------ a real decoder (issue 22)


def test_smollm2_text_explorer_gallery_heads_and_chat(server, browser, tmp_path):
    """SmolLM2 (30 layers x 9 heads, real weights) end to end: 30 heatmaps with readable labels, the
    gallery of 270 heads over pages, a head from the gallery in every head view, a share link, and
    the chat-message toggle whose template hides with the special tokens."""
    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        page.goto(server + "/text")
        _pick(page, "text-model", "smollm2 — llama, 30x9 (3 kv), 8192 tokens")
        page.fill("#text-input", TEXT)
        page.click("#analyze-button")
        page.wait_for_function(
            "document.querySelector('#text-status').textContent.includes('done')"
            " || document.querySelector('#text-error').textContent",
            timeout=WAIT_MS,
        )
        assert not page.inner_text("#text-error"), page.inner_text("#text-error")
        page.wait_for_selector("#max-attention-graph .heatmaplayer", timeout=60_000)
        heat = page.evaluate(FIGURE_JS, "max-attention-graph")
        assert len(heat["data"]) == 30 and "queries i >= j (causal)" in heat["title"]
        ticks = page.evaluate(
            "document.querySelector('#max-attention-graph .js-plotly-plot').layout['xaxis30'].ticktext"
        )
        # tokens as every page shows them (workers/core/notation.py): a space as ␣, never Ġ
        assert ticks[:3] == ["The", "␣cat", "␣sat"] and not any("Ġ" in t for t in ticks)
        w.shot("8-smollm2-heatmaps")

        page.wait_for_function(
            "(document.querySelector('#head-gallery .js-plotly-plot')?.layout?.meta?.gallery"
            "?.panels?.length || 0) === 90",
            timeout=WAIT_MS,
        )  # 10 whole layers a page
        page.wait_for_function("location.search.includes('analysis=')", timeout=30_000)
        analysis = page.url.split("analysis=")[1].split("&")[0]
        result = httpx.get(f"{server}/api/analyses/{analysis}", timeout=30).json()["result"]
        assert np.asarray(result["head-tsne-all"]["embedding"]).shape[:2] == (
            30,
            9,
        )  # all 270 heads
        _pick(page, "text-gallery-page", "layers 20")
        page.wait_for_function(
            "document.querySelector('#head-gallery .js-plotly-plot').layout.meta.gallery"
            ".panels.some(([l, h]) => l === 29 && h === 8)",
            timeout=30_000,
        )
        page.locator("#head-gallery").scroll_into_view_if_needed()
        page.mouse.click(*page.evaluate(PANEL_JS, ["head-gallery", 23, 4]))
        _wait_points(page, "head-tsne-graph")
        for gid in ("head-tsne-graph", "attention-matrix-graph", "head-view-graph"):
            page.wait_for_function(
                f"document.querySelector('#{gid} .js-plotly-plot')?.layout?.title?.text"
                "?.includes('L23H4')",
                timeout=60_000,
            )
        page.wait_for_selector("#model-view-graph .js-plotly-plot", timeout=60_000)
        w.shot("9-smollm2-head")
        page.locator("#text-share-button").scroll_into_view_if_needed()
        page.click("#text-share-button")
        page.wait_for_function(
            "document.querySelector('#text-share-url').textContent.includes('share=')",
            timeout=30_000,
        )
        link = page.inner_text("#text-share-url")

        # the chat toggle: the template's tokens are special, so "hide special tokens" hides them
        page.locator("#text-input").scroll_into_view_if_needed()
        page.get_by_label("chat message").check()
        page.click("#analyze-button")
        page.wait_for_function(
            "document.querySelector('#max-attention-graph .js-plotly-plot')?.layout['xaxis30']"
            "?.ticktext?.[0] === '&lt;|im_start|&gt;'",
            timeout=WAIT_MS,
        )
        page.get_by_label("hide special tokens").check()
        page.click("#analyze-button")
        page.wait_for_function(
            "document.querySelector('#max-attention-graph .js-plotly-plot')?.layout['xaxis30']"
            "?.ticktext?.[0] === 'The'",
            timeout=WAIT_MS,
        )
        ticks = page.evaluate(
            "document.querySelector('#max-attention-graph .js-plotly-plot').layout['xaxis30'].ticktext"
        )
        assert not any("im_start" in t or "im_end" in t for t in ticks) and ticks[-1] == "."
        assert not w.problems, w.problems
    finally:
        w.close()

    fresh = Watch(browser, server, tmp_path)
    try:
        fresh.page.goto(link)
        fresh.page.wait_for_function(
            "document.querySelector('#head-tsne-graph .js-plotly-plot')?.layout?.title"
            "?.text?.includes('L23H4')",
            timeout=60_000,
        )
        assert not fresh.problems, fresh.problems
    finally:
        fresh.close()


# ------------------------------------------------------------------ Gemma 3 270M (issue 31)


def test_gemma3_text_explorer_local_layers_gallery_and_licence(server, browser, tmp_path):
    """Gemma 3 270M (18 layers x 4 heads, real weights): the picker links the Gemma Terms of Use, 18
    heatmaps whose local layers say so in their titles, the gallery of all 72 heads on one page, the
    term importance curves over its 19 states."""
    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        page.goto(server + "/text")
        _pick(
            page,
            "text-model",
            "gemma3-270m — gemma3_text, 18x4 (1 kv), 32768 tokens, Gemma Terms of Use",
        )
        page.wait_for_selector("#text-model-licence a", timeout=30_000)
        assert (
            page.get_attribute("#text-model-licence a", "href")
            == "https://ai.google.dev/gemma/terms"
        )
        page.fill("#text-input", TEXT)
        page.click("#analyze-button")
        page.wait_for_function(
            "document.querySelector('#text-status').textContent.includes('done')"
            " || document.querySelector('#text-error').textContent",
            timeout=WAIT_MS,
        )
        assert not page.inner_text("#text-error"), page.inner_text("#text-error")
        page.wait_for_selector("#max-attention-graph .heatmaplayer", timeout=60_000)
        heat = page.evaluate(FIGURE_JS, "max-attention-graph")
        assert len(heat["data"]) == 18
        titles = page.evaluate(
            "Array.from(document.querySelector('#max-attention-graph .js-plotly-plot')"
            ".layout.annotations || []).map(a => a.text)"
        )
        # a 13-token text: no query's window (512 keys) cuts anything, so no title says "local"
        assert "layer 0" in titles and "layer 5" in titles
        assert not [t for t in titles if "local" in t], titles
        ticks = page.evaluate(
            "document.querySelector('#max-attention-graph .js-plotly-plot').layout['xaxis18'].ticktext"
        )
        assert ticks[1:4] == ["The", "␣cat", "␣sat"] and not any("▁" in t for t in ticks)
        w.shot("10-gemma3-heatmaps")
        page.locator(".controls").screenshot(path=str(ARTIFACTS / "browser-10-gemma3-picker.png"))
        page.locator("#max-attention-graph").screenshot(
            path=str(ARTIFACTS / "browser-10-gemma3-heatmaps-graph.png")
        )
        page.wait_for_function(
            "(document.querySelector('#head-gallery .js-plotly-plot')?.layout?.meta?.gallery"
            "?.panels?.length || 0) === 72",
            timeout=WAIT_MS,
        )  # every head on one page
        page.locator("#head-gallery").scroll_into_view_if_needed()
        w.shot("11-gemma3-gallery")
        page.locator("#head-gallery").screenshot(
            path=str(ARTIFACTS / "browser-11-gemma3-gallery-graph.png")
        )

        page.goto(server + "/terms")  # the decomposition through the sandwich norms
        _pick(page, "terms-model", "gemma3-270m")
        page.fill("#terms-text", TEXT)
        page.click("#terms-analyze")
        page.wait_for_selector("#terms-curves-graph .scatterlayer .trace", timeout=WAIT_MS)
        curves = page.evaluate(FIGURE_JS, "terms-curves-graph")
        assert any(len(t["x"]) == 19 for t in curves["data"])  # states 0..18
        page.locator("#terms-curves-graph").screenshot(
            path=str(ARTIFACTS / "browser-12-gemma3-terms-graph.png")
        )
        assert not w.problems, w.problems
    finally:
        w.close()
