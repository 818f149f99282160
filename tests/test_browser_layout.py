"""The text explorer's layout in a real headless Chromium against the real service, on a model with
few heads (the tiny GPT-2: 2 layers of 4 heads): before Analyze no large empty card; each section
folds; the gallery holds several layers a row, its panels square, and a click on a panel of the
second layer of a row opens that head (docs/dashboard.md). Screenshots:
``test-artifacts/browser-layout-*.png``."""

from __future__ import annotations

import pytest
from test_browser import PANEL_JS, WAIT_MS, Watch, browser, server  # noqa: F401 - fixtures

from frontend.app import PLOTLY_JS, PREVIEW_PATH
from frontend.figures.gallery import per_row
from frontend.kit.heads import gallery_section

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TEXT = "The cat sat on the mat because the dog was tired."
FOLDS = ("text-fold-heatmaps", "text-fold-gallery", "text-fold-head", "text-fold-lines")
# the page's height, the viewport's, and each fold's height
HEIGHTS_JS = """(ids) => ({page: document.documentElement.scrollHeight, viewport: window.innerHeight,
  folds: ids.map((id) => { const e = document.getElementById(id); return e ? e.getBoundingClientRect().height : -1; })})"""
# a gallery panel's size on screen (x and y pixels of one data unit) and the rows its layers take
PANEL_SIZE_JS = """() => {
  const gd = document.querySelector('#head-gallery .js-plotly-plot'), fl = gd._fullLayout;
  return {w: Math.abs(fl.xaxis.l2p(1) - fl.xaxis.l2p(0)), h: Math.abs(fl.yaxis.l2p(1) - fl.yaxis.l2p(0)),
          plot: fl.width, height: fl.height, meta: gd.layout.meta.gallery,
          tops: Array.from(gd.layout.images).map((im) => im.y)};
}"""


def test_few_heads_fill_the_row_and_sections_fold(server, browser, tmp_path):
    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        page.goto(server + "/text?model=tiny-gpt2")
        page.wait_for_selector("#head-gallery .js-plotly-plot", timeout=WAIT_MS)
        page.wait_for_function(
            "document.querySelector('#max-attention-graph .js-plotly-plot')", timeout=WAIT_MS
        )
        before = page.evaluate(HEIGHTS_JS, list(FOLDS))
        w.shot("layout-before-analyze")
        # before Analyze: no section is a large empty card, and the page is within 1.5 screens
        assert all(0 < h < 300 for h in before["folds"]), before
        assert before["page"] <= 1.5 * before["viewport"], before

        page.fill("#text-input", TEXT)
        page.click("#analyze-button")
        page.wait_for_function(
            "document.querySelector('#text-status').textContent === 'done'", timeout=WAIT_MS
        )
        page.wait_for_function(
            "(document.querySelector('#head-gallery .js-plotly-plot')?.layout?.meta?.gallery"
            "?.panels?.length || 0) === 8",
            timeout=WAIT_MS,
        )
        got = page.evaluate(PANEL_SIZE_JS)
        meta = got["meta"]
        # 4 heads a layer: several layers a row, so the tiny model's 2 layers share one row ...
        assert meta["per_row"] >= 2 and meta["layers"] == [0, 1], meta
        assert len(set(got["tops"])) == 1, got["tops"]
        # ... of square panels (a layer a row stretched 4 panels over the width: 2.7 : 1)
        assert 0.85 < got["w"] / got["h"] < 1.15, got
        page.locator("#head-gallery").scroll_into_view_if_needed()
        w.shot("layout-gallery")
        # a click on a panel of the row's second layer opens that head
        x, y = page.evaluate(PANEL_JS, ["head-gallery", 1, 2])
        page.mouse.click(x, y)
        page.wait_for_function(
            "(document.querySelector('#head-tsne-graph .js-plotly-plot')?.layout?.title?.text || '')"
            ".includes('L1H2')",
            timeout=WAIT_MS,
        )

        # every section folds: a click on its title hides the rest, another shows it again
        for fid in FOLDS:
            opened = page.evaluate(HEIGHTS_JS, [fid])["folds"][0]
            page.click(f"#{fid} > summary")
            page.wait_for_function(f"!document.getElementById('{fid}').open", timeout=WAIT_MS)
            folded = page.evaluate(HEIGHTS_JS, [fid])["folds"][0]
            assert folded < 60 < opened, (fid, folded, opened)
        w.shot("layout-folded")
        for fid in FOLDS:
            page.click(f"#{fid} > summary")
        page.wait_for_function(
            "[...document.querySelectorAll('details.fold')].every((d) => d.open)", timeout=WAIT_MS
        )
        assert not w.problems, w.problems
    finally:
        w.close()


