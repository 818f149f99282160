"""A poll with nothing new costs the page nothing (issue 34): a real headless Chromium on the text
explorer of a job held running by hand in the service's Redis (as tests/test_frontend_polling.py
does: no worker runs it, so nothing new arrives until the test says so).

Measured first (tests/bench/bench_poll.py): each idle poll made the page's server answer the progress
bar's style and class and the status line again (unchanged), and Dash marked those elements as loading while the
poll was in flight (``data-dash-is-loading`` set and removed) and put its in-flight mark
(``_dash-loading-callback``) into the layout: two style recalculations and two layouts of the whole
page per poll, four polls a second. Now every such answer changes no output (every one
``no_update``), the page's DOM is not touched, and Chromium lays nothing out; a real change still shows.
"""

from __future__ import annotations

import json
import time

import pytest
from held_jobs import finish_running_job, remove_running_job, start_running_job
from redis import Redis
from rq.job import Job
from test_browser import WAIT_MS, Watch, browser  # noqa: F401 - fixture

from workers.queue import keys as protocol

pytestmark = [pytest.mark.browser, pytest.mark.slow]

POLLS = 8
TOKENS = ["[CLS]", "a", "held", "job", "[SEP]"]
SECTIONS = {
    "tokens": TOKENS,
    "n_tokens": len(TOKENS),
    "n_layers": 6,
    "n_heads": 12,
    "max-attention": {"max_attention": [[[0.2] * len(TOKENS)] * 12] * 6},
}
# every change of the page's DOM but Dash's in-flight mark (a div added and removed with each request)
WATCH_JS = """() => {
  window.__changes = [];
  const mark = (n) => n.nodeType === 1 && n.classList.contains('_dash-loading-callback');
  new MutationObserver((records) => { for (const m of records) {
    if (m.type === 'childList' && [...m.addedNodes, ...m.removedNodes].every(mark)) continue;
    const t = m.target.nodeType === 1 ? m.target : m.target.parentElement;
    window.__changes.push(`${m.type} ${m.attributeName || ''} on ${(t && t.closest('[id]') || {}).id}`);
  } }).observe(document.documentElement, {subtree: true, childList: true, attributes: true, characterData: true});
}"""
MARK_DISPLAY_JS = """() => {
  const d = document.createElement('div'); d.className = '_dash-loading-callback';
  document.getElementById('react-entry-point').appendChild(d);
  const shown = getComputedStyle(d).display; d.remove(); return shown;
}"""


def start_held_job(redis: Redis) -> str:
    request = {
        "model": "minilm",
        "text": "a held job",
        "analyses": ["max-attention", "head-tsne", "hidden-tsne"],
        "options": {"all_heads": True, "layer": 0, "head": 0, "hidden_layer": "all"},
    }
    return start_running_job(redis, request, sections=SECTIONS)


