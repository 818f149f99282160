"""Benchmark: term decomposition of a 512-token text on MiniLM vs a plain forward pass.

Run from the repository root::

    PYTHONPATH=. python -m tests.bench.bench_decomposition [--tokens 512] [--repeats 7] [--dtype float32]

Every repeat times the three jobs back to back (interleaved, so machine noise hits them alike) and
the medians are compared: the ratio decomposition / plain forward is the figure to watch (goal <= 3).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import torch


def median_seconds(
    jobs: dict[str, Callable[[], object]], *, repeats: int, warmup: int = 1
) -> dict[str, float]:
    """Median wall time of each job over ``repeats`` interleaved rounds (after ``warmup`` rounds)."""
    times: dict[str, list[float]] = {name: [] for name in jobs}
    for r in range(warmup + repeats):
        for name, job in jobs.items():
            start = time.perf_counter()
            job()
            if r >= warmup:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="minilm")
    parser.add_argument(
        "--tokens", type=int, default=512, help="text length in tokens, specials included"
    )
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)

    from workers.analyses.decomposition import decompose_encoded
    from workers.data import demo_text
    from workers.models import encode, load_model
    from workers.models.adapters import forward, model_inputs

    loaded = load_model(args.model, dtype=args.dtype, device=args.device)
    text = " ".join([demo_text()] * 8)
    enc = encode(loaded, text, truncate=True)
    if enc.n > args.tokens:
        enc = encode(
            loaded, loaded.tokenizer.decode(enc.input_ids[1 : args.tokens - 1]), truncate=True
        )
    inputs = model_inputs(loaded, enc)

    @torch.inference_mode()
    def plain() -> object:
        return loaded.model(**inputs)

    jobs: dict[str, Callable[[], object]] = {
        "plain forward": plain,
        "forward + attentions + hidden states": lambda: forward(loaded, enc),
        "decomposition (pipeline: no component vectors)": lambda: decompose_encoded(
            loaded, [enc], [text], keep_components=False
        ),
        "decomposition (notebook: keep component vectors)": lambda: decompose_encoded(
            loaded, [enc], [text]
        ),
    }
    med = median_seconds(jobs, repeats=args.repeats)
    dec = decompose_encoded(loaded, [enc], [text], keep_components=False)[0]
    ref = med["plain forward"]
    print(
        f"model {args.model} ({args.dtype}, {args.device}), {enc.n} tokens, torch threads "
        f"{torch.get_num_threads()}, median of {args.repeats} interleaved repeats"
    )
    for name, sec in med.items():
        print(f"  {name:<50} {sec * 1000:8.1f} ms   x{sec / ref:5.2f} of plain forward")
    ratio = med["decomposition (pipeline: no component vectors)"] / ref
    print(f"ratio decomposition / plain forward: {ratio:.2f} (goal <= 3)")
    print(f"max |i+h+f+c - X[l]| over states: {dec.max_abs_error.max():.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
