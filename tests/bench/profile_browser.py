"""Profile: where headless Chromium's CPU goes on the text explorer, from Analyze to done.

Run from the repository root::

    PYTHONPATH=. .venv/bin/python -m tests.bench.profile_browser [--model smollm2] [--tokens 452] [--trace out.json]

A fresh ``headscope serve`` and a headless Chromium as ``tests.bench.bench_gallery`` starts them (the same
flags: ``--disable-gpu``, SwiftShader). After a warm-up, one run as ``bench_gallery.one`` measures it (no
profiler attached): CPU seconds from Analyze to done per Chromium process type (browser, renderer,
GPU process, utility; ``/proc`` via ``bench_gallery.cpu_by_part``). Then one run of another text of the
same length under the profilers: the renderer's ``Performance.getMetrics`` (script, layout, style, task
durations), a JavaScript sampling profile (CDP ``Profiler``: self time by function and script), and
a Chromium trace (``devtools.timeline``, ``toplevel``: busy time per process and thread, and on the
renderer's main thread self time per event: function calls, layout, paint, ...). The profilers cost
time of their own: their run's CPU is not the measured one, only where it goes. Not a test.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
from pathlib import Path

from tests.bench import bench_gallery as BG

TYPES = (
    ("renderer", "--type=renderer"),
    ("gpu process", "--type=gpu-process"),
    ("utility", "--type=utility"),
    ("zygote", "--type=zygote"),
    ("browser process", "chromium"),
)
CATEGORIES = [
    "devtools.timeline",
    "disabled-by-default-devtools.timeline",
    "toplevel",
    "v8.execute",
    "blink",
    "cc",
    "gpu",
    "viz",
    "disabled-by-default-devtools.timeline.frame",
]


def cpu_split(run: dict) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in sorted(run["cpu"].items(), key=lambda kv: -kv[1]))


def profiled(
    browser, page, url: str, text: str, model: str, top: int, trace_out: Path | None
) -> None:
    page.goto(url + "/text")
    page.wait_for_selector("#head-gallery .js-plotly-plot")
    if model != "minilm":
        page.click("#text-model")
        page.get_by_role("option", name=f"{model} — ").first.click()
    page.evaluate(BG.RECORD_JS)
    page.fill("#text-input", text)
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable")
    cdp.send("Profiler.enable")
    cdp.send("Profiler.setSamplingInterval", {"interval": 500})
    before = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    browser.start_tracing(page=None, categories=CATEGORIES)
    cdp.send("Profiler.start")
    page.click("#analyze-button")
    page.wait_for_function(
        "window.__bench.gallery !== undefined && window.__bench.done !== undefined",
        polling=200,
        timeout=600_000,
    )
    profile = cdp.send("Profiler.stop")["profile"]
    trace = json.loads(browser.stop_tracing())
    after = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    marks = page.evaluate("window.__bench")
    print(
        "  marks (s after Analyze): "
        + ", ".join(
            f"{k} {(v - marks['click']) / 1000:.2f}" for k, v in marks.items() if k != "click"
        )
    )
    print("  renderer Performance.getMetrics, change from Analyze to done:")
    for key in (
        "TaskDuration",
        "ScriptDuration",
        "LayoutDuration",
        "RecalcStyleDuration",
        "LayoutCount",
        "RecalcStyleCount",
        "JSHeapUsedSize",
        "Nodes",
    ):
        print(f"    {key}: {after.get(key, 0) - before.get(key, 0):.3f}")
    js_profile(profile, top)
    if trace_out:
        trace_out.write_text(json.dumps(trace))
        trace_out.with_suffix(".cpuprofile").write_text(json.dumps(profile))
    trace_summary(trace, top)


def js_profile(profile: dict, top: int) -> None:
    """Self time by function (and by script) of a CDP CPU profile."""
    nodes = {n["id"]: n for n in profile["nodes"]}
    deltas = profile["timeDeltas"]
    self_us: collections.Counter = collections.Counter()
    for sample, dt in zip(profile["samples"], deltas[1:] + [0], strict=False):
        self_us[sample] += dt
    parent = {c: n["id"] for n in profile["nodes"] for c in n.get("children", [])}
    by_fn: collections.Counter = collections.Counter()
    by_url: collections.Counter = collections.Counter()
    for nid, us in self_us.items():
        cf = nodes[nid]["callFrame"]
        script = cf["url"].rsplit("/", 1)[-1].split("?")[0] or "(native)"
        by_fn[f"{cf['functionName'] or '(anon)'} {script}:{cf['lineNumber']}"] += us
        up = nid  # native time (JSON.parse, getBoundingClientRect, ...) counts for the script that called it
        while up in parent and not nodes[up]["callFrame"]["url"]:
            up = parent[up]
        caller = (
            nodes[up]["callFrame"]["url"].rsplit("/", 1)[-1].split("?")[0] or cf["functionName"]
        )
        by_url[caller] += us
    total = sum(self_us.values())
    print(f"  JS sampling profile: {total / 1e6:.2f} s sampled; self time by script:")
    for name, us in by_url.most_common(top):
        print(f"    {us / 1e6:7.3f} s  {name}")
    print(
        "  self time by function:"
    )  # native functions' time also counts for their callers' script above
    for name, us in by_fn.most_common(top):
        print(f"    {us / 1e6:7.3f} s  {name}")


def trace_summary(trace: dict | list, top: int) -> None:
    """Busy time per process/thread (top-level tasks), and self time per event on the renderer's main thread."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    names: dict[tuple, str] = {}
    pnames: dict[int, str] = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
        if e.get("ph") == "M" and e.get("name") == "process_name":
            pnames[e["pid"]] = e["args"]["name"]
    busy: collections.Counter = collections.Counter()
    cpu: collections.Counter = collections.Counter()
    by_thread: dict[tuple, list] = collections.defaultdict(list)
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        key = (e["pid"], e["tid"])
        by_thread[key].append(e)
    for key, evs in by_thread.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        end = -1.0
        for e in evs:  # top level: not inside another event of the thread
            if e["ts"] >= end:
                busy[key] += e["dur"]
                cpu[key] += e.get("tdur", e["dur"])
                end = e["ts"] + e["dur"]
    print("  trace: busy (wall) / thread CPU seconds in top-level events, per process and thread:")
    for key, us in busy.most_common(top):
        print(
            f"    {us / 1e6:7.3f} / {cpu[key] / 1e6:7.3f} s  {pnames.get(key[0], key[0])} / {names.get(key, key[1])}"
        )
    main = [k for k in by_thread if names.get(k) == "CrRendererMain"]
    for key in main:
        self_t: collections.Counter = collections.Counter()
        stack: list = []
        for e in by_thread[key]:
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"]:
                stack.pop()
            if stack:
                self_t[label(stack[-1])] -= e["dur"]
            self_t[label(e)] += e["dur"]
            stack.append(e)
        frames = sum(e["name"] == "ProxyMain::BeginMainFrame" for e in by_thread[key])
        if not frames:
            continue  # another renderer (an extension's, DevTools')
        print(
            f"  renderer main thread {key}: {frames} frames (BeginMainFrame); self time per event (s)"
        )
        for name, us in self_t.most_common(top):
            print(f"    {us / 1e6:7.3f}  {name}")


