"""What the text explorer costs its browser while a job computes (issue 34): real headless Chromium on a
job held running by hand in the service's Redis (tests/held_jobs.py: nothing new arrives until the test
writes it).

Profiled first (tests/bench/profile_browser.py, SmolLM2 at 452 tokens): most of the renderer's CPU went
into frames nobody asked for. The progress bar's width was a CSS transition (0.3 s, not compositable):
each progress change made Chromium draw ~18 frames, and each frame re-layerized the whole page of large
figures (~4 ms of the main thread, plus compositor and GPU-process work): ~770 frames in a 20 s run.
With no head selected (a fresh Analyze), each layer's head maps redrew the large map's empty figure.
"""

from __future__ import annotations

import pytest
from held_jobs import remove_running_job, start_running_job
from redis import Redis
from rq.job import Job
from test_browser import WAIT_MS, Watch, browser  # noqa: F401 - fixture
from test_gallery_layers import (  # noqa: F401
    GALLERY_JS,
    HEAD_MAP_JS,
    HEADS,
    LAYERS,
    WATCH_MAPS_JS,
    HeldJob,
    deep_llama,
)

from workers.queue import keys as protocol

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TOKENS = ["[CLS]", "a", "held", "job", "[SEP]"]
SECTIONS = {
    "tokens": TOKENS,
    "n_tokens": len(TOKENS),
    "n_layers": 6,
    "n_heads": 12,
    "max-attention": {"max_attention": [[[0.2] * len(TOKENS)] * 12] * 6},
}
REQUEST = {
    "model": "minilm",
    "text": "a held job",
    "analyses": ["max-attention", "head-tsne", "hidden-tsne"],
    "options": {"all_heads": True, "layer": 0, "head": 0, "hidden_layer": "all"},
}
# the animations running on the page each time the progress bar's style changes (counted in the same turn:
# getAnimations() brings style up to date, so a transition the change starts is among them)
WATCH_BAR_JS = """() => {
  window.__animations = [];
  const bar = document.querySelector('#text-progress-bar');
  new MutationObserver(() => {
    window.__animations.push(document.getAnimations().map((a) => a.constructor.name + ' ' + (a.transitionProperty || a.animationName || '')));
  }).observe(bar, {attributes: true, attributeFilter: ['style', 'class']});
}"""


def set_progress(redis: Redis, job_id: str, progress: float, message: str) -> None:
    job = Job.fetch(job_id, connection=redis, serializer=protocol.SERIALIZER)
    job.meta.update(progress=progress, message=message)
    job.save_meta()


def test_a_progress_change_runs_no_animation(service, browser, tmp_path):
    """The bar jumps to the new width: no transition, so a change is one frame, not ~18 of the whole page."""
    redis = Redis.from_url(service.info()["redis_url"])
    job_id = start_running_job(redis, REQUEST, sections=SECTIONS)
    w = Watch(browser, service.url, tmp_path)
    page = w.page
    try:
        page.goto(f"{service.url}/?analysis={job_id}")
        page.wait_for_function(
            "document.querySelector('#text-status')?.textContent?.includes('held by the test')",
            timeout=WAIT_MS,
        )
        page.evaluate(WATCH_BAR_JS)
        set_progress(redis, job_id, 0.6, "moved on")
        page.wait_for_function(
            "document.querySelector('#text-progress-bar').style.width === '60%'", timeout=WAIT_MS
        )
        seen = page.evaluate("window.__animations")
        assert seen, "the bar's style change was not observed"
        assert all(a == [] for a in seen), seen
        assert page.inner_text("#text-status") == "running — moved on (60%)"
        assert w.problems == [], w.problems
    finally:
        w.close()
        remove_running_job(redis, job_id)


def test_new_head_maps_leave_the_empty_large_map_alone(service, deep_llama, browser, tmp_path):
    """A fresh Analyze selects no head: the large map says how to open one. Each layer's maps (store
    text-head-maps) used to redraw that same empty figure (heads.js drawHeadOnMaps); now it is left."""
    held = HeldJob(service, deep_llama)
    w = Watch(browser, service.url, tmp_path)
    page = w.page
    try:
        page.goto(f"{service.url}/text")
        page.wait_for_selector("#head-tsne-graph .js-plotly-plot")
        source = {"kind": "analysis", "id": held.id, "request": held.req.normalised()}
        page.evaluate(
            "(s) => window.dash_clientside.set_props('text-source', {data: s})", source
        )  # as Analyze does
        page.wait_for_function(
            f"(({GALLERY_JS})?.panels || []).length === {HEADS}", timeout=WAIT_MS
        )
        empty = f"{HEAD_MAP_JS}.layout.annotations[0].text"
        assert page.evaluate(empty).startswith("Click a panel of the gallery")
        page.evaluate(WATCH_MAPS_JS)
        held.release(0)
        page.wait_for_function(
            f"(({GALLERY_JS})?.panels || []).length === {2 * HEADS}", timeout=WAIT_MS
        )
        page.wait_for_function(
            "window.__onMaps.some((c) => c.heads.includes('1,0'))", timeout=WAIT_MS
        )
        calls = page.evaluate("window.__onMaps")
        assert calls and all(c["left"] for c in calls), calls  # new maps, still no head: no redraw
        assert page.evaluate(f"{HEAD_MAP_JS}.data === window.__headData")
        assert page.evaluate(empty).startswith("Click a panel of the gallery")
        assert w.problems == [], w.problems
    finally:
        w.close()
        held.close()


