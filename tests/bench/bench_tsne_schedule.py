"""Benchmark: variants of the fast t-SNE's adaptive schedule: iterations, CPU and exact KL (issue 34).

Run from the repository root (not part of the default test run; needs SmolLM2 and MiniLM)::

    PYTHONPATH=. python -m tests.bench.bench_tsne_schedule [--variants base,settle] [--seeds 0,1] [--json out.json]

The heads: SmolLM2 on the README's first 1,500 characters (n = 452; 30 layers x 9 heads, layer by layer
as the job runs them, and the 31 hidden states at perplexity 20) and MiniLM on ``bench_text.txt``
(n = 128 and 512, 72 heads each). Each variant embeds every set from the same spectral starts (one per
jitter seed); the yardstick is the current schedule (``base``) with the same seed: per-head exact KL
ratio variant / base. The noise it is judged against is ``base`` itself with another jitter seed
(seed s against seed 0). CPU is ``time.process_time`` of the optimisation alone (both threads); on a
shared machine compare the ratio to ``base``, and note the load average printed.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from workers.core.settings import WORKER_OPENMP_ENV

for _k, _v in WORKER_OPENMP_ENV.items():
    os.environ.setdefault(_k, _v)

CACHE = Path(os.environ.get("TMPDIR", "/tmp")) / "headscope-bench-tsne-schedule-p.npz"

# name -> FastSchedule overrides; "base" is the schedule as it stands
VARIANTS: dict[str, dict] = {
    "base": {},
    "tol2e-2": {"tol": 2e-2},
    "settle50": {"settle_iter": 50},
    "window50": {"window": 50},
    "window25-tol1.25e-3": {"window": 25, "tol": 1.25e-3},
    "partial": {"partial_window": True},
    "settle-adaptive": {"partial_window": True, "settle_tol": 5e-3},
    "partial+settle-tol0": {"partial_window": True, "settle_tol": 0.0},
    "partial+settle-tol1e-3": {"partial_window": True, "settle_tol": 1e-3},
    "partial+settle-tol2e-3-min50": {"partial_window": True, "settle_tol": 2e-3, "min_settle": 50},
    "partial-tol1e-2+settle-tol1e-3": {"partial_window": True, "tol": 1e-2, "settle_tol": 1e-3},
    # the early phase as in base (its minimum 125 = when base's window first fills), the later ones shorter
    "E+settle1e-3": {"partial_window": True, "min_early": 125, "settle_tol": 1e-3},
    "E+main1e-2": {"partial_window": True, "min_early": 125, "main_tol": 1e-2},
    "E+main1e-2+settle1e-3": {
        "partial_window": True,
        "min_early": 125,
        "main_tol": 1e-2,
        "settle_tol": 1e-3,
    },
    "E+main2e-2+settle1e-3": {
        "partial_window": True,
        "min_early": 125,
        "main_tol": 2e-2,
        "settle_tol": 1e-3,
    },
    "E+main1e-2+settle2e-3": {
        "partial_window": True,
        "min_early": 125,
        "main_tol": 1e-2,
        "settle_tol": 2e-3,
    },
    "E+main1e-2+min75+settle1e-3": {
        "partial_window": True,
        "min_early": 125,
        "main_tol": 1e-2,
        "min_main": 75,
        "settle_tol": 1e-3,
    },
    # the early phase shorter too
    "E100+main1e-2+settle1e-3": {
        "partial_window": True,
        "min_early": 100,
        "main_tol": 1e-2,
        "settle_tol": 1e-3,
    },
    "E75+main1e-2+settle1e-3": {
        "partial_window": True,
        "min_early": 75,
        "main_tol": 1e-2,
        "settle_tol": 1e-3,
    },
    "window50+settle1e-3": {"window": 50, "settle_tol": 1e-3},
    "window50+main1e-2+settle1e-3": {"window": 50, "main_tol": 1e-2, "settle_tol": 1e-3},
}


def load_sets(refresh: bool = False) -> dict[str, list[np.ndarray]]:
    """{set name: [P batch, ...]}: SmolLM2's heads one batch per layer, its hidden states, MiniLM's heads."""
    if CACHE.exists() and not refresh:
        z = np.load(CACHE)
        sets: dict[str, list[np.ndarray]] = {}
        for key in sorted(z.files, key=lambda k: (k.split(":")[0], int(k.split(":")[1]))):
            sets.setdefault(key.split(":")[0], []).append(z[key])
        return sets
    from tests.bench.bench_tsne import texts_by_size
    from tests.bench.bench_tsne_parts import _forward
    from workers.analyses.tsne.affinities import head_affinities
    from workers.analyses.tsne.hidden import affinities_of_states
    from workers.models import load_model, run_text

    att, hidden = _forward(452)
    sets = {"smollm2-heads": [head_affinities(att[layer].astype(np.float64)) for layer in range(att.shape[0])],
            "smollm2-hidden": [affinities_of_states(hidden, perplexity=20.0)]}  # fmt: skip
    loaded = load_model("minilm", device="cpu")
    texts = texts_by_size(loaded, [128, 512])
    for n, text in texts.items():
        run = run_text(loaded, text)
        sets[f"minilm-{n}"] = [head_affinities(run.attentions).reshape(-1, n, n)]
    np.savez(CACHE, **{f"{k}:{i}": p for k, ps in sets.items() for i, p in enumerate(ps)})
    return sets


def run_variant(sets, starts, overrides: dict) -> dict:
    """{set: {"kl": [heads], "iters": [heads], "cpu": s}} for one schedule."""
    from workers.analyses.tsne.affinities import kl_divergence
    from workers.analyses.tsne.host_engine import fast_optimize
    from workers.analyses.tsne.options import FastSchedule, TSNEOptions

    schedule, options = FastSchedule(**overrides), TSNEOptions()
    out = {}
    for name, ps in sets.items():
        kl, iters, cpu = [], [], 0.0
        for p, y0 in zip(ps, starts[name], strict=True):
            c0 = time.process_time()
            emb, used = fast_optimize(p, y0, options=options, schedule=schedule)
            cpu += time.process_time() - c0
            kl += kl_divergence(p, emb).tolist()
            iters += used.tolist()
        out[name] = {"kl": kl, "iters": iters, "cpu": cpu}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument(
        "--noise-seeds", default="1,2", help="base with these seeds against base with seed 0"
    )
    parser.add_argument(
        "--refresh", action="store_true", help="recompute P (else read the cached P)"
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    from workers.analyses.tsne.host_engine import fast_optimize, torch_threads_kept
    from workers.analyses.tsne.initialization import fast_spectral_init
    from workers.analyses.tsne.options import TSNEOptions

    seeds = [int(s) for s in args.seeds.split(",")]
    noise_seeds = [int(s) for s in args.noise_seeds.split(",") if s]
    names = [v for v in args.variants.split(",") if v]
    if "base" not in names:
        names.insert(0, "base")
    with torch_threads_kept():
        sets = load_sets(args.refresh)
        warm = sets["minilm-128"][0][:2]
        fast_optimize(
            warm, fast_spectral_init(warm), options=TSNEOptions(n_iter=30)
        )  # compile / load
        all_seeds = sorted({*seeds, *noise_seeds, 0})
        starts = {
            s: {k: [fast_spectral_init(p, seed=s) for p in ps] for k, ps in sets.items()}
            for s in all_seeds
        }
        load0 = os.getloadavg()[0]
        results: dict = {}
        for seed in all_seeds:
            results[("base", seed)] = run_variant(sets, starts[seed], VARIANTS["base"])
        for name in names:
            if name == "base":
                continue
            for seed in seeds:
                results[(name, seed)] = run_variant(sets, starts[seed], VARIANTS[name])
    print(f"load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; seeds {seeds}; "
          f"noise: base seed {noise_seeds} / base seed 0")  # fmt: skip
    rows = []
    header = f"{'variant':32s} {'set':15s} {'iters mean/min/max':>20s} {'iters x':>8s} {'CPU x':>7s} {'KL ratio mean / min / max':>26s}"
    print(header)
    groups = [(f"noise (base seed {s})", [("base", s)], 0) for s in noise_seeds]
    groups += [(name, [(name, s) for s in seeds], None) for name in names]
    for label, keys, ref_seed in groups:
        for set_name in [*sets, "all"]:
            set_names = list(sets) if set_name == "all" else [set_name]
            kl_r, iters, base_iters, cpu, base_cpu = [], [], [], 0.0, 0.0
            for name, seed in keys:
                ref = results[("base", seed if ref_seed is None else ref_seed)]
                got = results[(name, seed)]
                for sn in set_names:
                    kl_r += (np.array(got[sn]["kl"]) / np.array(ref[sn]["kl"])).tolist()
                    iters += got[sn]["iters"]
                    base_iters += ref[sn]["iters"]
                    cpu += got[sn]["cpu"]
                    base_cpu += ref[sn]["cpu"]
            kl_r, iters = np.array(kl_r), np.array(iters)
            row = {"variant": label, "set": set_name, "iters_mean": iters.mean(), "iters_min": int(iters.min()),
                   "iters_max": int(iters.max()), "iters_x": iters.mean() / np.mean(base_iters),
                   "cpu_x": cpu / base_cpu, "kl_mean": kl_r.mean(), "kl_min": kl_r.min(), "kl_max": kl_r.max()}  # fmt: skip
            rows.append(row)
            print(f"{label:32s} {set_name:15s} {iters.mean():8.1f} {iters.min():5d} {iters.max():5d} "
                  f"{row['iters_x']:8.3f} {row['cpu_x']:7.3f} {kl_r.mean():10.4f} {kl_r.min():7.3f} {kl_r.max():7.3f}")  # fmt: skip
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {"rows": rows, "load": load0, "variants": {n: VARIANTS[n] for n in names}},
                fh,
                indent=1,
            )


if __name__ == "__main__":
    main()
