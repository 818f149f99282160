"""The ``headscope`` command.

Subcommands: ``analyze`` (one analysis of a text, JSON out), ``demo`` (the demo text, a summary on
stdout), ``pe`` (a learned positional encoding, JSON out), ``lst-train`` (train a Latin Square Task
model and write a checkpoint). Heavy imports (torch, transformers) happen inside the commands, so ``headscope --help``
is instant and the backend package never imports torch at import time.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

ANALYSES = ["max-attention", "head-tsne", "hidden-tsne", "word-tsne", "robustness", "decomposition"]


class StderrProgress:
    """A one-line progress bar on stderr, drawn only for work that lasts over a second."""

    def __init__(self, label: str, *, enabled: bool = True):
        self.label = label
        self.enabled = enabled
        self.start = time.perf_counter()
        self.drawn = False
        self.last = 0.0

    def __call__(self, fraction: float, message: str) -> None:
        now = time.perf_counter()
        if not self.enabled or now - self.start < 1.0 or (now - self.last < 0.1 and fraction < 1):
            return
        self.last = now
        width = 30
        filled = int(round(width * max(0.0, min(1.0, fraction))))
        bar = "#" * filled + "-" * (width - filled)
        sys.stderr.write(f"\r{self.label} [{bar}] {fraction * 100:5.1f}% {now - self.start:6.1f}s {message[:40]:<40}")
        sys.stderr.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            sys.stderr.write("\n")
            sys.stderr.flush()


def _layer_arg(value: str) -> int | str:
    if value == "all":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'all', got {value!r}") from None


def _read_text(args: argparse.Namespace) -> str:
    from workers.errors import BadFileError

    if args.text is not None:
        return args.text
    if args.text_file is None:
        from workers.data import demo_text

        return demo_text()
    path = Path(args.text_file)
    try:
        data = sys.stdin.read() if args.text_file == "-" else path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadFileError(f"text file not found: {path}") from None
    except UnicodeDecodeError:
        raise BadFileError(f"text file is not UTF-8 text: {path}") from None
    except OSError as exc:
        raise BadFileError(f"cannot read text file {path}: {exc.strerror}") from None
    return data


def _options(args: argparse.Namespace) -> dict[str, Any]:
    opts = {
        "truncate": args.truncate,
        "drop_special": args.drop_special,
        "layer": args.layer,
        "head": args.head,
        "engine": args.engine,
        "seed": args.seed,
        "restarts": args.restarts,
        "init": args.init,
        "perplexity": args.perplexity,
        "pooling": args.pooling,
        "fraction": args.fraction,
        "repeats": args.repeats,
        "dtype": args.dtype,
    }
    if args.n_iter is not None:
        opts["n_iter"] = args.n_iter
    if args.early_exaggeration_iter is not None:
        opts["early_exaggeration_iter"] = args.early_exaggeration_iter
    return opts


def flatten(result: dict[str, Any], kind: str) -> dict[str, Any]:
    """The CLI's JSON: the common keys plus the one analysis' section at top level."""
    section = result[kind]
    common = {k: v for k, v in result.items() if k not in ANALYSES}
    timings = {**common.pop("timings", {}), **section.get("timings", {})}
    return {**common, "analysis": kind, **section, "timings": timings}


def cmd_analyze(args: argparse.Namespace) -> int:
    from workers.analysis.pipeline import analyze
    from workers.models import load_model

    text = _read_text(args)
    bar = StderrProgress(args.analysis, enabled=not args.quiet)
    start = time.perf_counter()
    loaded = load_model(args.model, dtype=args.dtype, device=args.device)
    load_s = time.perf_counter() - start
    try:
        result = analyze(loaded, text, [args.analysis], _options(args), progress=bar)
    finally:
        bar.close()
    out = flatten(result, args.analysis)
    out["timings"]["load_s"] = load_s
    blob = json.dumps(out, indent=None, separators=(",", ":"))
    if args.out in (None, "-"):
        sys.stdout.write(blob + "\n")
    else:
        Path(args.out).write_text(blob)
        print(f"wrote {args.out} ({len(blob) / 1024:.0f} KiB)", file=sys.stderr)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Max attention and one head's t-SNE on the demo text, summarised on stdout."""
    import numpy as np

    from workers.analysis.pipeline import analyze
    from workers.data import demo_text
    from workers.models import load_model

    text = demo_text()
    bar = StderrProgress("demo")
    loaded = load_model(args.model)
    opts = {"layer": args.layer, "head": args.head}
    try:
        res = analyze(loaded, text, ["max-attention", "head-tsne", "hidden-tsne"], opts, progress=bar)
    finally:
        bar.close()
    tokens = res["tokens"]
    ma = np.asarray(res["max-attention"]["max_attention"])  # [layer, head, token]
    print(f"model {res['model']} ({res['family']}): {res['n_layers']} layers x {res['n_heads']} heads")
    print(f"text: {len(text)} characters, {len(tokens)} tokens")
    print("most-attended token per layer (max over heads of max attention):")
    for layer in range(ma.shape[0]):
        top = np.argsort(-ma[layer].max(axis=0))[:5]
        print(f"  layer {layer}: " + ", ".join(f"{tokens[t]}({ma[layer].max(axis=0)[t]:.2f})" for t in top))
    ht, hs = res["head-tsne"], res["hidden-tsne"]
    print(
        f"attention-head t-SNE layer {ht['layers'][0]} head {ht['heads'][0]}: KL {ht['kl'][0]:.3f} "
        f"({ht['timings']['tsne_s']:.1f} s, {ht['engine']} engine)"
    )
    print(f"standard t-SNE of hidden states at layer {hs['layers'][0]}: KL {hs['kl'][0]:.3f}")
    emb = np.asarray(ht["embedding"])
    centre = emb.mean(axis=0)
    near = np.argsort(((emb - centre) ** 2).sum(axis=1))[:8]
    print("tokens nearest the centre of the head's map: " + " ".join(tokens[i] for i in near))
    return 0


