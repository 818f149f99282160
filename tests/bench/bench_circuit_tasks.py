"""Benchmark: circuits on a task data set (docs/circuits.md, "Circuits on a task data set") against a
plain forward of the same examples measured in the same run.

Run from the repository root (timings under the bench lock)::

    flock /work/bench.lock env PYTHONPATH=. python -m tests.bench.bench_circuit_tasks [--n 200] [--threads 2]

Figures, each per example in forward-equivalents (the stage's CPU time over the plain forward's, the
forward of the same clean texts, batched by length as the stages are, timed before and after each
stage; wall-clock ratios printed too):

- EAP-IG (k = 5) over N IOI examples (their clean and corrupted runs and the gradient runs; target <= 20);
- the evaluation on N held-out examples at MIB's ten sizes (nine edge-patched runs per ranking: signed
  and |score|; k = 1 is the clean run) plus R = 5 random circuits (target <= 40 more);
- the same against forwards of one text at a time (the baseline of tests/bench/bench_circuits.py);
- how many circuits are the corrupted run once pruned and what share of the nodes runs;
- the peak resident memory and the per-example score array's size.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import torch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--n", type=int, default=200, help="IOI examples for each stage")
    parser.add_argument("--ig-steps", type=int, default=5)
    parser.add_argument("--random", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from workers.analyses.circuits import set_scores as ss
    from workers.analyses.circuits.patch_plan import plan
    from workers.analyses.circuits.tasks import ioi
    from workers.models import load_model
    from workers.models.sublayers import batch_inputs

    loaded = load_model(args.model, dtype="float32", device="cpu")
    examples = ioi(loaded.tokenizer, args.n, seed=0)
    p = ss.prepare(loaded, examples)
    index = list(range(len(examples)))
    from workers.models.adapters import encode

    encoded = [encode(loaded, ex.clean) for ex in examples]

    def forward() -> tuple[float, float]:
        w, c = time.perf_counter(), time.process_time()
        with torch.inference_mode():
            for idx in p.chunks(index, 8):
                loaded.model(**batch_inputs(loaded, [encoded[i] for i in idx]))
        return time.perf_counter() - w, time.process_time() - c

    def one_at_a_time() -> tuple[float, float]:
        w, c = time.perf_counter(), time.process_time()
        with torch.inference_mode():
            for e in encoded:
                loaded.model(**batch_inputs(loaded, [e]))
        return time.perf_counter() - w, time.process_time() - c

    singles = [one_at_a_time()]

    def stage(job):  # type: ignore[no-untyped-def]
        f0 = forward()
        w, c = time.perf_counter(), time.process_time()
        out = job()
        took = time.perf_counter() - w, time.process_time() - c
        f1 = forward()
        fw = (f0[0] + f1[0]) / 2, (f0[1] + f1[1]) / 2
        return out, took, fw

    (raw, m_c, m_k), t_ig, f_ig = stage(lambda: ss.example_scores(p, index, steps=args.ig_steps))
    g = p.model.graph
    scores = ss.set_scores(raw, m_c, m_k)
    sizes = [ss.size_of(k, g.n_edges) for k in ss.MIB_SIZES][:-1]
    rng = np.random.default_rng(1)
    orders = [np.argsort(-scores), np.argsort(-np.abs(scores))] + [
        rng.permutation(g.n_edges) for _ in range(args.random)
    ]
    masks = np.concatenate([ss.top_masks(o, sizes, g.n_edges) for o in orders])
    _, t_ev, f_ev = stage(lambda: ss.patched_metrics(p, index, masks))
    singles.append(one_at_a_time())
    single = sum(x[1] for x in singles) / len(singles)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB (Linux: KiB)
    n_tok = [x.shape[0] for x in p.x0_c]
    print(
        f"{args.model}: {len(examples)} IOI examples, {min(n_tok)}-{max(n_tok)} tokens, {g.n_edges} edges"
    )
    print(
        f"plain forward of the {len(examples)} clean texts: {f_ig[0]:.2f} s wall, {f_ig[1]:.2f} s CPU"
    )
    print(
        f"EAP-IG k={args.ig_steps}: {t_ig[0]:.1f} s wall, {t_ig[1]:.1f} s CPU = "
        f"{t_ig[1] / f_ig[1]:.1f} forward-equivalents per example (CPU; wall {t_ig[0] / f_ig[0]:.1f})"
    )
    print(
        f"evaluation, {masks.shape[0]} edge-patched rows per example (9 sizes x (2 rankings + {args.random} random)): "
        f"{t_ev[0]:.1f} s wall, {t_ev[1]:.1f} s CPU = {t_ev[1] / f_ev[1]:.1f} forward-equivalents per example "
        f"(CPU; wall {t_ev[0] / f_ev[0]:.1f})"
    )
    print(
        f"against one-at-a-time forwards ({single:.2f} s CPU for the {len(examples)} texts): EAP-IG "
        f"{t_ig[1] / single:.1f}, evaluation {t_ev[1] / single:.1f} forward-equivalents per example"
    )
    how = plan(g, masks, any(part.post_attn is not None for part in p.model.parts))
    print(
        f"of the {masks.shape[0]} circuits {int(how.empty.sum())} are the corrupted run once pruned; "
        f"{how.active[:, 1:].mean():.0%} of the nodes run (patch_plan: only what can move the logits)"
    )
    print(
        f"per-example scores: {raw.numel() * raw.element_size() / 2**20:.0f} MiB; peak resident {peak:.0f} MiB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
