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
- the evaluation's arithmetic (``flops``: the products ``patch_plan.patched_sparse`` does for these
  circuits, by kind, over the plain forward's), a figure the machine's load does not move;
- the peak resident memory and the per-example score array's size.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import torch


def flops(p, how) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Floating-point operations of the evaluation of the planned circuits ``how`` (``patch_plan.plan``)
    on every example of ``p``, by kind, in plain forwards of the same examples (2 per multiply-add of
    each product; norms and element-wise passes left out): per layer the q/k/v projections of the copies
    of each running row's input, attention and W_O, the feed-forward, and the mix (dense rows:
    every writer below; sparse rows: in-circuit edges only; a layer's heads and feed-forward in one
    product over the writers below the layer), from the first position that differs; the q/k/v only
    of the copies with a non-empty mix, plus the corrupted run's once per layer; a feed-forward with no
    path to the logits through a key or value at the last position only."""
    from workers.analyses.circuits.patch_plan import DENSE

    g = p.model.graph
    L, H = g.n_layers, g.n_heads
    todo = [int(r) for r in how.order if not (how.empty[r] or how.full[r])]
    act = how.active[todo]
    R = len(todo)
    mh, mf, _ = g.blocks(torch.as_tensor(how.masks[todo]))
    part = p.model.parts[0]
    dh, d = part.wq.shape[1:]
    mlp = sum(w.numel() for w in part.mlp.parameters() if w.dim() == 2)
    attn = sum(w.numel() for w in part.attn.parameters() if w.dim() == 2)
    out = {"q/k/v": 0.0, "attention and W_O": 0.0, "feed-forward": 0.0, "mix": 0.0}
    fwd = 0.0
    for x_c, x_k in zip(p.x0_c, p.x0_k, strict=True):
        N = x_c.shape[0]
        differs = torch.nonzero((x_c != x_k).any(-1))
        n = N - (int(differs[0, 0]) if len(differs) else N - 1)
        fwd += L * (2 * N * (attn + mlp) + 4 * H * N * N * dh)
        for layer in range(L):
            h0, f, up = g.head(layer, 0), g.ff(layer), g.up_heads(layer)
            # one mix for the heads' 3H copies and the feed-forward over the writers below the layer
            m = np.concatenate(
                [mh[layer].reshape(R, 3 * H, up).numpy(), mf[layer][:, None, :up].numpy()], 1
            )
            run_h, run_f = act[:, h0 : h0 + H].any(1), act[:, f]
            rows = np.flatnonzero(run_h | run_f)
            if not len(rows):
                continue
            k = m.shape[1]
            nnz = (m[rows] != 0).sum((1, 2))
            dense = nnz > DENSE * k * up
            cut = int(rows[dense].min()) if dense.any() else R
            out["mix"] += 2 * n * d * ((R - cut) * k * up + int(nnz[rows < cut].sum()))
            rows_h, rows_f = np.flatnonzero(run_h), np.flatnonzero(run_f)
            if len(rows_h):
                live = int((m[rows_h, : 3 * H] != 0).any(-1).sum())  # copies with a mix; the
                out["q/k/v"] += 2 * (live * n + 3 * H * N) * d * dh  # others: the corrupted run's
                out["attention and W_O"] += len(rows_h) * (4 * H * N * n * dh + 2 * H * n * dh * d)
            if len(rows_f):
                if not g.parallel:  # the feed-forward's own layer's heads
                    out["mix"] += 2 * n * d * H * len(rows_f)
                one = int(how.last[todo][rows_f, f].sum())  # at the last position only
                out["feed-forward"] += 2 * ((len(rows_f) - one) * n + one) * mlp
    return {key: v / fwd for key, v in out.items()}


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
    fl = flops(p, how)
    print(
        f"the evaluation's arithmetic, forward-equivalents per example: {sum(fl.values()):.1f} ("
        + ", ".join(f"{k} {v:.1f}" for k, v in fl.items())
        + ")"
    )
    print(
        f"per-example scores: {raw.numel() * raw.element_size() / 2**20:.0f} MiB; peak resident {peak:.0f} MiB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
