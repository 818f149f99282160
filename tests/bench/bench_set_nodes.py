"""Benchmark: AtP node scores on a task set (docs/circuits.md, "Node scores") against a forward of the
same clean texts, batched by length as the node scores batch them, measured in the same run.

Run from the repository root (timings under the bench lock)::

    flock /work/bench.lock env PYTHONPATH=. OMP_WAIT_POLICY=PASSIVE \\
        python -m tests.bench.bench_set_nodes [--model smollm2] [--n 8] [--threads 2]

Prints the node scores' time per example in forward-equivalents (CPU time and wall clock) and the top
nodes on IOI (seed 0).
"""

from __future__ import annotations

import argparse
import time

import torch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--n", type=int, default=8, help="IOI examples")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from workers.analyses.circuits.set_nodes import node_scores
    from workers.analyses.circuits.tasks import ioi
    from workers.models import load_model
    from workers.models.adapters import encode
    from workers.models.sublayers import batch_inputs

    m = load_model(args.model, dtype="float32")
    exs = ioi(m.tokenizer, args.n, 0)
    by_len: dict[int, list] = {}
    for ex in exs:
        enc = encode(m, ex.clean)
        by_len.setdefault(enc.n, []).append(enc)

    def forward() -> None:
        with torch.inference_mode():
            for encs in by_len.values():
                m.model(**batch_inputs(m, encs))

    forward()  # warm
    cpu, wall = time.process_time(), time.perf_counter()
    forward()
    f_cpu, f_wall = time.process_time() - cpu, time.perf_counter() - wall
    cpu, wall = time.process_time(), time.perf_counter()
    res = node_scores(m, exs, list(range(len(exs))))
    n_cpu, n_wall = time.process_time() - cpu, time.perf_counter() - wall
    print(
        f"{args.model}, {len(exs)} IOI examples in {len(by_len)} lengths: node scores {n_wall:.2f} s "
        f"wall ({n_cpu:.2f} s CPU) = {n_cpu / f_cpu:.1f} forward-equivalents by CPU time, "
        f"{n_wall / f_wall:.1f} by wall clock (batched forward {f_wall:.2f} s)"
    )
    print("top:", ", ".join(f"{n['id']} {n['score']:+.3f}" for n in res["top"][:8]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