def label(e: dict) -> str:
    data = (e.get("args") or {}).get("data") or {}
    if e["name"] == "FunctionCall" and data.get("functionName") is not None:
        return f"FunctionCall {data.get('functionName') or '(anon)'} {str(data.get('url', '')).rsplit('/', 1)[-1][:60]}"
    if e["name"] == "EventDispatch" and data.get("type"):
        return f"EventDispatch {data['type']}"
    if e["name"] == "TimerFire":
        return "TimerFire"
    return e["name"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(BG.MODELS), default="smollm2")
    ap.add_argument("--tokens", type=int, default=452)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--trace", type=Path, default=None, help="write the Chromium trace (JSON) here")
    ap.add_argument("--no-profile", action="store_true", help="only the measured run")
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    from backend.serve import stop
    from workers.models import load_model

    BG.PARTS = BG.PARTS[:3] + TYPES + BG.PARTS[4:]  # Chromium by process type
    loaded = load_model(args.model, device="cpu")
    make = (
        (lambda n, seed: BG.text_of(n, seed=seed))
        if args.model == "minilm"
        else (lambda n, seed: BG.readme_text(loaded, n, seed=seed))
    )
    print(f"load average before: {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = BG.start_serve(Path(tmp), workers=1, model=args.model, threads=None)
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=BG.CHROMIUM, args=BG.ARGS)
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                BG.one(page, url, make(16, 999), args.model)
                run = BG.one(page, url, make(args.tokens, 100 * args.tokens), args.model)
                print(
                    f"measured run (n = {args.tokens}): page done {run['page_s']:.2f} s, gallery {run['gallery_s']:.2f} s,"
                    f" sent {run['page_mb']:.1f} MB; CPU s from Analyze to done: {cpu_split(run)}; "
                    f"load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
                calls = collections.Counter(c[3] for c in run["calls"])
                size = collections.Counter()
                for c in run["calls"]:
                    size[c[3]] += c[2]
                print(
                    "  answers by callback (first output): "
                    + ", ".join(
                        f"{k} x{v} {size[k] / 2**20:.2f} MB" for k, v in calls.most_common()
                    )
                )
                if not args.no_profile:
                    print("profiled run (another text of the same length):", flush=True)
                    profiled(
                        browser,
                        page,
                        url,
                        make(args.tokens, 100 * args.tokens + 1),
                        args.model,
                        args.top,
                        args.trace,
                    )
                browser.close()
        finally:
            stop(proc, grace_s=20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
