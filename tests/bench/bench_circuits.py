"""Benchmark: attribution patching and edge attribution (issue 30) against a plain forward measured in
the same run.

Run from the repository root::

    PYTHONPATH=. python -m tests.bench.bench_circuits [--model smollm2] [--tokens 16] [--repeats 3] [--threads 2]

Targets (SmolLM2, 2 cores, n = 16), each a time over a plain forward of the same text
("forward-equivalents"):

- AtP for every head, feed-forward and residual position <= 4, against the real patching of the same
  heads and residual positions (also printed);
- EAP-IG (k = 5) on every edge (q/k/v apart) <= 30: the clean and corrupted runs plus the gradient
  runs that score every edge;
- the faithfulness curve of 12 sizes <= 15 more: the edge-patched runs (the circuit of N is one more
  row of the same batch, so 13 circuits are timed).

Forward, AtP, real patching and edge attribution are timed interleaved (median of ``--repeats``) so
machine noise hits them alike; edge attribution's stages come from its own timings, each divided by
forwards timed right before and after it in the same round (the median over rounds is printed, and
every round's figures). The whole run's CPU time over a forward's is printed too: on a loaded machine
it is the steadier figure. The memory of the dense edge-score array is printed too.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import torch

from tests.bench.bench_causal import _text_of
from tests.bench.bench_decomposition import median_seconds


def _timed(job: Callable[[], object], times: int = 3) -> tuple[float, float]:
    """Mean wall and CPU seconds of ``job`` over ``times`` calls."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(times):
        job()
    return (time.perf_counter() - wall) / times, (time.process_time() - cpu) / times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ig-steps", type=int, default=5)
    parser.add_argument("--no-patching", action="store_true", help="skip the real patching (slow)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from workers.analyses.causal.interventions import patching
    from workers.analyses.circuits.attribution_patching import attribution_patching
    from workers.analyses.circuits.edges import edge_attribution
    from workers.models import load_model
    from workers.models.adapters import Encoded, model_inputs

    loaded = load_model(args.model, dtype="float32", device="cpu")
    _, enc = _text_of(loaded, args.tokens)
    ids = list(enc.input_ids)
    swap = next(
        i for i in range(len(ids)) if not enc.special[i]
    )  # every position from the first token differs
    ids[swap] = (ids[swap] + 1) % loaded.unembed.vocab_size
    corrupted = Encoded(ids, enc.tokens, enc.offsets, enc.special)
    target = [int(ids[-1]), int(ids[-2])]
    inputs = model_inputs(loaded, enc)

    def forward() -> None:
        with torch.inference_mode():
            loaded.model(**inputs, output_hidden_states=True)

    last: dict = {}
    rounds: list[dict[str, float]] = []  # per round: each stage over the forwards timed beside it

    def edges() -> None:
        """Forward, edge attribution, forward: its stages over the two forwards' mean (wall), and its
        whole run over theirs in CPU time (this process' threads), which a loaded machine skews less."""
        f0 = _timed(forward)
        wall, cpu = time.perf_counter(), time.process_time()
        out = edge_attribution(loaded, enc, corrupted, target=target, ig_steps=args.ig_steps)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        f1 = _timed(forward)
        f_wall, f_cpu = (f0[0] + f1[0]) / 2, (f0[1] + f1[1]) / 2
        t = out["timings"]
        rounds.append(
            {
                "eap": (t["runs_s"] + t["scores_s"]) / f_wall,
                "curve": t["circuits_s"] / f_wall,
                "runs": t["runs_s"] / f_wall,
                "scores": t["scores_s"] / f_wall,
                "cpu": cpu / f_cpu,
                "wall": wall / f_wall,
                "eap_cpu": (t["runs_cpu_s"] + t["scores_cpu_s"]) / f_cpu,
                "curve_cpu": t["circuits_cpu_s"] / f_cpu,
            }
        )
        last.update(out)

    jobs = {
        "forward": forward,
        "attribution-patching": lambda: attribution_patching(loaded, enc, corrupted, target=target),
        "edge-attribution": edges,
    }
    if not args.no_patching:
        jobs["patching"] = lambda: patching(loaded, enc, corrupted, target=target)
    med = median_seconds(jobs, repeats=args.repeats)
    fwd = med["forward"]
    rounds = rounds[-args.repeats :]  # after the warm-up round

    def ratio(key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    eap, curve = ratio("eap"), ratio("curve")
    L, H = loaded.n_layers, loaded.n_heads
    print(
        f"model {args.model}: {L} layers x {H} heads, n = {enc.n}, torch threads {torch.get_num_threads()}"
    )
    for name, s in med.items():
        if (
            name != "edge-attribution"
        ):  # its round also times six forwards; its own figures are below
            print(f"  {name:<22} {s * 1000:9.1f} ms  {s / fwd:7.1f}x forward")
    print(
        f"  AtP: {med['attribution-patching'] / fwd:.1f} forward-equivalents (target <= 4) for {L * H} heads, "
        f"{L} feed-forwards, {(L + 1) * enc.n} residual positions"
        + ("" if args.no_patching else f"; real patching {med['patching'] / fwd:.0f}")
    )
    n_curve = len(last["curve"])
    print(
        f"  EAP-IG (k = {args.ig_steps}) on {last['n_edges']:,} edges: {eap:.1f} forward-equivalents "
        f"(target <= 30; clean/corrupted runs {ratio('runs'):.1f}, gradient runs {ratio('scores'):.1f})"
    )
    print(
        f"  faithfulness curve: {n_curve} sizes + the circuit of N = {last['top_edges']}: {curve:.1f} "
        f"forward-equivalents (target <= 15 for 12 sizes)"
    )
    print(
        f"  in CPU time: EAP-IG {ratio('eap_cpu'):.1f}, curve {ratio('curve_cpu'):.1f}; the whole run "
        f"{ratio('cpu'):.1f} (wall {ratio('wall'):.1f}); per round wall (EAP-IG, curve): "
        + ", ".join(f"({r['eap']:.1f}, {r['curve']:.1f})" for r in rounds)
    )
    print(
        f"  edge scores: {last['scores_bytes']:,} bytes ({last['scores_dtype']}, {last['n_edges']:,} edges)"
    )
    return 0


def bench_flow(model: str, *, tokens: int, repeats: int) -> float:
    """Information flow (SPEC 12; target SmolLM2, n = 128: <= 3 forward-equivalents): the whole
    ``information_flow`` call (its forward with the hooks, the importances, the graph) against a plain
    forward of the same tokens, interleaved (median of ``repeats``); printed and returned.

    Run as ``PYTHONPATH=. python -m tests.bench.bench_circuits --flow [--model smollm2] [--tokens 128]
    [--repeats 3] [--threads 2] [--every-query]``."""
    from workers.analyses.circuits.information_flow import information_flow
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
    print(
        f"model {model}: {loaded.n_layers} layers x {loaded.n_heads} heads, n = {enc.n}, "
        f"torch threads {torch.get_num_threads()}"
    )
    for name, s in med.items():
        print(f"  {name:<22} {s * 1000:9.1f} ms  {s / med['forward']:7.1f}x forward")
    print(
        f"  information flow: {ratio:.2f} forward-equivalents (target <= 3), {got['edges']} edges at tau = 0.04"
    )
    return ratio


def flow_main(argv: list[str]) -> int:
    """``--flow``: the information-flow benchmark alone (``bench_flow``)."""
    parser = argparse.ArgumentParser(description=bench_flow.__doc__)
    parser.add_argument("--flow", action="store_true")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--every-query",
        action="store_true",
        help="the path of texts whose layers would not fit KEEP_BYTES: every query in the forward",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.every_query:
        import workers.analyses.circuits.information_flow as flow_module

        flow_module.KEEP_BYTES = 0
    bench_flow(args.model, tokens=args.tokens, repeats=args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(flow_main(sys.argv[1:]) if "--flow" in sys.argv[1:] else main())
