"""Benchmark: attribution patching (issue 30) against a plain forward measured in the same run.

Run from the repository root::

    PYTHONPATH=. python -m tests.bench.bench_circuits [--model smollm2] [--tokens 16] [--repeats 3] [--threads 2]

Target (SmolLM2, 2 cores, n = 16): AtP for every head, feed-forward and residual position <= 4
forward-equivalents (its time over a plain forward of the same text), against the real patching of
the same heads and residual positions, also printed in forward-equivalents. Forward, AtP and real
patching are timed interleaved (median of ``--repeats``) so machine noise hits them alike.
"""

from __future__ import annotations

import argparse
import sys

import torch

from tests.bench.bench_causal import _text_of
from tests.bench.bench_decomposition import median_seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from workers.analysis.attribution_patching import attribution_patching
    from workers.analysis.interventions import patching
    from workers.models import load_model
    from workers.models.adapters import Encoded, model_inputs

    loaded = load_model(args.model, dtype="float32", device="cpu")
    _, enc = _text_of(loaded, args.tokens)
    ids = list(enc.input_ids)
    swap = next(i for i in range(len(ids)) if not enc.special[i])  # every position from the first token differs
    ids[swap] = (ids[swap] + 1) % loaded.unembed.vocab_size
    corrupted = Encoded(ids, enc.tokens, enc.offsets, enc.special)
    target = [int(ids[-1]), int(ids[-2])]
    inputs = model_inputs(loaded, enc)

    def forward() -> None:
        with torch.inference_mode():
            loaded.model(**inputs, output_hidden_states=True)

    med = median_seconds({
        "forward": forward,
        "attribution-patching": lambda: attribution_patching(loaded, enc, corrupted, target=target),
        "patching": lambda: patching(loaded, enc, corrupted, target=target),
    }, repeats=args.repeats)  # fmt: skip
    fwd = med["forward"]
    L, H = loaded.n_layers, loaded.n_heads
    print(f"model {args.model}: {L} layers x {H} heads, n = {enc.n}, torch threads {torch.get_num_threads()}")
    for name, s in med.items():
        print(f"  {name:<22} {s * 1000:9.1f} ms  {s / fwd:7.1f}x forward")
    print(f"  AtP: {med['attribution-patching'] / fwd:.1f} forward-equivalents (target <= 4) for {L * H} heads, "
          f"{L} feed-forwards, {(L + 1) * enc.n} residual positions; real patching {med['patching'] / fwd:.0f}")
    return 0


def bench_flow(model: str, *, tokens: int, repeats: int) -> float:
    """Information flow (SPEC 12; target SmolLM2, n = 128: <= 3 forward-equivalents): the whole
    ``information_flow`` call (its forward with the hooks, the importances, the graph) against a plain
    forward of the same tokens, interleaved (median of ``repeats``); printed and returned.

    Run as ``PYTHONPATH=. python -m tests.bench.bench_circuits --flow [--model smollm2] [--tokens 128]
    [--repeats 3] [--threads 2]``."""
    from workers.analysis.information_flow import information_flow
    from workers.models import load_model
    from workers.models.adapters import model_inputs

    loaded = load_model(model, dtype="float32", device="cpu")
    _, enc = _text_of(loaded, tokens)
    inputs = model_inputs(loaded, enc)
    got: dict[str, int] = {}

    def forward() -> None:
        with torch.inference_mode():
            loaded.model(**inputs, output_hidden_states=True)

    def flow() -> None:
        got["edges"] = len(information_flow(loaded, enc)["edges"])

    med = median_seconds({"forward": forward, "information-flow": flow}, repeats=repeats)
    ratio = med["information-flow"] / med["forward"]
    print(f"model {model}: {loaded.n_layers} layers x {loaded.n_heads} heads, n = {enc.n}, "
          f"torch threads {torch.get_num_threads()}")
    for name, s in med.items():
        print(f"  {name:<22} {s * 1000:9.1f} ms  {s / med['forward']:7.1f}x forward")
    print(f"  information flow: {ratio:.2f} forward-equivalents (target <= 3), {got['edges']} edges at tau = 0.04")
    return ratio


def flow_main(argv: list[str]) -> int:
    """``--flow``: the information-flow benchmark alone (``bench_flow``)."""
    parser = argparse.ArgumentParser(description=bench_flow.__doc__)
    parser.add_argument("--flow", action="store_true")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    bench_flow(args.model, tokens=args.tokens, repeats=args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(flow_main(sys.argv[1:]) if "--flow" in sys.argv[1:] else main())
