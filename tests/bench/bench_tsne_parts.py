"""Benchmark: the CPU each part of the fast t-SNE spends on the text explorer's job (issue 34).

Run from the repository root (not part of the default test run; needs the SmolLM2 model)::

    flock /work/bench.lock env PYTHONPATH=. python -m tests.bench.bench_tsne_parts [--tokens 452] [--json out.json]

SmolLM2 reads the README's first ``--tokens`` tokens (``bench_gallery.readme_text``, 452 = the README's
first 1,500 characters); each layer's heads go through the engine layer by layer as the job runs them
(P, Lanczos start, optimisation, the exact float64 KL), then the hidden states (perplexity 20) as one
batch. CPU seconds per part (``time.process_time``: both threads), the iterations each head used, the
CPU per iteration and head, and a per-iteration micro-benchmark (one head, 25 iterations + its KL
check). Same-run reference: the exact KL through torch (``affinities._kl_torch``, the implementation
before issue 34) beside the compiled one, with their largest relative difference. Note the load average
printed: on a shared machine compare ratios, not seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from workers.core.settings import WORKER_OPENMP_ENV

for _k, _v in WORKER_OPENMP_ENV.items():
    os.environ.setdefault(_k, _v)


def _forward(tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """SmolLM2's attention [layer, head, n, n] and hidden states [state, n, d] of the README text."""
    import torch

    from tests.bench.bench_gallery import readme_text
    from workers.models import load_model
    from workers.models.adapters import encode, model_inputs

    loaded = load_model("smollm2")
    inputs = model_inputs(loaded, encode(loaded, readme_text(loaded, tokens, seed=0)))
    with torch.inference_mode():
        out = loaded.model(**inputs, output_attentions=True, output_hidden_states=True)
    att = np.stack([a[0].float().numpy() for a in out.attentions])
    hidden = np.stack([h[0].float().numpy() for h in out.hidden_states]).astype(np.float64)
    return att, hidden


def per_iteration_us(p: np.ndarray, *, reps: int = 20) -> float:
    """Median CPU microseconds per iteration of one head: 25 iterations + one KL check per round."""
    from workers.analyses.tsne import cpu_kernels
    from workers.analyses.tsne.affinities import entropies, kernel_p
    from workers.analyses.tsne.initialization import fast_spectral_init

    n = p.shape[-1]
    pk, y0, ent, kl = kernel_p(p), fast_spectral_init(p), entropies(p), np.zeros(1)
    f32 = np.float32
    ex, mom, lr = np.full(1, 12, f32), np.full(1, 0.5, f32), np.full(1, n / 12, f32)
    times = []
    for _ in range(reps + 1):
        y = np.ascontiguousarray(np.swapaxes(y0, 1, 2), dtype=f32)
        c0 = time.process_time()
        cpu_kernels.run_round_serial(pk, y, np.zeros_like(y), np.ones_like(y), np.zeros(1, np.int64), 25,
                                     ex, mom, lr, f32(5), ent, kl, True)  # fmt: skip
        times.append((time.process_time() - c0) / 25 * 1e6)
    return float(np.median(times[1:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=452)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    from workers.analyses.tsne.affinities import _kl_torch, head_affinities, kl_divergence
    from workers.analyses.tsne.hidden import affinities_of_states
    from workers.analyses.tsne.host_engine import fast_optimize, torch_threads_kept
    from workers.analyses.tsne.initialization import fast_spectral_init
    from workers.analyses.tsne.options import TSNEOptions

    att, hidden = _forward(args.tokens)
    ph = affinities_of_states(hidden, perplexity=20.0)
    cpu: dict[str, float] = {}

    def timed(key, f, *a, **kw):
        c0 = time.process_time()
        out = f(*a, **kw)
        cpu[key] = cpu.get(key, 0.0) + time.process_time() - c0
        return out

    load = os.getloadavg()[0]
    options = TSNEOptions()
    iters, worst = [], 0.0
    with torch_threads_kept():
        warm = head_affinities(att[0, :2, :40, :40].astype(np.float64))  # load the compiled kernels
        kl_divergence(
            warm, fast_optimize(warm, fast_spectral_init(warm), options=TSNEOptions(n_iter=30))[0]
        )
        for layer in range(att.shape[0]):
            p = timed("affinities", head_affinities, att[layer].astype(np.float64))
            y0 = timed("spectral start", fast_spectral_init, p, seed=0)
            emb, used = timed("optimise", fast_optimize, p, y0, options=options)
            iters += used.tolist()
            kl = timed("exact KL", kl_divergence, p, emb)
            ref = timed("exact KL, torch (reference)", _kl_torch, p, emb)
            worst = max(worst, float(np.abs(kl / ref - 1).max()))
        y0 = timed("hidden: spectral start", fast_spectral_init, ph, seed=0)
        emb, hidden_used = timed("hidden: optimise", fast_optimize, ph, y0, options=options)
        timed("hidden: exact KL", kl_divergence, ph, emb)
        micro = per_iteration_us(head_affinities(att[5, :1].astype(np.float64)))
    heads = np.array(iters)
    print(f"SmolLM2, n = {att.shape[-1]}, {heads.size} heads layer by layer + {ph.shape[0]} hidden states; "
          f"load average {load:.1f} before, {os.getloadavg()[0]:.1f} after")  # fmt: skip
    for key, secs in cpu.items():
        print(f"  {key:30s} {secs:6.2f} CPU s")
    print(f"  iterations per head: mean {heads.mean():.1f}, min {heads.min()}, max {heads.max()}; "
          f"hidden states mean {hidden_used.mean():.1f}")  # fmt: skip
    print(f"  optimise: {1e6 * cpu['optimise'] / heads.sum():.1f} CPU us per iteration and head; "
          f"micro-benchmark (one head, 25 iterations + a KL check): {micro:.1f} us per iteration")  # fmt: skip
    print(f"  exact KL compiled / torch: {cpu['exact KL'] / cpu['exact KL, torch (reference)']:.3f}x the CPU, "
          f"largest relative difference {worst:.1e}")  # fmt: skip
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"cpu_s": cpu, "iterations": iters, "micro_us": micro, "load": load}, fh)


if __name__ == "__main__":
    main()
