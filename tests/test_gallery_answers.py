"""The gallery when layers arrive faster than the page's server answers (issue 34): no answer dropped,
each carrying only what is new, and the gallery always completes.

Dash drops a callback's answer once a newer call of the same callback has started, and the gallery
callback patches from what the last applied answer left (``text-gallery-key``): when each answer
took longer than a layer, every answer was dropped and each next one carried every row since the
last one applied (12-57 MB sent per Analyze on SmolLM2), the gallery arriving only at the end.

Here that happens on purpose, on any machine: the held job (``test_gallery_layers.HeldJob``)
publishes a layer only when the test releases it, and the test holds every answer of the gallery
callback in a real Chromium (Playwright routes the page's ``_dash-update-component`` requests: the
answer is fetched from the real server when asked, handed to the page when the test says). Each
answer is held until the next layer has been published and the page has learnt of it (its poll
answered with it: the starvation's condition), and only then handed over.
"""

from __future__ import annotations

import json

import pytest
from test_browser import browser  # noqa: F401 - fixture
from test_gallery_layers import GALLERY_JS, HEADS, LAYERS, HeldJob, deep_llama  # noqa: F401 - fixture

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WAIT_MS = 120_000  # a guard against a hang, never a speed claim
GALLERY_OUTPUT = "head-gallery.figure"
POLL_OUTPUT = "text-job.data"
MAPS_OUTPUT = "text-head-maps.data"
PENDING_JS = "window.dash_clientside.headscope_gallery?.state().pending === true"


