"""``headscope lasf-train``: distil MiniLM's last layer into a LasF layer (docs/lasf.md)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

# paper mode's recipe, the shipped lasf-minilm-paper (docs/lasf.md, "Paper mode: a sweep"); stable: lasf-minilm's
PAPER = {
    "kernel": "identity",
    "init_scale": 0.1,
    "epochs": 12,
    "lr": 1e-3,
    "clip": 1.0,
    "weight_decay": 1.0,
}
STABLE = {
    "kernel": "identity",
    "init_scale": 1.0,
    "epochs": 4,
    "lr": 2e-3,
    "clip": None,
    "weight_decay": 0.01,
}


def cmd_lasf_train(args: argparse.Namespace) -> int:
    """Train LasF and the two baselines; write the checkpoint directory and print the metrics."""
    from backend.cli.progress import StderrProgress
    from workers.analyses.lasf.distil import distil
    from workers.analyses.lasf.train import TrainConfig

    paper = args.mode == "paper"
    default = PAPER if paper else STABLE
    given = {k: getattr(args, k) for k in default if getattr(args, k) is not None}
    if "clip" in given:
        given["clip"] = given["clip"] or None  # --clip 0: no clipping
    config = TrainConfig(
        mode=args.mode, residual=args.residual or ("none" if paper else "linear"),
        n_fields=args.fields, d_q=args.d_q, d_s=args.d_s, seed=args.seed,
        max_sentences=args.max_sentences or None, warmup=args.warmup, **{**default, **given},
    )  # fmt: skip
    bar = StderrProgress(f"lasf-train {args.mode}", enabled=not args.quiet)
    try:
        out = distil(config, args.out, cache_dir=args.cache_dir, progress=bar, threads=args.threads)
    finally:
        bar.close()
    t = out["timing"]
    print(
        f"{args.mode} LasF ({config.kernel} kernel, residual {config.residual}, {out['parameters']:,} parameters); "
        f"{out['corpus']['train']} train sentences, {out['corpus']['train_tokens']} tokens; "
        f"{t['wall_s']:.0f} s wall, {t['cpu_s']:.0f} s CPU",
        file=sys.stderr,
    )
    print(f"{'held-out (test)':<16} {'R^2':>7} {'top-1':>7} {'rho':>7}", file=sys.stderr)
    for name, m in out["metrics"]["test"].items():
        print(f"{name:<16} {m['r2']:7.3f} {m['top1']:7.3f} {m['rho']:7.3f}", file=sys.stderr)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def add_lasf_commands(sub: Any) -> None:
    """Register ``lasf-train`` on the ``headscope`` subparsers."""
    t = sub.add_parser(
        "lasf-train", help="train a LasF layer in place of MiniLM's last layer (distillation)"
    )
    t.add_argument("--mode", choices=["paper", "stable"], default="stable")
    t.add_argument(
        "--kernel",
        choices=["identity", "gaussian"],
        default=None,
        help="the length kernel D, D_S (paper section 4); default identity (gaussian: the paper's default)",
    )
    t.add_argument(
        "--residual",
        choices=["none", "identity", "linear"],
        default=None,
        help="stable mode only (default linear)",
    )
    t.add_argument("--fields", type=int, default=12, help="N_s")
    t.add_argument("--d-q", type=int, default=15)
    t.add_argument("--d-s", type=int, default=128)
    t.add_argument(
        "--init-scale", type=float, default=None, help="default: 0.1 (paper), 1 (stable)"
    )
    t.add_argument("--epochs", type=int, default=None, help="default: 12 (paper), 4 (stable)")
    t.add_argument(
        "--lr",
        type=float,
        default=None,
        help="LasF's peak learning rate (one-cycle schedule); default: 1e-3 (paper), 2e-3 (stable)",
    )
    t.add_argument(
        "--warmup",
        type=float,
        default=0.1,
        help="share of the steps warming up to --lr (default 0.1)",
    )
    t.add_argument(
        "--clip",
        type=float,
        default=None,
        help="clip LasF's gradient norm to this (0: no clipping); default: 1 (paper), none (stable)",
    )
    t.add_argument(
        "--weight-decay",
        type=float,
        default=None,
        help="LasF's AdamW weight decay (the baselines keep 0.01); default: 1 (paper), 0.01 (stable)",
    )
    t.add_argument("--seed", type=int, default=0)
    t.add_argument(
        "--max-sentences",
        type=int,
        default=8000,
        help="sentences kept after the seeded shuffle (0: all 13.9k)",
    )
    t.add_argument("--cache-dir", default=None, help="keep MiniLM's features here for later runs")
    t.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    t.add_argument("--out", default="lasf-out", help="output directory (default: lasf-out)")
    t.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    t.set_defaults(func=cmd_lasf_train)


def cli_lasf_model(model: str) -> Any:
    """The LasF layer for ``analyze --analysis lasf``: a shipped name or a checkpoint file/directory."""
    from pathlib import Path

    from workers.analyses.lasf.checkpoint import SHIPPED, shipped_path
    from workers.analyses.lasf.fields import load_lasf
    from workers.core.errors import HeadscopeError

    path = shipped_path(model)
    if path is None:
        path = Path(model)
        if not path.exists():
            raise HeadscopeError(
                f"unknown LasF model {model!r}: give {', '.join(SHIPPED)} or a LasF checkpoint file"
            )
    return load_lasf(path, name=model if model in SHIPPED else path.name)
