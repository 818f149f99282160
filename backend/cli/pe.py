"""``headscope pe``, ``lst-train`` and ``lst-compare``: positional-encoding commands."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _catalogue_dir(model: str) -> Path:
    from workers.models import get_catalogue

    return Path(get_catalogue().get(model).resolve())


def cmd_pe(args: argparse.Namespace) -> int:
    """Read a PE from one or more checkpoints and write the PE report as JSON."""
    from workers.analyses.positional.encodings import (
        grid_partition,
        make_reference,
        parse_grid,
        parse_partition_csv,
        pe_sweep,
    )
    from workers.core.errors import BadFileError, HeadscopeError
    from workers.models.checkpoints import MAX_CHECKPOINT_BYTES, list_candidates, read_tensor

    # files get the upload limits; a catalogue model's directory is the operator's, so no size limit
    sources: list[tuple[Path, int | None, str]] = [
        (Path(c), MAX_CHECKPOINT_BYTES, c) for c in args.checkpoint or []
    ]
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
    reference = None
    ref_info: dict[str, Any] = {"kind": "none"}
    if args.reference_checkpoint:
        rpath = Path(args.reference_checkpoint)
        if not rpath.exists():
            raise BadFileError(f"reference checkpoint not found: {rpath}")
        rname = args.reference_tensor or list_candidates(rpath)[0]["name"]
        reference = read_tensor(rpath, rname)
        ref_info = {"kind": "checkpoint", "checkpoint": str(rpath), "tensor": rname}
    elif args.reference != "none":
        reference = make_reference(
            args.reference, n=n, d=d, grid=grid, sigma=args.sigma, seed=args.seed
        )
        ref_info = {"kind": args.reference, "n": n, "d": d}
        if args.reference == "2d-fixed":
            ref_info["grid"] = list(grid) if grid else None
        if args.reference == "random":
            ref_info.update(sigma=args.sigma, seed=args.seed)
    partition = None
    part_info: dict[str, Any] = {"kind": "none"}
    if args.partition in ("rows", "columns"):
        if grid is None:
            side = int(round(n**0.5))
            if side * side != n:
                raise HeadscopeError(f"{n} positions are not a square grid; give --grid HxW")
            grid = (side, side)
        if grid[0] * grid[1] != n:
            raise HeadscopeError(
                f"a {grid[0]}x{grid[1]} grid has {grid[0] * grid[1]} cells but the PE has {n} positions"
            )
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
            raise HeadscopeError(
                f"{label} has {E.shape[0]} positions but {items[0][0]} has {n}; a sweep needs equal counts"
            )
    sweep = pe_sweep(items, reference=reference, partition=partition, metric=args.metric)
    reports = [
        {**m, **{k: v for k, v in r.items() if k != "name"}}
        for m, r in zip(meta, sweep["checkpoints"], strict=True)
    ]
    if len(reports) == 1:
        out: dict[str, Any] = {**reports[0], "reference": ref_info, "partition": part_info}
    else:
        out = {
            "checkpoints": reports,
            "summary": sweep["summary"],
            "reference": ref_info,
            "partition": part_info,
        }
    blob = json.dumps(out, separators=(",", ":"))
    if args.out in (None, "-"):
        sys.stdout.write(blob + "\n")
    else:
        Path(args.out).write_text(blob)
        for row in sweep["summary"]:
            parts = [f"{k}={v:.4g}" for k, v in row.items() if isinstance(v, float)]
            print(
                f"{row['name']}: " + (" ".join(parts) or "no reference or partition"),
                file=sys.stderr,
            )
        print(f"wrote {args.out} ({len(blob) / 1024:.0f} KiB)", file=sys.stderr)
    return 0


def cmd_lst_train(args: argparse.Namespace) -> int:
    """Train a Latin Square Task model on CPU and write DIR/model.safetensors, config.json, metrics.json."""
    import torch

    from backend.cli.progress import StderrProgress
    from workers.analyses.positional.lst.train import LSTConfig, train_lst

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

    from workers.analyses.positional.lst.compare import compare_runs
    from workers.core.errors import BadFileError

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


def add_pe_commands(sub: Any) -> None:
    """Register the PE subcommands on the ``headscope`` subparsers."""
    p = sub.add_parser("pe", help="analyse a learned positional encoding and write JSON")
    p.add_argument(
        "--checkpoint",
        action="append",
        help="safetensors/.npy/.npz/.pt/.bin file or HF model directory; repeat for a sweep",
    )
    p.add_argument(
        "--model", help="a catalogue model instead of a file (e.g. minilm: its position_embeddings)"
    )
    p.add_argument("--tensor", help="tensor name (default: the best-ranked candidate)")
    p.add_argument("--list", action="store_true", help="only list the candidate tensors")
    p.add_argument(
        "--reference", choices=["none", "1d-fixed", "2d-fixed", "random"], default="none"
    )
    p.add_argument("--grid", help="HxW grid of the positions, e.g. 4x4 (2d-fixed, rows/columns)")
    p.add_argument("--sigma", type=float, default=1.0, help="random reference: standard deviation")
    p.add_argument("--seed", type=int, default=0, help="random reference: seed")
    p.add_argument("--reference-checkpoint", help="another checkpoint's PE as the reference")
    p.add_argument("--reference-tensor", help="tensor name in --reference-checkpoint")
    p.add_argument(
        "--partition", help="CSV file with header position,label; or rows / columns of --grid"
    )
    p.add_argument("--metric", choices=["euclidean", "cosine"], default="euclidean")
    p.add_argument("--out", help="output JSON path (default: stdout)")
    p.set_defaults(func=cmd_pe)

    t = sub.add_parser(
        "lst-train", help="train a Latin Square Task model and write a PE checkpoint"
    )
    t.add_argument("--pe", choices=["nope", "1d-fixed", "2d-fixed", "learned"], required=True)
    t.add_argument(
        "--sigma", type=float, default=0.2, help="learned PE initialised from N(0, sigma^2)"
    )
    t.add_argument("--epochs", type=int, default=10)
    t.add_argument("--seed", type=int, default=0, help="model initialisation and batch order")
    t.add_argument(
        "--data-seed", type=int, default=0, help="puzzles (keep it equal to compare models)"
    )
    t.add_argument("--n-train", type=int, default=8000)
    t.add_argument("--n-val", type=int, default=1000)
    t.add_argument("--batch-size", type=int, default=64)
    t.add_argument("--lr", type=float, default=1e-4)
    t.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    t.add_argument("--device", default="cpu")
    t.add_argument("--out", required=True, help="output directory")
    t.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    t.set_defaults(func=cmd_lst_train)

    c = sub.add_parser(
        "lst-compare", help="compare lst-train runs: accuracy, PE vs 2d-fixed, attention agreement"
    )
    c.add_argument("runs", nargs="+", help="lst-train output directories")
    c.add_argument(
        "--reference-run", help="run whose attention maps are the reference (e.g. the 2d-fixed one)"
    )
    c.add_argument(
        "--n-puzzles", type=int, default=500, help="validation puzzles for the attention comparison"
    )
    c.add_argument("--threads", type=int, default=None)
    c.add_argument("--out", help="JSON output path")
    c.set_defaults(func=cmd_lst_compare)