def test_a_stored_result_is_drawn_in_one_answer_per_figure(server, browser, tmp_path):
    """A finished result opened from its link (``/?analysis=ID``, a new browser context) is drawn
    from what is stored: each figure in one answer of the page's server. The page's callbacks that
    follow the job wait for its first poll, so none runs twice (Dash drops the answer of a call once a
    newer call of the same callback has started: the gallery used to be built twice, the first answer
    thrown away, docs/dashboard.md). The gallery comes first: the heatmaps, the open head's matrix
    and the model view are asked for only after its answer is in, the head maps after the heatmaps'
    answer, and plotly.js is fetched once, at navigation (app.index_string)."""
    import json

    import httpx

    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        body = {"model": "tiny-gpt2", "text": "A stored result opens at once, drawn from what is stored.",
                "analyses": ["max-attention", "head-tsne", "hidden-tsne"],
                "options": {"layer": 0, "head": 0, "all_heads": True, "hidden_layer": "all"}}  # fmt: skip
        job = httpx.post(f"{server}/api/analyses", json=body, timeout=30).json()
        page.goto(f"{server}/?analysis={job['id']}")
        page.wait_for_function(
            "document.querySelector('#text-status')?.textContent === 'done'", timeout=WAIT_MS
        )
        w.close()
        w = Watch(browser, server, tmp_path)  # a new context: nothing of the page kept
        page = w.page
        events: list[tuple[str, str, dict]] = []  # (request | response, outputs, response body)

        def output(r) -> str:
            return json.loads(r.post_data or "{}").get("output", "")

        page.on(
            "request",
            lambda r: (
                events.append(("request", output(r), {}))
                if "_dash-update-component" in r.url
                else None
            ),
        )
        urls: list[str] = []  # every URL the page asked for
        page.on("request", lambda r: urls.append(r.url))
        previews: list[str] = []  # the first row's picture, asked for by the page's HTML
        page.on(
            "response",
            lambda r: (
                previews.append(r.text()) if PREVIEW_PATH in r.url and r.status == 200 else None
            ),
        )
        page.on(
            "response",
            lambda r: (
                events.append(("response", output(r.request), r.json().get("response", {})))
                if "_dash-update-component" in r.url and r.status == 200
                else None
            ),
        )
        page.goto(f"{server}/?analysis={job['id']}")
        page.wait_for_function(
            "document.querySelector('#head-gallery .js-plotly-plot')?.layout?.meta?.gallery?.complete"
            " && document.querySelector('#text-status')?.textContent === 'done'"
            " && ['max-attention-graph', 'model-view-graph', 'attention-matrix-graph'].every((id) =>"
            " document.querySelector('#' + id + ' .js-plotly-plot')?.data?.length)",
            timeout=WAIT_MS,
        )
        page.wait_for_timeout(1500)  # any later call would have started by now
        sent = {
            fig: sum(
                1
                for kind, _, body in events
                if kind == "response" and "figure" in body.get(fig, {})
            )
            for fig in ("head-gallery", "max-attention-graph", "model-view-graph")
        }
        assert sent == {"head-gallery": 1, "max-attention-graph": 1, "model-view-graph": 1}, sent
        # the gallery first: the heavy figures are asked for once its answer is in (and painted,
        # assets/gallery.js: lateSections), so Chromium draws its rows before the heatmaps; the
        # calls at load, before it, answer nothing
        gallery_in = next(
            i
            for i, (kind, _, body) in enumerate(events)
            if kind == "response" and "figure" in body.get("head-gallery", {})
        )
        for fig in ("max-attention-graph", "attention-matrix-graph", "model-view-graph"):
            asked = [
                i for i, (kind, out, _) in enumerate(events) if kind == "request" and fig in out
            ]
            came = [
                i
                for i, (kind, _, body) in enumerate(events)
                if kind == "response" and "figure" in body.get(fig, {})
            ]
            assert came and asked[-1] > gallery_in and min(came) > gallery_in, (fig, events)
        # and the head maps (megabytes) after the heatmaps: asked for once the heatmaps' answer is in
        heatmaps_in = next(
            i
            for i, (kind, _, body) in enumerate(events)
            if kind == "response" and "figure" in body.get("max-attention-graph", {})
        )
        maps = [
            i
            for i, (kind, out, _) in enumerate(events)
            if kind == "request" and "text-head-maps" in out
        ]
        assert len(maps) == 1 and maps[0] > heatmaps_in, events
        polls = sum(1 for kind, out, _ in events if kind == "request" and "text-job.data" in out)
        assert polls == 1, polls  # a stored result is read once: no interval polls it
        # plotly.js is asked for once, by the page's own HTML at navigation (app.index_string), not
        # a second time by dcc.Graph once a graph mounts: window.Plotly was defined by then, or a
        # promise of it (the file still on its way)
        plotly = [u for u in urls if u.endswith(PLOTLY_JS)]
        assert len(plotly) == 1 and f'src="/{PLOTLY_JS}"' in page.content(), urls
        scripts = "document.querySelectorAll('script[src$=\"plotly.min.js\"]').length"
        assert (
            page.evaluate(scripts) == 1
            and page.evaluate("typeof window.Plotly.newPlot") == "function"
        )
        # the gallery's first row came as a picture before plotly.js (pages/text/preview.py): one
        # circle per token per head of the first row's layers, gone once the gallery is drawn
        sec = gallery_section(
            httpx.get(f"{server}/api/analyses/{job['id']}", timeout=30).json()["result"]
        )
        assert sec is not None
        row = min(len(sec["layers"]), per_row(len(sec["heads"])))
        assert len(previews) == 1 and previews[0].count("<circle ") == row * len(
            sec["heads"]
        ) * len(sec["kept"])
        assert page.evaluate("document.getElementById('stored-preview')") is None
        assert not w.problems, w.problems
    finally:
        w.close()
