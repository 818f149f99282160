"""Benchmark: all-heads attention t-SNE, openTSNE head by head vs the batched and fast engines.

Run from the repository root (not part of the default test run)::

    python -m tests.bench.bench_tsne [--sizes 128,256,512] [--quick] [--heads N] [--json out.json]

For each size n the real MiniLM reads the first n tokens of ``bench_text.txt`` (the demo text
followed by paragraphs of the thesis), P is formed for every head (docs/analyses.md#attention-head-t-sne), and each engine
embeds all heads through ``embed_affinities`` — spectral start, optimisation and the exact
float64 KL included, as the service runs it. Times are ratios against openTSNE measured in the
same run; KL ratios compare the exact KL of each head's returned map. Peak memory is the rise of
the process's resident set during one engine's run. Then one head on demand at the largest n.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ENGINES = ("opentsne", "batched", "fast")


def _status(key: str) -> int:
    """A ``/proc/self/status`` field in KiB (0 where unavailable)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _reset_peak() -> bool:
    """Reset the resident-set high-water mark (Linux ``clear_refs``); False if unsupported."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def texts_by_size(loaded, sizes: list[int], *, text: str | None = None) -> dict[int, str]:
    """Prefixes of the bench text (or ``text``) that the model's tokenizer cuts into exactly n tokens."""
    from workers.models import encode

    text = text if text is not None else (HERE / "bench_text.txt").read_text()
    enc = encode(loaded, text, truncate=True)
    out = {}
    for n in sizes:
        if n - 2 > len(enc.offsets) - 1:
            raise SystemExit(f"the bench text has fewer than {n} tokens")
        out[n] = text[: enc.offsets[n - 2][1]]  # n - 2 word pieces + [CLS] + [SEP]
    return out


def timed_run(p: np.ndarray, engine: str, *, n_jobs: int) -> dict:
    """Embed every P with one engine; seconds, exact KL per head and peak memory (MiB)."""
    from workers.analyses.tsne import TSNEOptions, embed_affinities

    options = TSNEOptions(engine=engine, n_jobs=n_jobs)
    tracked = _reset_peak()
    before = _status("VmRSS")
    start = time.perf_counter()
    res = embed_affinities(p, options=options)
    seconds = time.perf_counter() - start
    peak = (_status("VmHWM") - before) / 1024 if tracked else float("nan")
    return {"seconds": seconds, "kl": np.atleast_1d(res.kl).tolist(), "peak_mib": peak}


def fast_parts(p: np.ndarray) -> dict[str, float]:
    """Seconds of the fast engine's parts (start, optimisation, exact KL) and its iterations."""
    from workers.analyses.tsne import TSNEOptions
    from workers.analyses.tsne.affinities import kl_divergence
    from workers.analyses.tsne.host_engine import fast_optimize
    from workers.analyses.tsne.initialization import fast_spectral_init

    t0 = time.perf_counter()
    y0 = fast_spectral_init(p)
    t1 = time.perf_counter()
    emb, used = fast_optimize(p, y0, options=TSNEOptions(engine="fast"))
    t2 = time.perf_counter()
    kl_divergence(p, emb)
    t3 = time.perf_counter()
    return {
        "start_s": t1 - t0,
        "optimise_s": t2 - t1,
        "kl_s": t3 - t2,
        "mean_iterations": float(used.mean()),
    }


