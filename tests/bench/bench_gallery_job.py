"""Benchmark: the text explorer's job itself, without the service or the browser (issue 34).

Run from the repository root::

    PYTHONPATH=. .venv/bin/python -m tests.bench.bench_gallery_job [--model smollm2] [--tokens 128,256,452]

Runs what a worker runs for the page's request (``workers.queue.jobs.compute_analysis``: heatmaps and the
selected head, every head's t-SNE published layer by layer, the hidden-state t-SNE) in this process
and prints, per n, when each part was published — the first section, the gallery's first layer, the
whole gallery, the end — with the job's forward passes shared (the default) and not shared
(``shared_run`` off: every stage runs the model again), each also as a multiple of a plain forward
of the same text measured in the same run. ``tests.bench.bench_gallery`` measures the same in a real
browser; the difference between the two is the service's and the page's share (polling, transfer,
drawing).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

from tests.bench.bench_gallery import plain_forward_s, readme_text


def run_job(model: str, text: str, *, shared: bool) -> dict[str, float]:
    import workers.queue.jobs as J
    from frontend.pages.text import text_request
    from workers.core.contracts import AnalysisRequest
    from workers.core.partials import parse_part_key

    req = AnalysisRequest.model_validate(text_request(text=text, model=model, drop_special=False, restarts=1,
                                                      layer=1, head=2))  # fmt: skip
    real = J.shared_run
    if not shared:
        J.shared_run = lambda stages: None
    marks: dict[str, float] = {}
    start = time.perf_counter()

    def on_partial(fields: dict) -> None:
        now = time.perf_counter() - start
        for key in fields:
            name = "first layer" if parse_part_key(key) else key
            if name in ("max-attention", "first layer", "head-tsne-all", "hidden-tsne"):
                marks.setdefault(name, now)

    try:
        J.compute_analysis(req, progress=lambda f, m: None, on_partial=on_partial)
    finally:
        J.shared_run = real
    marks["done"] = time.perf_counter() - start
    return marks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--tokens", default="128,256,452")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from workers.models import load_model

    loaded = load_model(args.model, device="cpu")
    print(f"load average before: {os.getloadavg()}")
    run_job(args.model, readme_text(loaded, 32, seed=0), shared=True)  # warm-up
    for n in (int(t) for t in args.tokens.split(",")):
        text = readme_text(loaded, n, seed=n)
        fwd = plain_forward_s(loaded, text)
        for shared in (True, False):
            m = run_job(args.model, text, shared=shared)
            parts = ", ".join(f"{k} {v:.2f} s ({v / fwd:.1f}x)" for k, v in m.items())
            print(f"n = {n:4d} {'shared' if shared else 'not shared'}: plain forward {fwd:.2f} s; {parts}; "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