def _catalogue_dir(model: str) -> Path:
    from workers.models import get_catalogue

    return Path(get_catalogue().get(model).resolve())


def cmd_pe(args: argparse.Namespace) -> int:
    """Read a PE from one or more checkpoints and write the PE report as JSON."""
    from workers.analysis.positional import (
        grid_partition,
        make_reference,
        parse_grid,
        parse_partition_csv,
        pe_sweep,
    )
    from workers.errors import BadFileError, HeadscopeError
    from workers.models.checkpoints import MAX_CHECKPOINT_BYTES, list_candidates, read_tensor

    # files get the upload limits; a catalogue model's directory is the operator's, so no size limit
    sources = [(Path(c), MAX_CHECKPOINT_BYTES, c) for c in args.checkpoint or []]
    if args.model:
        sources.append((_catalogue_dir(args.model), None, f"model:{args.model}"))
    if not sources:
        raise HeadscopeError("give --checkpoint FILE (repeat it for a sweep) or --model NAME")
    items, meta = [], []
    for path, max_bytes, label in sources:
        if not path.exists():
            raise BadFileError(f"checkpoint not found: {path}")
        candidates = list_candidates(path, max_bytes=max_bytes)
        name = args.tensor or candidates[0]["name"]
        items.append((label, read_tensor(path, name, max_bytes=max_bytes)))
        meta.append({"checkpoint": label, "tensor": name, "candidates": candidates})
    if args.list:
        sys.stdout.write(json.dumps(meta if len(meta) > 1 else meta[0], indent=1) + "\n")
        return 0
    n, d = items[0][1].shape
    grid = parse_grid(args.grid) if args.grid else None
    reference, ref_info = None, {"kind": "none"}
    if args.reference_checkpoint:
        rpath = Path(args.reference_checkpoint)
        if not rpath.exists():
            raise BadFileError(f"reference checkpoint not found: {rpath}")
        rname = args.reference_tensor or list_candidates(rpath)[0]["name"]
        reference = read_tensor(rpath, rname)
        ref_info = {"kind": "checkpoint", "checkpoint": str(rpath), "tensor": rname}
    elif args.reference != "none":
        reference = make_reference(args.reference, n=n, d=d, grid=grid, sigma=args.sigma, seed=args.seed)
        ref_info = {"kind": args.reference, "n": n, "d": d}
        if args.reference == "2d-fixed":
            ref_info["grid"] = list(grid) if grid else None
        if args.reference == "random":
            ref_info.update(sigma=args.sigma, seed=args.seed)
    partition, part_info = None, {"kind": "none"}
    if args.partition in ("rows", "columns"):
        if grid is None:
            side = int(round(n**0.5))
            if side * side != n:
                raise HeadscopeError(f"{n} positions are not a square grid; give --grid HxW")
            grid = (side, side)
        if grid[0] * grid[1] != n:
            raise HeadscopeError(f"a {grid[0]}x{grid[1]} grid has {grid[0] * grid[1]} cells but the PE has {n} positions")
        partition = grid_partition(args.partition, grid)
        part_info = {"kind": args.partition, "grid": list(grid)}
    elif args.partition:
        try:
            text = Path(args.partition).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BadFileError(f"cannot read partition CSV {args.partition}: {exc}") from None
        partition = parse_partition_csv(text, n)
        part_info = {"kind": "csv", "file": args.partition}
    for label, E in items[1:]:
        if E.shape[0] != n:
            raise HeadscopeError(f"{label} has {E.shape[0]} positions but {items[0][0]} has {n}; a sweep needs equal counts")
    sweep = pe_sweep(items, reference=reference, partition=partition, metric=args.metric)
    reports = [{**m, **{k: v for k, v in r.items() if k != "name"}} for m, r in zip(meta, sweep["checkpoints"], strict=True)]
    if len(reports) == 1:
        out: dict[str, Any] = {**reports[0], "reference": ref_info, "partition": part_info}
    else:
        out = {"checkpoints": reports, "summary": sweep["summary"], "reference": ref_info, "partition": part_info}
    blob = json.dumps(out, separators=(",", ":"))
    if args.out in (None, "-"):
        sys.stdout.write(blob + "\n")
    else:
        Path(args.out).write_text(blob)
        for row in sweep["summary"]:
            parts = [f"{k}={v:.4g}" for k, v in row.items() if isinstance(v, float)]
            print(f"{row['name']}: " + (" ".join(parts) or "no reference or partition"), file=sys.stderr)
        print(f"wrote {args.out} ({len(blob) / 1024:.0f} KiB)", file=sys.stderr)
    return 0


