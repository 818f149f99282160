"""What the text explorer costs its browser while a job computes (issue 34): real headless Chromium on a
job held running by hand in the service's Redis (tests/held_jobs.py: nothing new arrives until the test
writes it).

Profiled first (tests/bench/profile_browser.py, SmolLM2 at 452 tokens): most of the renderer's CPU went
into frames nobody asked for. The progress bar's width was a CSS transition (0.3 s, not compositable):
each progress change made Chromium draw ~18 frames, and each frame re-layerized the whole page of large
figures (~4 ms of the main thread, plus compositor and GPU-process work): ~770 frames in a 20 s run.
"""

from __future__ import annotations

import pytest
from held_jobs import remove_running_job, start_running_job
from redis import Redis
from rq.job import Job
from test_browser import WAIT_MS, Watch, browser  # noqa: F401 - fixture

from workers import protocol

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TOKENS = ["[CLS]", "a", "held", "job", "[SEP]"]
SECTIONS = {"tokens": TOKENS, "n_tokens": len(TOKENS), "n_layers": 6, "n_heads": 12,
            "max-attention": {"max_attention": [[[0.2] * len(TOKENS)] * 12] * 6}}
REQUEST = {"model": "minilm", "text": "a held job", "analyses": ["max-attention", "head-tsne", "hidden-tsne"],
           "options": {"all_heads": True, "layer": 0, "head": 0, "hidden_layer": "all"}}
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


def test_a_progress_change_runs_no_animation(service, browser, tmp_path):  # noqa: F811
    """The bar jumps to the new width: no transition, so a change is one frame, not ~18 of the whole page."""
    redis = Redis.from_url(service.info()["redis_url"])
    job_id = start_running_job(redis, REQUEST, sections=SECTIONS)
    w = Watch(browser, service.url, tmp_path)
    page = w.page
    try:
        page.goto(f"{service.url}/?analysis={job_id}")
        page.wait_for_function("document.querySelector('#text-status')?.textContent?.includes('held by the test')",
                               timeout=WAIT_MS)
        page.evaluate(WATCH_BAR_JS)
        set_progress(redis, job_id, 0.6, "moved on")
        page.wait_for_function("document.querySelector('#text-progress-bar').style.width === '60%'", timeout=WAIT_MS)
        seen = page.evaluate("window.__animations")
        assert seen, "the bar's style change was not observed"
        assert all(a == [] for a in seen), seen
        assert page.inner_text("#text-status") == "running — moved on (60%)"
        assert w.problems == [], w.problems
    finally:
        w.close()
        remove_running_job(redis, job_id)
