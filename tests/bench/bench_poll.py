"""Benchmark: what a poll with nothing new costs the browser and the page's server (issue 34).

Run from the repository root::

    PYTHONPATH=. .venv/bin/python -m tests.bench.bench_poll [--seconds 10] [--profile]

A fresh ``headscope serve`` (MiniLM preloaded, one worker) and a headless Chromium (the same flags as
``bench_gallery``) on the text explorer of a job made running by hand in the service's Redis (as
``tests/test_frontend_polling.py`` does): a SmolLM2-shaped job at 452 tokens whose heatmaps and first
10 gallery layers are there (``page_sections``), and then nothing new ever arrives, so every poll (``FAST_POLL_MS``) has nothing new to say. For ``--seconds`` the bench counts
the page server's answers (``_dash-update-component``) and the CPU seconds (Linux ``/proc``) of
Chromium's processes and of the web server, and reads Chromium's own counters (the DevTools
protocol's ``Performance.getMetrics``: main-thread task, script, style and layout time, style
recalculations and layouts). The reference, in the same run and the same page: the job then
finishes, the poll stops, and the same counts over the same seconds of the idle page. Printed: per
second of each, per poll, and the polling page's CPU as a multiple of the idle page's.
``--profile``: also the renderer's JavaScript functions by self time while polling (``Profiler``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from tests.bench.bench_gallery import ARGS, CHROMIUM, cpu_by_part
from tests.bench.bench_service import start_serve
from tests.held_jobs import finish_running_job, start_running_job

METRICS = (
    "TaskDuration",
    "ScriptDuration",
    "RecalcStyleDuration",
    "LayoutDuration",
    "RecalcStyleCount",
    "LayoutCount",
    "JSHeapUsedSize",
)
TEXT = "A held job: no worker runs it."


def page_sections(n: int, layers_done: int) -> dict:
    """A SmolLM2-shaped job (30 layers x 9 heads, ``n`` tokens) mid-way: its heatmaps and the gallery's
    first ``layers_done`` layers (random numbers of the real shapes, as ``workers.core.partials`` writes them)."""
    import numpy as np

    from workers.core.packing import encode_packed, quantise
    from workers.core.partials import part_fields, part_key

    rng = np.random.default_rng(0)
    n_layers, n_heads = 30, 9
    tokens = [f"w{i}" for i in range(n)]
    out = {
        "tokens": tokens,
        "n_tokens": n,
        "n_layers": n_layers,
        "n_heads": n_heads,
        "max-attention": {"max_attention": rng.random((n_layers, n_heads, n)).round(4).tolist()},
    }
    for la in range(layers_done):
        logits = 4.0 * rng.normal(
            size=(1, n_heads, n, n)
        )  # rows that sum to 1, a few keys each, as attention's
        a = np.exp(logits - logits.max(axis=-1, keepdims=True))
        q = quantise(a / a.sum(axis=-1, keepdims=True))
        out[part_key("head-tsne-all", la)] = part_fields(
            layer=la,
            layers=list(range(n_layers)),
            heads=list(range(n_heads)),
            kept=list(range(n)),
            embedding=rng.normal(size=(n_heads, n, 2)),
            kl=rng.random(n_heads),
            kl_restarts=rng.random((n_heads, 1)),
            engine="fast",
            attention=encode_packed(q),
        )
    return out


def window(page, cdp, seconds: float) -> dict:
    """Answers of the page's server, CPU seconds by part and Chromium's counters over ``seconds``."""
    answers: list = []

    def answered(response) -> None:
        if "_dash-update-component" in response.url:
            answers.append(response.url)

    page.on("response", answered)
    metrics = lambda: {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}  # noqa: E731
    m0, c0, t0 = metrics(), cpu_by_part(), time.perf_counter()
    page.wait_for_timeout(seconds * 1000)
    m1, c1, t1 = metrics(), cpu_by_part(), time.perf_counter()
    page.remove_listener("response", answered)
    return {
        "s": t1 - t0,
        "answers": len(answers),
        "cpu": {k: v - c0.get(k, 0.0) for k, v in c1.items()},
        "metrics": {k: m1.get(k, 0.0) - m0.get(k, 0.0) for k in METRICS},
    }


def profile(cdp, page, seconds: float, top: int = 25) -> list[tuple[float, str]]:
    """The renderer's JavaScript by self time (ms) over ``seconds`` of polling (sampling profiler)."""
    cdp.send("Profiler.enable")
    cdp.send("Profiler.setSamplingInterval", {"interval": 200})
    cdp.send("Profiler.start")
    page.wait_for_timeout(seconds * 1000)
    prof = cdp.send("Profiler.stop")["profile"]
    nodes = {n["id"]: n for n in prof["nodes"]}
    self_ms: dict[str, float] = {}
    deltas = prof.get("timeDeltas") or []
    for sample, dt in zip(prof.get("samples") or [], deltas[1:] + [0], strict=False):
        f = nodes[sample]["callFrame"]
        name = f"{f['functionName'] or '(anonymous)'} {Path(f['url']).name}:{f['lineNumber']}"
        self_ms[name] = self_ms.get(name, 0.0) + dt / 1000
    return sorted(((ms, name) for name, ms in self_ms.items()), reverse=True)[:top]


