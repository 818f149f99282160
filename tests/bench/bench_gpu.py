"""Benchmark (issue 11): the fast engine's device path beside the CPU fast engine and openTSNE.

Run from the repository root (not part of the default test run)::

    PYTHONPATH=. python -m tests.bench.bench_gpu [--sizes 128,256,512] [--big] [--json out.json]

Rows, every one measured in the same run on the same machine:

- 72 real MiniLM heads at each n (the first n tokens of ``bench_text.txt``), and 144 heads at the
  largest n (two different texts of n tokens);
- one head on demand at the largest n (median of ``--repeats``);
- with ``--big``: 512 heads at n = 2048, P built from random attention-like matrices (causal softmax
  rows with a local band and a few sharp peaks, generated on the device): a Llama-1B-sized request.

Columns: seconds of the device engine (``gpu_tsne.embed_device``: P already on the device, as the
streamed pipeline builds it; spectral start, optimisation, exact float64 KL, results copied to the
host), of the CPU fast engine (numba) and of openTSNE (on ``--opentsne-heads`` heads sampled
evenly: its seconds are per sampled head, labelled so); speed ratios against both; the device
engine's KL over openTSNE's (mean and worst over the sampled heads) and over the CPU engine's.

Without CUDA the device column runs the same schedule with the torch round on the CPU and the
report says the GPU figures are unmeasured. On CUDA every row also times CUDA graphs on and off and
the kernel layouts (``--graphs``, ``--layouts``; ``gpu_kernels.layout`` picks one by default).
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

from tests.bench.bench_tsne import texts_by_size, warm_up


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_run(p_dev, *, graphs: bool = True, layout: str = "auto") -> dict:
    """The device engine on P already on the device; seconds until the results are on the host."""
    from workers.analyses.tsne import TSNEOptions
    from workers.analyses.tsne import gpu_engine as gpu_tsne

    os.environ["HEADSCOPE_CUDA_GRAPHS"] = "1" if graphs else "0"
    os.environ["HEADSCOPE_TSNE_LAYOUT"] = layout
    options = TSNEOptions(engine="fast", device=str(p_dev.device))
    _sync(p_dev.device)
    start = time.perf_counter()
    emb, kls = gpu_tsne.embed_device(p_dev, options=options)
    y, kl = gpu_tsne.best_restart(emb, kls)
    y, kl = y.cpu().numpy(), kl.cpu().numpy()
    return {"seconds": time.perf_counter() - start, "kl": kl, "embedding": y}


def variants(args, device) -> list[tuple[bool, str]]:
    """(CUDA graphs, kernel layout) pairs to time; the first is the reported 'device' column."""
    if device.type != "cuda":
        return [(False, "auto")]
    graphs = {"on": [True], "off": [False], "both": [True, False]}[args.graphs]
    layouts = ["auto", "fused", "wide"] if args.layouts == "all" else [args.layouts]
    return [(g, lay) for lay in layouts for g in graphs]


def cpu_run(p: np.ndarray, engine: str, *, n_jobs: int) -> dict:
    from workers.analyses.tsne import TSNEOptions, embed_affinities

    start = time.perf_counter()
    res = embed_affinities(p, options=TSNEOptions(engine=engine, device="cpu", n_jobs=n_jobs))
    return {"seconds": time.perf_counter() - start, "kl": np.atleast_1d(res.kl)}


def sample(count: int, k: int) -> np.ndarray:
    return np.unique(np.linspace(0, count - 1, max(1, min(k, count))).round().astype(int))


def compare(p_host, p_dev, label: str, args, report: dict, *, cpu_heads: int | None = None) -> None:
    """One row: the device engine on all heads; the CPU fast engine on all (or ``cpu_heads``
    sampled) heads; openTSNE on ``--opentsne-heads`` sampled heads."""
    batch = p_dev.shape[0]
    row: dict = {"heads": batch, "n": int(p_dev.shape[-1])}
    combos = variants(args, p_dev.device)
    timings = {}
    for graphs, lay in combos:
        device_run(
            p_dev[: min(batch, 2)], graphs=graphs, layout=lay
        )  # compile, warm the allocator: not timed
        timings[(graphs, lay)] = device_run(p_dev, graphs=graphs, layout=lay)
    row["device"] = timings[combos[0]]
    row["variants_s"] = {
        f"graphs={'on' if g else 'off'} layout={lay}": t["seconds"]
        for (g, lay), t in timings.items()
    }
    dev = row["device"]
    cpu_idx = np.arange(batch) if cpu_heads is None else sample(batch, cpu_heads)
    ots_idx = sample(batch, args.opentsne_heads)
    cpu = cpu_run(p_host(cpu_idx), "fast", n_jobs=1)
    ots = cpu_run(p_host(ots_idx), "opentsne", n_jobs=args.n_jobs)
    per_cpu = cpu["seconds"] / len(cpu_idx)
    per_ots = ots["seconds"] / len(ots_idx)
    row.update(
        device_s=dev["seconds"],
        cpu_fast_s=cpu["seconds"], cpu_fast_heads=len(cpu_idx),
        opentsne_s_per_head=per_ots, opentsne_heads=len(ots_idx),
        x_vs_cpu_fast=(per_cpu * batch) / dev["seconds"] if cpu_heads is None else per_cpu / (dev["seconds"] / batch),
        x_vs_opentsne_per_head=per_ots / (dev["seconds"] / batch),
        kl_vs_opentsne_mean=float(dev["kl"][ots_idx].mean() / ots["kl"].mean()),
        kl_vs_opentsne_worst=float((dev["kl"][ots_idx] / ots["kl"]).max()),
        kl_vs_cpu_fast_mean=float(dev["kl"][cpu_idx].mean() / cpu["kl"].mean()),
    )  # fmt: skip
    row.pop("device", None)
    cpu_note = "" if cpu_heads is None else f" ({len(cpu_idx)} heads)"
    print(
        f"{label:<26} | device {row['device_s']:8.3f} s | cpu fast {row['cpu_fast_s']:8.2f} s{cpu_note}"
        f" = {row['x_vs_cpu_fast']:6.1f}x per head | openTSNE {per_ots:7.2f} s/head ({len(ots_idx)} heads) "
        f"= {row['x_vs_opentsne_per_head']:7.1f}x per head | KL/openTSNE mean {row['kl_vs_opentsne_mean']:.3f} "
        f"worst {row['kl_vs_opentsne_worst']:.2f} | KL/cpu fast {row['kl_vs_cpu_fast_mean']:.3f}",
        flush=True,
    )
    if len(row["variants_s"]) > 1:
        print(
            " " * 27 + "| " + ", ".join(f"{k} {v:.4f} s" for k, v in row["variants_s"].items()),
            flush=True,
        )
    report["rows"][label] = row


def attention_like(heads, n: int, device):
    """Random causal attention-like maps [len(heads), n, n] float32 on the device, head ``h`` drawn
    from seed ``h`` (so any subset can be rebuilt): a local band, a few sharp peaks per row,
    softmax over the visible keys."""
    import torch

    i = torch.arange(n, device=device)
    band = -(i[:, None] - i[None, :]).abs().float() / 8.0
    causal = i[None, :] <= i[:, None]
    out = torch.empty(len(heads), n, n, dtype=torch.float32, device=device)
    for k, h in enumerate(heads):
        g = torch.Generator(device=device).manual_seed(int(h))
        logits = (
            band * (0.2 + (int(h) % 8) / 8) + torch.randn(n, n, generator=g, device=device) * 2.0
        )
        peaks = torch.rand(n, n, generator=g, device=device) < 4.0 / n
        out[k] = torch.softmax((logits + peaks * 6.0).masked_fill(~causal, -torch.inf), dim=-1)
    return out


def big_p(heads: int, n: int, device, chunk: int = 16):
    """P of ``heads`` attention-like maps, float32 on the device, built ``chunk`` heads at a time."""
    import torch

    from workers.analyses.tsne.gpu_engine import head_affinities_device

    out = torch.empty(heads, n, n, dtype=torch.float32, device=device)
    for s in range(0, heads, chunk):
        idx = list(range(s, min(heads, s + chunk)))
        out[s : s + len(idx)] = head_affinities_device(attention_like(idx, n, device))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", default="128,256,512", help="token counts of the 72-head rows")
    ap.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    ap.add_argument(
        "--opentsne-heads", type=int, default=8, help="heads openTSNE embeds per row (sampled)"
    )
    ap.add_argument("--n-jobs", type=int, default=None, help="openTSNE threads (default: all CPUs)")
    ap.add_argument("--repeats", type=int, default=5, help="timings of the one-head row (median)")
    ap.add_argument("--big", action="store_true", help="also 512 heads at n = 2048")
    ap.add_argument("--big-heads", type=int, default=512)
    ap.add_argument(
        "--big-n",
        type=int,
        default=2048,
        help="tokens of the big row (smaller: a smoke run on CPU)",
    )
    ap.add_argument(
        "--big-cpu-heads", type=int, default=16, help="heads of the big row the CPU engine embeds"
    )
    ap.add_argument(
        "--graphs", choices=("on", "off", "both"), default="both", help="CUDA graphs (CUDA only)"
    )
    ap.add_argument(
        "--layouts",
        choices=("auto", "fused", "wide", "all"),
        default="all",
        help="Triton kernel layouts to time (CUDA only; the first variant is the 'device' column)",
    )
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    args.n_jobs = args.n_jobs or os.cpu_count() or 1
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    import torch

    from workers.analyses.tsne.affinities import head_affinities
    from workers.analyses.tsne.gpu_engine import head_affinities_device
    from workers.analyses.tsne.options import triton_available
    from workers.models import load_model, run_text

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    kind = "triton" if device.type == "cuda" and triton_available() else "torch"
    print(
        f"# headscope GPU t-SNE benchmark: device {device} ({name}), round: {kind}, torch {torch.__version__}, "
        f"{os.cpu_count()} CPUs, openTSNE threads {args.n_jobs}, load {os.getloadavg()[0]:.2f}"
    )
    if device.type != "cuda":
        print(
            "# no CUDA device: the device column is the device-side schedule with torch rounds on this CPU;"
            " the GPU figures are unmeasured"
        )
    print(f"# CPU fast engine warm-up: {warm_up():.2f} s")
    report: dict = {"device": str(device), "device_name": name, "round": kind, "rows": {}}
    sizes = [int(s) for s in args.sizes.split(",") if s]
    loaded = load_model("minilm", device=str(device))
    texts = texts_by_size(loaded, sizes)
    for n in sizes:
        attn = torch.as_tensor(np.asarray(run_text(loaded, texts[n]).attentions)).to(
            device
        )  # [L, H, n, n]
        p_dev = head_affinities_device(attn.reshape(-1, n, n))

        def p_host(idx, attn=attn, n=n):
            return head_affinities(
                attn.reshape(-1, n, n)[torch.as_tensor(idx, device=device)].cpu().numpy()
            )

        compare(p_host, p_dev, f"72 MiniLM heads, n={n}", args, report)
        if n == max(sizes):
            # 144 heads: the same n tokens from further into the text
            full = (Path(__file__).parent / "bench_text.txt").read_text()
            other = texts_by_size(loaded, [n], text=full[len(texts[n]) :])[n]
            attn2 = torch.as_tensor(np.asarray(run_text(loaded, other).attentions)).to(device)
            both = torch.cat([attn.reshape(-1, n, n), attn2.reshape(-1, n, n)])
            p2 = head_affinities_device(both)

            def p_host2(idx, both=both):
                return head_affinities(both[torch.as_tensor(idx, device=device)].cpu().numpy())

            compare(p_host2, p2, f"144 MiniLM heads, n={n}", args, report)
            one = p_dev[p_dev.shape[0] // 2 : p_dev.shape[0] // 2 + 1]
            per_variant = {}
            for graphs, lay in variants(args, device):
                device_run(one, graphs=graphs, layout=lay)
                per_variant[f"graphs={'on' if graphs else 'off'} layout={lay}"] = statistics.median(
                    device_run(one, graphs=graphs, layout=lay)["seconds"]
                    for _ in range(args.repeats)
                )
            dev_s = next(iter(per_variant.values()))
            one_host = p_host([p_dev.shape[0] // 2])
            cpu_s = statistics.median(
                cpu_run(one_host, "fast", n_jobs=1)["seconds"] for _ in range(args.repeats)
            )
            ots_s = cpu_run(one_host, "opentsne", n_jobs=args.n_jobs)["seconds"]
            report["rows"][f"one head, n={n}"] = {"device_s": dev_s, "cpu_fast_s": cpu_s, "opentsne_s": ots_s,
                                                  "variants_s": per_variant}  # fmt: skip
            print(
                f"{'one head on demand, n=' + str(n):<26} | device {dev_s:8.4f} s | cpu fast {cpu_s:8.4f} s = "
                f"{cpu_s / dev_s:6.1f}x | openTSNE {ots_s:7.2f} s = {ots_s / dev_s:7.1f}x (medians of {args.repeats})"
            )
            if len(per_variant) > 1:
                print(" " * 27 + "| " + ", ".join(f"{k} {v:.4f} s" for k, v in per_variant.items()))
    if args.big:
        n, heads = args.big_n, args.big_heads
        p_dev = big_p(heads, n, device)  # float32 on the device: 8 GiB at 512 heads

        def p_big(idx):
            return head_affinities(attention_like(idx, n, device).cpu().numpy())

        compare(
            p_big,
            p_dev,
            f"{heads} heads, n={n} (random)",
            args,
            report,
            cpu_heads=args.big_cpu_heads,
        )
    report["load_end"] = os.getloadavg()[0]
    print(f"# load average at the end: {report['load_end']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