def cmd_lst_train(args: argparse.Namespace) -> int:
    """Train a Latin Square Task model on CPU and write DIR/model.safetensors, config.json, metrics.json."""
    import torch

    from workers.lst.train import LSTConfig, train_lst

    if args.threads:
        torch.set_num_threads(args.threads)
    config = LSTConfig(
        pe=args.pe, sigma=args.sigma, epochs=args.epochs, seed=args.seed, data_seed=args.data_seed,
        n_train=args.n_train, n_val=args.n_val, batch_size=args.batch_size, lr=args.lr,
    )  # fmt: skip
    bar = StderrProgress(f"lst-train {args.pe}", enabled=not args.quiet)
    try:
        metrics = train_lst(config, args.out, device=args.device, progress=bar)
    finally:
        bar.close()
    print(
        f"{args.pe}{f' sigma={args.sigma}' if args.pe == 'learned' else ''}: {args.epochs} epochs in "
        f"{metrics['seconds'][-1]:.0f} s; train accuracy {metrics['train_accuracy'][-1]:.3f}, "
        f"validation accuracy {metrics['val_accuracy'][-1]:.3f}; wrote {args.out}",
        file=sys.stderr,
    )
    return 0


def cmd_lst_compare(args: argparse.Namespace) -> int:
    """Accuracy, PE-to-2d-fixed distances and attention agreement of finished LST runs."""
    import torch

    from workers.errors import BadFileError
    from workers.lst.compare import compare_runs

    torch.set_num_threads(args.threads or torch.get_num_threads())
    for run in [*args.runs, *([args.reference_run] if args.reference_run else [])]:
        if not (Path(run) / "config.json").exists():
            raise BadFileError(f"{run} is not an lst-train output directory (no config.json)")
    result = compare_runs(args.runs, reference_run=args.reference_run, n_puzzles=args.n_puzzles)
    header = f"{'run':<28} {'val acc':>7} {'|EΩ-R| init':>12} {'|EΩ-R|':>8} {'norm. init':>10} {'norm.':>6} {'Q rows':>7} {'att cos':>7} {'att JSD':>7}"
    print(header)
    for row in result["runs"]:
        init = row["pe_init"] or {}
        fin = row["pe_final"]
        att = row["attention"] or {}

        def num(v: Any, width: int, fmt: str = ".3f") -> str:
            return f"{v:>{width}{fmt}}" if isinstance(v, float) else f"{'-':>{width}}"

        print(
            f"{Path(row['run']).name:<28} {num(row['val_accuracy'], 7)} {num(init.get('procrustes_distance'), 12, '.2f')} "
            f"{num(fin['procrustes_distance'], 8, '.2f')} {num(init.get('procrustes_distance_normalised'), 10)} "
            f"{num(fin['procrustes_distance_normalised'], 6)} {num(fin['modularity_rows'], 7, '.4f')} "
            f"{num(att.get('cosine'), 7)} {num(att.get('jsd'), 7)}"
        )
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="headscope", description="Look inside transformer models.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    a = sub.add_parser("analyze", help="run one analysis on a text and write JSON")
    a.add_argument("--model", default="minilm", help="catalogue name (default: minilm)")
    src = a.add_mutually_exclusive_group()
    src.add_argument("--text-file", help="UTF-8 text file ('-' = stdin); default: the demo text")
    src.add_argument("--text", help="the text itself")
    a.add_argument("--analysis", required=True, choices=ANALYSES)
    a.add_argument("--out", help="output JSON path (default: stdout)")
    a.add_argument("--layer", type=_layer_arg, default="all", help="layer index or 'all'")
    a.add_argument("--head", type=_layer_arg, default="all", help="head index or 'all'")
    a.add_argument("--engine", choices=["batched", "opentsne", "fast"], default=None)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--restarts", type=int, default=1, help="best-of-k t-SNE restarts")
    a.add_argument("--init", choices=["spectral", "random", "pca"], default="spectral")
    a.add_argument("--n-iter", type=int, default=None, help="t-SNE iterations after early exaggeration (750)")
    a.add_argument("--early-exaggeration-iter", type=int, default=None, help="(250)")
    a.add_argument("--perplexity", type=float, default=20.0, help="standard t-SNE perplexity")
    a.add_argument("--pooling", choices=["auto", "first", "last", "mean"], default="auto")
    a.add_argument("--fraction", type=float, default=0.05, help="robustness: share of tokens replaced")
    a.add_argument("--repeats", type=int, default=10, help="robustness: runs per condition")
    a.add_argument("--drop-special", action="store_true", help="leave special tokens out")
    a.add_argument("--truncate", action="store_true", help="cut over-long texts instead of failing")
    a.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    a.add_argument("--device", default=None, help="cpu, cuda, cuda:1 (default: cuda if available)")
    a.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    a.set_defaults(func=cmd_analyze)

    d = sub.add_parser("demo", help="analyse the demo text and print a summary")
    d.add_argument("--model", default="minilm")
    d.add_argument("--layer", type=int, default=1)
    d.add_argument("--head", type=int, default=2)
    d.set_defaults(func=cmd_demo)

    p = sub.add_parser("pe", help="analyse a learned positional encoding and write JSON")
    p.add_argument("--checkpoint", action="append", help="safetensors/.npy/.npz/.pt/.bin file or HF model directory; repeat for a sweep")
    p.add_argument("--model", help="a catalogue model instead of a file (e.g. minilm: its position_embeddings)")
    p.add_argument("--tensor", help="tensor name (default: the best-ranked candidate)")
    p.add_argument("--list", action="store_true", help="only list the candidate tensors")
    p.add_argument("--reference", choices=["none", "1d-fixed", "2d-fixed", "random"], default="none")
    p.add_argument("--grid", help="HxW grid of the positions, e.g. 4x4 (2d-fixed, rows/columns)")
    p.add_argument("--sigma", type=float, default=1.0, help="random reference: standard deviation")
    p.add_argument("--seed", type=int, default=0, help="random reference: seed")
    p.add_argument("--reference-checkpoint", help="another checkpoint's PE as the reference")
    p.add_argument("--reference-tensor", help="tensor name in --reference-checkpoint")
    p.add_argument("--partition", help="CSV file with header position,label; or rows / columns of --grid")
    p.add_argument("--metric", choices=["euclidean", "cosine"], default="euclidean")
    p.add_argument("--out", help="output JSON path (default: stdout)")
    p.set_defaults(func=cmd_pe)

    t = sub.add_parser("lst-train", help="train a Latin Square Task model and write a PE checkpoint")
    t.add_argument("--pe", choices=["nope", "1d-fixed", "2d-fixed", "learned"], required=True)
    t.add_argument("--sigma", type=float, default=0.2, help="learned PE initialised from N(0, sigma^2)")
    t.add_argument("--epochs", type=int, default=10)
    t.add_argument("--seed", type=int, default=0, help="model initialisation and batch order")
    t.add_argument("--data-seed", type=int, default=0, help="puzzles (keep it equal to compare models)")
    t.add_argument("--n-train", type=int, default=8000)
    t.add_argument("--n-val", type=int, default=1000)
    t.add_argument("--batch-size", type=int, default=64)
    t.add_argument("--lr", type=float, default=1e-4)
    t.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    t.add_argument("--device", default="cpu")
    t.add_argument("--out", required=True, help="output directory")
    t.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    t.set_defaults(func=cmd_lst_train)

    c = sub.add_parser("lst-compare", help="compare lst-train runs: accuracy, PE vs 2d-fixed, attention agreement")
    c.add_argument("runs", nargs="+", help="lst-train output directories")
    c.add_argument("--reference-run", help="run whose attention maps are the reference (e.g. the 2d-fixed one)")
    c.add_argument("--n-puzzles", type=int, default=500, help="validation puzzles for the attention comparison")
    c.add_argument("--threads", type=int, default=None)
    c.add_argument("--out", help="JSON output path")
    c.set_defaults(func=cmd_lst_compare)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr)
    from workers.errors import HeadscopeError

    try:
        return int(args.func(args) or 0)
    except HeadscopeError as exc:
        print(f"headscope: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("headscope: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