class Answers:
    """The page's callback requests through the test: the gallery's answers are held while ``hold``
    is set (fetched from the server at once, handed over by ``hand_over``); the poll's are recorded."""

    def __init__(self, page):
        self.page = page
        self.hold = False
        self.held: list[tuple[object, object]] = []
        self.gallery: list[
            dict
        ] = []  # every answer of the gallery callback: its body and when it was asked
        self.polled: list[dict] = []  # the poll's answers, as the page got them
        self.maps: list[bytes] = []  # the head maps' answers
        page.route(lambda url: "/_dash-update-component" in url, self._route)  # the URL has a query

    def _route(self, route) -> None:
        output = str((route.request.post_data_json or {}).get("output"))
        if MAPS_OUTPUT in output:  # the head maps, asked for after each gallery answer: recorded
            response = route.fetch()
            route.fulfill(response=response)
            self.maps.append(response.body())
            return
        if GALLERY_OUTPUT not in output and POLL_OUTPUT not in output:
            route.continue_()
            return
        response = route.fetch()
        body = response.body()
        assert response.status == 200, body[:500]
        if POLL_OUTPUT in output:
            route.fulfill(response=response)
            job = json.loads(body)["response"].get("text-job")  # absent: unchanged
            if job is not None:
                self.polled.append(job["data"])
            return
        self.gallery.append({"body": body, "held_before": len(self.held)})
        if self.hold:
            self.held.append((route, response))
        else:
            route.fulfill(response=response)

    def hand_over(self) -> None:
        held, self.held = self.held, []
        for route, response in held:
            route.fulfill(response=response)

    def wait(self, condition, what: str) -> None:
        """Let the page run (routes are served meanwhile) until ``condition()``."""
        for _ in range(WAIT_MS // 20):
            if condition():
                return
            self.page.wait_for_timeout(20)
        raise AssertionError(
            f"{what}: not within {WAIT_MS / 1000:.0f} s; gallery answers {len(self.gallery)}, "
            f"held {len(self.held)}, last poll {self.polled[-1:]}"
        )

    def learnt(self, section: str) -> bool:
        """Whether the page's poll has answered with ``section`` (``name``, or ``name:layers done``)."""
        return any(section in job.get("sections", []) for jobs in self.polled for job in jobs or [])


def carried(body: bytes) -> tuple[list[int], list[str], int]:
    """(layers whose row picture an answer carries, head maps it carries, bytes of pictures and maps)."""
    response = json.loads(body)["response"]
    fig = (response.get("head-gallery") or {}).get("figure") or {}
    maps = (response.get("text-head-maps") or {}).get("data") or {}
    if "operations" in fig:  # a partial update (dash.Patch)
        images = [
            op["params"]["value"]
            for op in fig["operations"]
            if op["location"][:2] == ["layout", "images"]
        ]
    else:
        images = (fig.get("layout") or {}).get("images") or []
    rows = [int(im["name"].split()[-1]) for im in images if im.get("source")]
    if "operations" in maps:
        entries = {
            op["location"][1]: op["params"]["value"]
            for op in maps["operations"]
            if op["location"][0] == "maps"
        }
    else:
        entries = maps.get("maps") or {}
    size = sum(len(im["source"]) for im in images if im.get("source")) + len(json.dumps(entries))
    return rows, sorted(entries), size


def test_layers_faster_than_the_answers_each_row_travels_once_and_the_gallery_completes(
    service,
    deep_llama,
    browser,
    tmp_path,
):
    """Every answer of the gallery is held until the next layer is published and the page's poll has
    it. No newer call starts while an answer travels (none is dropped), each answer carries the rows
    of the layers new since the one before it (each row once in all; the head maps follow in answers
    of their own, every head's among them), the page
    shows every layer it was answered with while the job still runs, and the gallery completes."""
    from test_browser import Watch

    held = HeldJob(service, deep_llama)
    w = Watch(browser, service.url, tmp_path)
    page = w.page
    answers = Answers(page)
    try:
        page.goto(f"{service.url}/?analysis={held.id}&layer=1&head=2")
        page.wait_for_function(
            f"(({GALLERY_JS})?.panels || []).length === {HEADS}", timeout=WAIT_MS
        )
        answers.hold = True
        first = len(answers.gallery)
        held.release(0)  # layer 1 is published: the page asks for it, the answer is held
        answers.wait(lambda: len(answers.held) == 1, "an answer with layer 1 asked for")
        for layer in range(1, LAYERS):
            asked = len(answers.gallery)
            held.release(
                layer
            )  # the next layer (after the last: the rest of the job) while the answer travels
            section = f"head-tsne-all:{layer + 2}" if layer + 1 < LAYERS else "hidden-tsne"
            answers.wait(
                lambda section=section: answers.learnt(section), f"the page's poll with {section}"
            )
            # the page has taken the poll's answer in: it holds the change back (assets/gallery.js),
            # or (as before the gate) it started a newer call, which makes Dash drop the held answer
            answers.wait(
                lambda asked=asked: len(answers.gallery) > asked or page.evaluate(PENDING_JS),
                "the page took the poll in",
            )
            assert len(answers.gallery) == asked and len(answers.held) == 1, (
                "a newer call started while an answer travelled: Dash drops that answer"
            )
            answers.hand_over()
            drawn = layer + 1  # rows 0..layer: what the answers handed over so far carry
            page.wait_for_function(
                f"(({GALLERY_JS})?.panels || []).length === {drawn * HEADS}", timeout=WAIT_MS
            )
            answers.wait(
                lambda: len(answers.held) == 1,
                "the follow-up asked for once the answer was applied",
            )
        answers.hold = False
        answers.hand_over()
        held.finish()
        page.wait_for_function(f"({GALLERY_JS})?.complete === true", timeout=WAIT_MS)
        page.wait_for_function(
            "document.querySelector('#text-status').textContent.includes('done')", timeout=WAIT_MS
        )
        meta = page.evaluate(GALLERY_JS)
        assert meta["panels"] == [[la, h] for la in range(LAYERS) for h in range(HEADS)], meta
        assert all(
            a["held_before"] == 0 for a in answers.gallery[first:]
        )  # one call at a time, none dropped
        later = [carried(a["body"]) for a in answers.gallery[first:]]
        rows = [r for rs, _, _ in later for r in rs]
        # the maps travel apart, after each gallery answer (the rows paint first): every head's
        maps = sorted({m for body in answers.maps for m in carried(body)[1] if m[0] != "0"})
        assert sorted(rows) == list(range(1, LAYERS)), rows  # each new row once, none sent again
        assert sorted(maps) == sorted(
            f"{la},{h}" for la in range(1, LAYERS) for h in range(HEADS)
        ), maps
        per_row = max(size for rs, _, size in later if rs)
        assert all(len(rs) <= 1 and size <= per_row for rs, _, size in later), [
            (rs, s) for rs, _, s in later
        ]
        assert not w.problems, w.problems
        w.shot("gallery-answers-complete")
    finally:
        # requests still in flight when the page closes reach the handler after it: their responses are
        # gone ("Response has been disposed"), which is not the test's business
        page.unroute_all(behavior="ignoreErrors")
        w.close()
        held.close()