def report(name: str, w: dict, ref: dict | None = None) -> None:
    s, cpu, m = w["s"], w["cpu"], w["metrics"]
    per_poll = max(w["answers"], 1)
    print(
        f"{name}: {w['answers']} answers in {s:.1f} s; CPU s per second: browser {cpu.get('browser', 0) / s:.3f}, "
        f"web server {cpu.get('web server', 0) / s:.3f}; Chromium's main thread per second: task "
        f"{m['TaskDuration'] / s * 1000:.0f} ms, script {m['ScriptDuration'] / s * 1000:.0f} ms, style "
        f"{m['RecalcStyleDuration'] / s * 1000:.1f} ms ({m['RecalcStyleCount'] / s:.1f}), layout "
        f"{m['LayoutDuration'] / s * 1000:.1f} ms ({m['LayoutCount'] / s:.1f})",
        flush=True,
    )
    if w["answers"]:
        print(
            f"  per answer: browser {cpu.get('browser', 0) / per_poll * 1000:.1f} CPU ms, web server "
            f"{cpu.get('web server', 0) / per_poll * 1000:.1f} CPU ms, main-thread task "
            f"{m['TaskDuration'] / per_poll * 1000:.1f} ms",
            flush=True,
        )
    if ref is not None:
        rb = ref["cpu"].get("browser", 0) / ref["s"]
        rw = ref["cpu"].get("web server", 0) / ref["s"]
        print(
            f"  against the idle page: browser {cpu.get('browser', 0) / s / max(rb, 1e-3):.1f}x "
            f"(+{cpu.get('browser', 0) / s - rb:.3f} CPU s/s), web server +{cpu.get('web server', 0) / s - rw:.3f} "
            f"CPU s/s",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--tokens", type=int, default=452)
    ap.add_argument(
        "--layers-done", type=int, default=10, help="of SmolLM2's 30 layers, in the gallery"
    )
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright
    from redis import Redis

    from backend.serve import stop

    print(f"load average before: {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_serve(Path(tmp), workers=1, model="minilm", threads=1)
        redis = Redis.from_url(json.loads((Path(tmp) / "serve.json").read_text())["redis_url"])
        try:
            sections = page_sections(args.tokens, args.layers_done)
            request = {
                "model": "smollm2",
                "text": TEXT,
                "analyses": ["max-attention", "head-tsne", "hidden-tsne"],
                "options": {"all_heads": True, "layer": 0, "head": 0, "hidden_layer": "all"},
            }
            job_id = start_running_job(
                redis, request, sections=sections, message="held by the bench"
            )
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                cdp = page.context.new_cdp_session(page)
                cdp.send("Performance.enable")
                page.goto(f"{url}/?analysis={job_id}")
                page.wait_for_function(
                    "(document.querySelector('#text-status') || {}).textContent?.includes('held')",
                    timeout=120_000,
                )
                page.wait_for_function(
                    "(document.querySelector('#head-gallery .js-plotly-plot') || {}).layout?.meta"
                    f"?.gallery?.panels?.length >= {9 * args.layers_done}",
                    timeout=300_000,
                )
                page.wait_for_timeout(3000)  # the first answers and drawings are over
                polling = window(page, cdp, args.seconds)
                if args.profile:
                    for ms, name in profile(cdp, page, args.seconds):
                        print(f"  {ms:8.1f} ms  {name}")
                finish_running_job(redis, job_id, {**sections, "timings": {}})
                page.wait_for_function(
                    "(document.querySelector('#text-status') || {}).textContent === 'done'",
                    timeout=120_000,
                )
                page.wait_for_timeout(5000)  # the finished page's drawings are over
                idle = window(page, cdp, args.seconds)
                report("polling, nothing new", polling, idle)
                report("idle page (the reference)", idle)
                browser.close()
        finally:
            stop(proc, grace_s=20)
    print(f"load average after: {os.getloadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