def wait_answers(page, answers: list, n: int) -> None:
    """Until ``answers`` holds ``n`` (the page polls on its own; the deadline is a hang guard)."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while len(answers) < n:
        assert time.monotonic() < deadline, f"{len(answers)} of {n} poll answers"
        page.wait_for_timeout(100)


def test_an_idle_poll_changes_nothing_and_a_change_still_shows(service, browser, tmp_path):
    redis = Redis.from_url(service.info()["redis_url"])
    job_id = start_held_job(redis)
    w = Watch(browser, service.url, tmp_path)
    page = w.page
    polls: list = []  # the outputs each poll's answer changes
    # every other callback of the page's server; of them, the gallery's answers and the head maps',
    # which the page asks for once each gallery answer is painted (assets/gallery.js: up to 3 s on)
    others = {"asked": 0, "answered": 0, "gallery": 0, "maps": 0}

    def is_poll(request) -> bool:  # the poll's callback (register_poll)
        return (
            json.loads(request.post_data or "{}").get("output", "").startswith("..text-job.data...")
        )

    def asked(request) -> None:
        if "_dash-update-component" in request.url and not is_poll(request):
            others["asked"] += 1

    def answered(response) -> None:
        if "_dash-update-component" not in response.url:
            return
        if not is_poll(response.request):
            others["answered"] += 1
            output = json.loads(response.request.post_data or "{}").get("output", "")
            for name, key in (("head-gallery.figure", "gallery"), ("text-head-maps.data", "maps")):
                others[key] += name in output
            polls.clear()  # counted from the last other answer on
            return
        body = (
            json.loads(response.body()) if response.status == 200 else {}
        )  # 204: nothing to update
        polls.append(sorted(body.get("response") or {}))

    try:
        cdp = page.context.new_cdp_session(page)
        cdp.send("Performance.enable")
        layouts = lambda: next(  # noqa: E731
            m["value"]
            for m in cdp.send("Performance.getMetrics")["metrics"]
            if m["name"] == "LayoutCount"
        )
        page.on("request", asked)
        page.on("response", answered)
        page.goto(f"{service.url}/?analysis={job_id}")
        page.wait_for_function(
            "document.querySelector('#text-status')?.textContent?.includes('held by the test')",
            timeout=WAIT_MS,
        )
        page.wait_for_function(
            "document.querySelector('#max-attention-graph .js-plotly-plot')?.data?.length > 0",
            timeout=WAIT_MS,
        )
        assert page.evaluate("document.querySelector('#text-progress-bar').style.width") == "20%"
        deadline = time.monotonic() + WAIT_MS / 1000
        while (
            others["asked"] > others["answered"]
            or others["maps"] < others["gallery"]
            or len(polls) < 4
        ):  # the page's first drawings are over, the head maps each gallery answer asks for too
            assert time.monotonic() < deadline, (others, polls)
            page.wait_for_timeout(100)

        # and Plotly has drawn and sized every graph (dcc.Graph marks one dash-graph--pending while it
        # plots or resizes: a first drawing still ending during the polls was counted, in one CI run)
        settled = "document.querySelectorAll('.dash-graph--pending').length === 0"
        page.wait_for_function(settled, timeout=WAIT_MS)
        wait_answers(
            page, polls, len(polls) + 2
        )  # a graph drawn late resizes the others: once more
        page.wait_for_function(settled, timeout=WAIT_MS)
        page.evaluate(WATCH_JS)
        before, polls[:], asked_before = layouts(), [], others["asked"]
        wait_answers(page, polls, POLLS)
        changes, laid_out = page.evaluate("window.__changes"), layouts() - before
        assert others["asked"] == asked_before, "a poll with nothing new ran another callback"
        assert polls == [[]] * len(polls), polls  # every output no_update
        assert changes == [], changes[:20]
        assert laid_out == 0, f"{laid_out} layouts in {len(polls)} polls with nothing new"
        assert page.evaluate(MARK_DISPLAY_JS) == "none"  # Dash's in-flight mark lays nothing out

        # a change still reaches the page, once
        job = Job.fetch(job_id, connection=redis, serializer=protocol.SERIALIZER)
        job.meta.update(progress=0.6, message="moved on")
        job.save_meta()
        page.wait_for_function(
            "document.querySelector('#text-status').textContent.includes('moved on')",
            timeout=WAIT_MS,
        )
        assert page.inner_text("#text-status") == "running — moved on (60%)"
        assert page.evaluate("document.querySelector('#text-progress-bar').style.width") == "60%"
        assert [p for p in polls if p] == [["text-poll-view"]], polls  # the view, once

        finish_running_job(redis, job_id, {**SECTIONS, "timings": {}})
        page.wait_for_function(
            "document.querySelector('#text-status').textContent === 'done'", timeout=WAIT_MS
        )
        assert page.get_attribute("#text-progress-bar", "class") == "progress-bar done"
        assert page.evaluate("document.querySelector('#text-progress-bar').style.width") == "100%"
        assert w.problems == [], w.problems
    finally:
        page.remove_listener("request", asked)
        page.remove_listener("response", answered)
        w.close()
        remove_running_job(redis, job_id)
