"""Benchmark: SmolLM2-135M-Instruct (30 layers x 9 heads) at n = 256 tokens, ratios of one run.

Run from the repository root::

    PYTHONPATH=. .venv/bin/python -m tests.bench.bench_smollm2 [--tokens 256] [--repeats 3]

Reported (medians of ``--repeats``, in this process, after one untimed warm-up of each):

- a plain eager forward (no attention kept, no hooks) — the reference;
- the max-attention analysis (the streamed forward with every layer's maps reduced on the way),
  and its ratio to the reference (target <= 1.2x);
- the attention-head t-SNE of all 270 heads (``head-tsne``, every layer and head): the t-SNE
  seconds the section reports (target <= 5 s) and the whole analysis;
- the first request of this process against the later ones, after the worker's warm-up (``--cold``:
  without it, as before issue 22);
- resident memory (VmRSS, VmHWM) with MiniLM and SmolLM2 both loaded, as a worker preloading both.

A shared machine's numbers are noisy: compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _rss_mb() -> tuple[float, float]:
    fields = dict(
        line.split(":", 1)
        for line in Path("/proc/self/status").read_text().splitlines()
        if ":" in line
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def _timed(fn, repeats: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--cold", action="store_true", help="skip the worker's warm-up before the first request"
    )
    args = parser.parse_args()

    import torch

    from workers.analyses.tsne.engines import warm_up as warm_kernels
    from workers.engine.pipeline import analyze
    from workers.engine.pipeline import warm_up as warm_model
    from workers.models import load_model
    from workers.models.adapters import encode, model_inputs

    start = time.perf_counter()
    smol = load_model("smollm2", device="cpu")
    load_s = time.perf_counter() - start
    tok = smol.tokenizer
    source = (ROOT / "tests" / "bench" / "bench_text.txt").read_text()
    ids = tok(source, add_special_tokens=False)["input_ids"]
    while len(ids) < args.tokens:
        ids = ids + ids
    text = tok.decode(ids[: args.tokens])
    enc = encode(smol, text)
    print(
        f"SmolLM2-135M-Instruct, n = {enc.n} tokens, torch threads {torch.get_num_threads()}, load {load_s:.1f} s"
    )

    def first_request(t: str) -> float:
        s = time.perf_counter()
        analyze(smol, t, ["max-attention", "head-tsne"], {"layer": 0, "head": 0})
        return time.perf_counter() - s

    if args.cold:  # no warm-up: what a worker paid before the warm-up ran the first request's path
        warm_s = 0.0
    else:  # what a worker does at start (workers/queue/worker.py)
        s = time.perf_counter()
        warm_kernels()
        warm_model(smol)
        warm_s = time.perf_counter() - s
    first = first_request(text.replace(".", ";", 1))
    later = statistics.median(
        first_request(text.replace(".", ",", k + 1)) for k in range(args.repeats)
    )
    print(
        f"{'cold' if args.cold else f'after the warm-up ({warm_s:.1f} s)'}: first request {first:.2f} s, "
        f"later requests {later:.2f} s (max-attention + one head's t-SNE, as the text explorer asks first)"
    )

    inputs = model_inputs(smol, enc)

    def plain() -> None:
        with torch.inference_mode():
            smol.model(**inputs)

    plain()
    fwd, fwd_all = _timed(plain, args.repeats)
    ma, ma_all = _timed(lambda: analyze(smol, text, ["max-attention"]), args.repeats)
    print(f"plain eager forward      {fwd:.3f} s  {[round(t, 3) for t in fwd_all]}")
    print(
        f"max-attention analysis   {ma:.3f} s  {[round(t, 3) for t in ma_all]}  ratio {ma / fwd:.2f}x (target <= 1.2x)"
    )

    tsne, total = [], []
    for k in range(args.repeats):
        s = time.perf_counter()
        res = analyze(smol, text, ["head-tsne"], {"layer": "all", "head": "all", "seed": k})
        total.append(time.perf_counter() - s)
        tsne.append(float(res["head-tsne"]["timings"].get("tsne_s", float("nan"))))
    shape = (res["n_layers"], res["n_heads"])
    print(
        f"all {shape[0] * shape[1]} heads' t-SNE: t-SNE {statistics.median(tsne):.2f} s "
        f"{[round(t, 2) for t in tsne]} (target <= 5 s); whole analysis {statistics.median(total):.2f} s"
    )

    rss_one, _ = _rss_mb()
    minilm = load_model("minilm", device="cpu")
    warm_model(minilm)
    rss, hwm = _rss_mb()
    print(
        f"resident memory: SmolLM2 alone {rss_one:.0f} MB; with MiniLM too {rss:.0f} MB (peak {hwm:.0f} MB)"
    )


if __name__ == "__main__":
    main()
