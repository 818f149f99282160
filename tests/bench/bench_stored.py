"""Benchmark: a stored result reopened from its link against the same page computed fresh.

Run from the repository root::

    PYTHONPATH=. .venv/bin/python -m tests.bench.bench_stored [--model smollm2] [--tokens 452] [--repeats 2] [--cold]

A fresh ``headscope serve`` (bundled Redis, one worker with the model preloaded, ``bench_gallery``'s
``start_serve``) and a headless Chromium on the text explorer. Each repeat, in one run: Analyze on a
fresh text of n tokens (``bench_gallery.readme_text``; 452 SmolLM2 tokens are the README's first
1,500 characters), timed from the click; then the page's link (``/?analysis=ID``) and a share link
of it (``/?share=ID``), each opened in a new browser context (no cache, nothing in the page), timed
from the navigation's start. Marks, taken in the browser: the stored first row's static picture
visible (``preview``, frontend/pages/text/preview.py; a reopened page only, and not when the gallery
was drawn first), the first gallery row drawn by plotly (``first``), the complete
gallery, and the page done (the heatmaps and the complete gallery drawn, the status line says the
result is there). Printed: each mark's seconds for the fresh computation and for each
reopening, their ratio, the number of Dash callbacks the reopened page made and the megabytes they
brought. With ``--cold``, after the repeats: the serve is stopped and a new one started on the same
data directory, whose page server has never held the results, and each repeat's analysis link is
opened in a new browser there; then the same again (another new serve, a new browser) for the share
links, so that a share's analysis is not held either. Each cold reopening is printed beside the same
link's warm one (the serve that computed it) and the fresh computation. The machine's load is printed with them (``os.getloadavg``): on a shared machine the
figures are noisy; compare within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.bench.bench_gallery import ARGS, CHROMIUM, readme_text
from tests.bench.bench_service import start_serve

# marks from the navigation's start (performance.now()), taken at every animation frame
MARKS_JS = """(() => {
  window.__marks = {};
  const plot = (id) => document.querySelector('#' + id + ' .js-plotly-plot');
  const tick = () => {
    const m = window.__marks, now = performance.now();
    const start = m.click || 0;
    const g = plot('head-gallery'), h = plot('max-attention-graph');
    const meta = g && g.layout && g.layout.meta && g.layout.meta.gallery;
    if (meta && meta.panels && meta.panels.length && m.first === undefined && (m.click || !m.armed)) m.first = now - start;
    if (meta && meta.complete && m.gallery === undefined && (m.click || !m.armed)) m.gallery = now - start;
    if (h && h.data && h.data.length && m.heatmaps === undefined && (m.click || !m.armed)) m.heatmaps = now - start;
    const pv = document.querySelector('#stored-preview:not([hidden]) svg circle');
    if (pv && m.preview === undefined && !m.armed) m.preview = now - start;
    if (window.Plotly && window.Plotly.newPlot && m.plotly === undefined && (m.click || !m.armed)) m.plotly = now - start;
    const s = document.querySelector('#text-status');
    const t = s ? s.textContent : '';
    if ((t === 'done' || t.startsWith('shared result')) && m.status === undefined && (m.click || !m.armed)) m.status = now - start;
    window.requestAnimationFrame(tick);
  };
  window.requestAnimationFrame(tick);
  window.addEventListener('click', (e) => {
    if (e.target.closest('#analyze-button')) { window.__marks = {click: performance.now(), armed: true}; }
  }, true);
})();"""
MARKS = ("first", "gallery", "heatmaps", "status")
DONE_JS = "['first', 'gallery', 'heatmaps', 'status'].every((k) => window.__marks[k] !== undefined)"


def _marks(page) -> dict[str, float]:
    page.wait_for_function(DONE_JS, polling=100, timeout=300_000)
    m = page.evaluate("window.__marks")
    out = {k: m[k] / 1000 for k in MARKS}
    out["page"] = max(out.values())
    out["plotly"] = m["plotly"] / 1000 if m.get("plotly") is not None else None
    # the static first row (frontend/pages/text/preview.py), never counted as the gallery's first row
    out["preview"] = m["preview"] / 1000 if m.get("preview") is not None else None
    return out


def fresh(browser, url: str, text: str, model: str) -> tuple[dict[str, float], str]:
    """Analyze ``text`` on a new page; (marks from the click, the analysis id)."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = ctx.new_page()
    page.add_init_script(MARKS_JS)
    page.goto(f"{url}/?model={model}")
    page.wait_for_selector("#head-gallery .js-plotly-plot")
    page.fill("#text-input", text)
    page.evaluate("window.__marks.armed = true")
    page.click("#analyze-button")
    marks = _marks(page)
    page.wait_for_function("location.search.includes('analysis=')", timeout=60_000)
    analysis = page.url.split("analysis=")[1].split("&")[0]
    ctx.close()
    return marks, analysis