# every Plotly.react of the page's graphs (dcc.Graph draws each new figure with it), counted by graph
REACTS_JS = """() => {
  window.__reacts = {};
  const P = window.Plotly, react = P.react;
  P.react = function (gd) {
    const id = (gd.closest('[id]') || {}).id;
    window.__reacts[id] = (window.__reacts[id] || 0) + 1;
    return react.apply(this, arguments);
  };
}"""
DRAWN_JS = "(document.querySelector('#{} .js-plotly-plot')?.data || []).length > 0"


def test_the_head_views_are_redrawn_only_when_what_they_show_changes(
    service,
    deep_llama,
    browser,
    tmp_path,
):
    """With a head open, the rest of the job (the gallery's layers, the whole gallery, the hidden states,
    the end) used to re-send and redraw the matrix, the hidden-state map, the lines and the model view
    with every section. Now the matrix and the lines are drawn once, the hidden-state map again only when
    the hidden states arrive, the model view only when the gallery is complete."""
    held = HeldJob(service, deep_llama)
    w = Watch(browser, service.url, tmp_path)
    page = w.page
    try:
        page.goto(
            f"{service.url}/?analysis={held.id}&layer=1&head=2"
        )  # the job's own selected head
        page.wait_for_function(
            f"(({GALLERY_JS})?.panels || []).length === {HEADS}", timeout=WAIT_MS
        )
        for graph in ("attention-matrix-graph", "head-view-graph"):
            page.wait_for_function(DRAWN_JS.format(graph), timeout=WAIT_MS)
        page.wait_for_function(
            "document.querySelectorAll('.dash-graph--pending').length === 0", timeout=WAIT_MS
        )
        matrix = page.evaluate(
            "document.querySelector('#attention-matrix-graph .js-plotly-plot').data[0].z"
        )
        page.evaluate(REACTS_JS)
        for layer in range(LAYERS):
            held.release(layer)
        held.finish()  # its last progress message: "done" (no worker marks the held job finished)
        page.wait_for_function(
            "document.querySelector('#text-status').textContent.includes('done')", timeout=WAIT_MS
        )
        page.wait_for_function(f"({GALLERY_JS})?.complete === true", timeout=WAIT_MS)
        page.wait_for_function(DRAWN_JS.format("hidden-tsne-graph"), timeout=WAIT_MS)
        page.wait_for_function(
            "document.querySelectorAll('.dash-graph--pending').length === 0", timeout=WAIT_MS
        )
        reacts = page.evaluate("window.__reacts")
        assert (
            reacts.get("attention-matrix-graph", 0) == 0 and reacts.get("head-view-graph", 0) == 0
        ), reacts
        assert reacts.get("hidden-tsne-graph") == 1, reacts  # the hidden states arrived
        assert reacts.get("model-view-graph") == 1, reacts  # every head's attention arrived
        assert (
            page.evaluate(
                "document.querySelector('#attention-matrix-graph .js-plotly-plot').data[0].z"
            )
            == matrix
        )
        assert "KL standard t-SNE of X[2]" in page.inner_text(
            "#text-kl"
        )  # the hidden state's KL joined the line
        assert w.problems == [], w.problems
    finally:
        w.close()
        held.close()


# each request for the head maps, with how many animation frames had begun with gallery panels
# drawn when it went out (a frame that begins with them paints them)
WATCH_MAPS_ASKED_JS = """(() => {
  window.__mapsAsked = [];
  let frames = 0;
  const tick = () => {
    const gd = document.querySelector('#head-gallery .js-plotly-plot');
    const g = gd && gd.layout && gd.layout.meta && gd.layout.meta.gallery;
    if (g && g.panels && g.panels.length) frames += 1;
    window.requestAnimationFrame(tick);
  };
  window.requestAnimationFrame(tick);
  const send = window.fetch;
  window.fetch = function (input, init) {
    const body = init && init.body;
    if (typeof body === 'string' && body.includes('text-head-maps.data')) window.__mapsAsked.push(frames);
    return send.apply(this, arguments);
  };
})();"""


def test_a_reopened_result_asks_for_the_head_maps_once_its_gallery_is_drawn(
    service, deep_llama, browser, tmp_path
):
    """The head maps (megabytes for a stored result) used to be asked for as soon as the gallery's
    answer was applied, before it was painted: the server built them and the browser received them
    while it drew the gallery, and the first row waited. Now they are asked for once its panels are
    painted (assets/gallery.js)."""
    held = HeldJob(service, deep_llama)
    for layer in range(LAYERS):
        held.release(layer)
    held.finish()
    w = Watch(browser, service.url, tmp_path)
    page = w.page
    try:
        page.add_init_script(WATCH_MAPS_ASKED_JS)
        page.goto(f"{service.url}/?analysis={held.id}")
        page.wait_for_function(f"({GALLERY_JS})?.complete === true", timeout=WAIT_MS)
        page.wait_for_function("window.__mapsAsked.length > 0", timeout=WAIT_MS)
        asked = page.evaluate("window.__mapsAsked")
        assert all(frames > 0 for frames in asked), asked  # the rows painted first
        page.wait_for_function(
            "document.querySelectorAll('.dash-graph--pending').length === 0", timeout=WAIT_MS
        )
        assert w.problems == [], w.problems
    finally:
        w.close()
        held.close()