def warm_up() -> float:
    """Compile (or load from numba's cache) the fast kernels; seconds."""
    from workers.analyses.tsne import TSNEOptions, embed_affinities

    rng = np.random.default_rng(0)
    a = rng.random((2, 16, 16))
    p = a + a.transpose(0, 2, 1)
    p[:, np.arange(16), np.arange(16)] = 0
    p /= p.sum(axis=(1, 2), keepdims=True)
    start = time.perf_counter()
    embed_affinities(p, options=TSNEOptions(engine="fast", n_iter=10, early_exaggeration_iter=10))
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", default="128,256,512", help="token counts, comma-separated")
    ap.add_argument("--quick", action="store_true", help="only the first 12 heads (layer 0)")
    ap.add_argument("--heads", type=int, default=None, help="only the first N heads (layer-major)")
    ap.add_argument(
        "--engines", default=",".join(ENGINES), help="engines to run (openTSNE is the reference)"
    )
    ap.add_argument("--n-jobs", type=int, default=2, help="openTSNE threads (default 2)")
    ap.add_argument("--repeats", type=int, default=5, help="timings of the one-head run (median)")
    ap.add_argument("--json", type=Path, default=None, help="also write every number here")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    import torch

    from workers.analyses.tsne.affinities import head_affinities
    from workers.analyses.tsne.options import numba_available
    from workers.models import load_model, run_text

    sizes = [int(s) for s in args.sizes.split(",") if s]
    engines = [e for e in args.engines.split(",") if e]
    limit = 12 if args.quick else args.heads
    print(
        f"# headscope t-SNE benchmark: torch {torch.__version__}, {torch.get_num_threads()} torch threads, "
        f"{os.cpu_count()} CPUs, numba {'yes' if numba_available() else 'no'}, load {os.getloadavg()[0]:.2f}"
    )
    if os.getloadavg()[0] > 0.5 * (os.cpu_count() or 1):
        print(
            "# warning: the machine is busy; openTSNE with n_jobs=2 slows down far more than the "
            "other engines when its threads share cores (10-30x measured): compare with --n-jobs 1 "
            "or rerun on a quiet machine"
        )
    print(f"# fast engine warm-up (numba compile or cache load): {warm_up():.2f} s")
    loaded = load_model("minilm", device="cpu")
    texts = texts_by_size(loaded, sizes)
    report: dict = {"sizes": {}, "load_start": os.getloadavg()[0]}
    header = (
        f"{'n':>4} {'heads':>5} | "
        + " ".join(f"{e + ' s':>11}" for e in engines)
        + " | "
        + " ".join(f"{'x ' + e:>10}" for e in engines if e != "opentsne")
        + " | "
        + " ".join(f"{'KL ' + e:>18}" for e in engines if e != "opentsne")
        + " | peak MiB "
        + "/".join(engines)
    )
    print(header)
    p_last = None
    for n in sizes:
        run = run_text(loaded, texts[n])
        p = head_affinities(run.attentions).reshape(-1, n, n)  # [layer * head, n, n]
        if limit:
            p = p[:limit]
        p_last = p
        res = {e: timed_run(p, e, n_jobs=args.n_jobs) for e in engines}
        row = f"{n:>4} {p.shape[0]:>5} | " + " ".join(
            f"{res[e]['seconds']:>11.2f}" for e in engines
        )
        if "opentsne" in res:
            ref = res["opentsne"]
            kl_ref = np.asarray(ref["kl"])
            for e in engines:
                if e == "opentsne":
                    continue
                kl = np.asarray(res[e]["kl"])
                res[e]["speedup"] = ref["seconds"] / res[e]["seconds"]
                res[e]["kl_mean_ratio"] = float(kl.mean() / kl_ref.mean())
                res[e]["kl_worst_ratio"] = float((kl / kl_ref).max())
                res[e]["kl_median_ratio"] = float(np.median(kl / kl_ref))
            row += " | " + " ".join(
                f"{res[e]['speedup']:>9.1f}x" for e in engines if e != "opentsne"
            )
            row += " | " + " ".join(
                f"mean {res[e]['kl_mean_ratio']:.3f} max {res[e]['kl_worst_ratio']:.2f}".rjust(18)
                for e in engines
                if e != "opentsne"
            )
        row += " | " + "/".join(f"{res[e]['peak_mib']:.0f}" for e in engines)
        print(row, flush=True)
        if "fast" in engines:
            res["fast"]["parts"] = fast_parts(p)
            print(
                "       fast engine parts: "
                + ", ".join(f"{k} {v:.2f}" for k, v in res["fast"]["parts"].items()),
                flush=True,
            )
        report["sizes"][n] = res

    # one head on demand at the largest size: the head with the highest openTSNE cost is as good as any
    if p_last is not None and "fast" in engines:
        n = p_last.shape[-1]
        one = p_last[p_last.shape[0] // 2]
        fast_s = statistics.median(
            timed_run(one, "fast", n_jobs=1)["seconds"] for _ in range(args.repeats)
        )
        line = f"# one head on demand at n={n}: fast {fast_s:.3f} s (median of {args.repeats})"
        report["one_head"] = {"n": n, "fast_s": fast_s}
        if "opentsne" in engines:
            ots = timed_run(one, "opentsne", n_jobs=args.n_jobs)["seconds"]
            line += f", openTSNE {ots:.3f} s, {ots / fast_s:.1f}x"
            report["one_head"]["opentsne_s"] = ots
        print(line)
    report["load_end"] = os.getloadavg()[0]
    print(f"# load average at the end: {report['load_end']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