def reopen(browser, link: str) -> dict[str, float]:
    """``link`` in a new browser context: marks from the navigation's start, callbacks and bytes."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = ctx.new_page()
    page.add_init_script(MARKS_JS)
    answers = []
    page.on(
        "response",
        lambda r: answers.append(r) if "_dash-update-component" in r.url else None,
    )
    page.goto(link)
    marks = _marks(page)
    origin = page.evaluate("performance.timeOrigin")
    sizes, calls = [], []
    for r in answers:
        try:
            size = len(r.body())
        except Exception:  # an answer the page no longer holds
            continue
        sizes.append(size)
        t = r.request.timing  # ms: startTime since the epoch, the others since startTime
        what = json.loads(r.request.post_data or "{}").get("output", "").strip(".")[:60]
        calls.append(((t["startTime"] - origin) / 1000, t["responseEnd"] / 1000, size, what))
    ctx.close()
    return {**marks, "callbacks": len(answers), "mb": sum(sizes) / 2**20, "calls": calls}


def print_timeline(got: dict) -> None:
    rows = [(got[k], f"browser: {k}") for k in MARKS]
    if got.get("plotly") is not None:  # plotly.js loaded (dcc.Graph loads it once a graph mounts)
        rows.append((got["plotly"], "browser: plotly.js loaded"))
    if got.get("preview") is not None:
        rows.append((got["preview"], "browser: preview (the static first row) visible"))
    rows += [
        (t, f"callback {what}: {took:.2f} s, {size / 1024:.0f} KiB")
        for t, took, size, what in got["calls"]
    ]
    for t, what in sorted(rows):
        print(f"  {t:7.2f} s  {what}")


def _s(seconds: float | None) -> str:
    return "not shown" if seconds is None else f"{seconds:.2f} s"


def _line(name: str, new: dict, got: dict, load: float) -> str:
    return (
        f"fresh first row {new['first']:.2f} s, page done {new['page']:.2f} s | {name}: preview "
        f"{_s(got['preview'])}, first row {got['first']:.2f} s, page done {got['page']:.2f} s "
        f"(ratio to fresh {got['first'] / new['first']:.2f}, {got['page'] / new['page']:.2f}); "
        f"{got['callbacks']} callbacks, {got['mb']:.1f} MB; load {load:.2f}"
    )


def cold(data: Path, links: list[tuple[str, str]], model: str, timeline: bool) -> dict[str, list]:
    """Each ``(analysis id, share path)`` reopened on new serves of ``data``: one for the analysis
    links, another for the share links; each link in a new browser (its own context)."""
    from playwright.sync_api import sync_playwright

    from backend.serve import stop

    got: dict[str, list] = {"analysis link": [], "share link": []}
    for name in got:
        proc, url = start_serve(data, workers=1, model=model, threads=None)  # holds no result
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                for analysis, share in links:
                    link = (
                        f"{url}/?analysis={analysis}"
                        if name == "analysis link"
                        else f"{url}{share}"
                    )
                    got[name].append(reopen(browser, link))
                    if timeline:
                        print(f"cold {name} {len(got[name])}:", flush=True)
                        print_timeline(got[name][-1])
                browser.close()
        finally:
            stop(proc, grace_s=20)
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--tokens", type=int, default=452)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--timeline", action="store_true", help="print each reopened page's callbacks")
    ap.add_argument(
        "--cold", action="store_true", help="also reopen each link on a new serve (holds nothing)"
    )
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    from backend.serve import stop
    from workers.models import load_model

    loaded = load_model(args.model, device="cpu")
    print(f"load average before: {os.getloadavg()}; {os.cpu_count()} CPUs", flush=True)
    rows, links = [], []
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_serve(Path(tmp), workers=1, model=args.model, threads=None)
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                fresh(browser, url, readme_text(loaded, 16, seed=999), args.model)  # warm-up
                for r in range(args.repeats):
                    text = readme_text(loaded, args.tokens, seed=100 * args.tokens + r)
                    new, analysis = fresh(browser, url, text, args.model)
                    time.sleep(1.0)  # the fresh page's last answers out of the way
                    link = reopen(browser, f"{url}/?analysis={analysis}")
                    share = httpx.post(
                        f"{url}/api/shares", json={"analysis_id": analysis, "view": {}}, timeout=30
                    ).json()
                    shared = reopen(browser, f"{url}{share['url']}")
                    load = os.getloadavg()
                    rows.append((new, link, shared))
                    links.append((analysis, share["url"]))
                    for name, got in (("analysis link", link), ("share link", shared)):
                        print(
                            f"repeat {r + 1}, n = {args.tokens}: " + _line(name, new, got, load[0]),
                            flush=True,
                        )
                        if args.timeline:
                            print_timeline(got)
                browser.close()
        finally:
            stop(proc, grace_s=20)
        if args.cold:
            time.sleep(2.0)  # the stopped serve's ports and processes gone
            colds = cold(Path(tmp), links, args.model, args.timeline)
            load = os.getloadavg()
            for r, row in enumerate(rows):
                for i, name in ((1, "analysis link"), (2, "share link")):
                    got = colds[name][r]
                    print(
                        f"repeat {r + 1}, cold {name} (warm: preview {_s(row[i]['preview'])}, first row "
                        f"{row[i]['first']:.2f} s, page done {row[i]['page']:.2f} s) | "
                        + _line(f"cold {name}", row[0], got, load[0]),
                        flush=True,
                    )
            rows = [
                (*row, colds["analysis link"][r], colds["share link"][r])
                for r, row in enumerate(rows)
            ]
    med = lambda i, k: statistics.median(row[i][k] for row in rows)  # noqa: E731

    def pmed(i: int) -> str:
        got = [row[i]["preview"] for row in rows if row[i]["preview"] is not None]
        return _s(statistics.median(got) if got else None) + f" ({len(got)} of {len(rows)} shown)"

    def link(i: int, name: str) -> str:
        return f"{name} preview {pmed(i)}, first row {med(i, 'first'):.2f} s, page done {med(i, 'page'):.2f} s"

    names = ["analysis link", "share link"] + (
        ["cold analysis link", "cold share link"] if args.cold else []
    )
    print(
        f"median of {len(rows)}: fresh first row {med(0, 'first'):.2f} s, page done {med(0, 'page'):.2f} s; "
        + "; ".join(link(i, name) for i, name in enumerate(names, start=1))
        + f"; load after {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
