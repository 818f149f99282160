"""The paper-mode sweep's probe (docs/lasf.md, "Paper mode, second sweep"): LasF alone (the
baselines do not depend on LasF's settings) trained by ``lasf-train``'s own loop
(``workers.analyses.lasf.train.train_models``) on MiniLM's cached features, with the settings of one
row of the sweep.

    headscope lasf-train --mode paper --cache-dir C --out runs/any   # once: writes C/lasf-features-*.pt
    PYTHONPATH=. nice -n 10 .venv/bin/python scripts/lasf_probe.py --cache C --out-dir runs/probe \
        --name p-ident-wd1-e12 --kernel identity --wd 1 --epochs 12 --test

What it adds to ``lasf-train``: the starts the sweep probed (per-matrix init scales, ``L_S`` partly
inside the span of its field's ``L``), batches of 32 split into smaller ones, no baselines, and every
``--diag-every`` steps the spread and saturation of the sigmoid's inputs ``Phi Psi S`` on three
training batches (short, median, long). Prints one JSON line per diagnostic step and epoch, then
``RESULT {...}``; appends the result to OUT_DIR/results.jsonl and saves the state dict as
OUT_DIR/NAME.pt.
"""

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from workers.analyses.lasf.distil import cpu_seconds
from workers.analyses.lasf.module import LasF
from workers.analyses.lasf.train import (
    Batch,
    TrainConfig,
    build_lasf,
    evaluate,
    set_threads,
    train_models,
)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--name", required=True, help="the run's name: OUT_DIR/NAME.pt, results.jsonl")
    p.add_argument("--cache", required=True, help="the --cache-dir of an earlier lasf-train run")
    p.add_argument("--out-dir", default="runs/probe")
    p.add_argument("--kernel", default="gaussian", help="lasf-train's --kernel")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (one-cycle)")
    p.add_argument("--warmup", type=float, default=0.1, help="lasf-train's --warmup")
    p.add_argument("--clip", type=float, default=1.0, help="gradient norm clipped to this; 0: none")
    p.add_argument("--wd", type=float, default=0.01, help="lasf-train's --weight-decay")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--init", type=float, default=0.1, help="lasf-train's --init-scale")
    for matrix in ("L", "S", "Y"):
        p.add_argument(f"--init-{matrix}", type=float, default=None,
                       help=f"{'L_' + matrix if matrix != 'L' else 'L'}'s own init scale")  # fmt: skip
    p.add_argument("--align", type=float, default=0.0,
                   help="L_S's start: this share of its norm in the span of L (same field)")  # fmt: skip
    p.add_argument("--split", type=int, default=1, help="split each batch of 32 into this many")
    p.add_argument("--diag-every", type=int, default=50, help="diagnostics every N steps; 0: none")
    p.add_argument("--test", action="store_true", help="also the held-out test metrics")
    return p.parse_args()


def load_features(cache: Path, split: int) -> dict[str, list[Batch]]:
    """The features ``lasf-train --cache-dir`` wrote; with ``split`` > 1 each training batch is cut
    into that many, each trimmed to its longest sentence."""
    raw = torch.load(next(cache.glob("lasf-features-*.pt")), weights_only=True)
    feats = {s: [Batch(*b) for b in bs] for s, bs in raw.items()}
    if split > 1:
        parts = []
        for b in feats["train"]:
            for rows in torch.tensor_split(torch.arange(b.x.shape[0]), split):
                n = int(b.mask[rows].sum(1).max())
                parts.append(Batch(b.x[rows, :n], b.y[rows, :n], b.mask[rows, :n]))
        feats["train"] = parts
    return feats


@torch.no_grad()
def probe_start(m: LasF, a: argparse.Namespace) -> None:
    """The sweep's starts: per-matrix init scales, and ``L_S`` partly inside ``L``'s span."""
    for name, scale in (("L", a.init_L), ("L_S", a.init_S), ("L_Y", a.init_Y)):
        if scale is not None:
            getattr(m, name).mul_(scale / a.init)
    if a.align:
        g = torch.Generator().manual_seed(1)
        v = torch.randn(m.n_fields, m.d_q, m.d_s, generator=g)
        inside = torch.einsum("fdq,fqs->fds", m.L, v)
        inside = inside * (m.L_S.norm() / inside.norm())
        m.L_S.copy_(math.sqrt(a.align) * inside + math.sqrt(1 - a.align) * m.L_S.clone())


@torch.no_grad()
def sigmoid_inputs(m: LasF, batches: list[Batch]) -> list[dict[str, float]]:
    """Per batch: the spread of the sigmoid's inputs ``z = Phi Psi S`` and the share saturated
    (|z| > 4), with the mean of Psi and Phi and the spread of S (docs/lasf.md, "Training": 98 %
    saturated at the default start)."""
    out = []
    for b in batches:
        it = m.internals(b.x, b.mask)
        keep = b.mask[:, None, :, None]
        relayed = torch.einsum("bmij,bmjs->bmis", it["weights"], it["S"])
        z = torch.einsum("blm,bmis->blis", it["phi_used"], relayed)[keep.expand_as(it["O"])]
        pairs = keep.expand_as(it["psi"]) & b.mask[:, None, None, :].expand_as(it["psi"])
        out.append({
            "n": int(b.mask.sum(1).float().mean()), "z_std": float(z.std()),
            "z_mean": float(z.mean()), "sat": float((z.abs() > 4).float().mean()),
            "psi": float(it["psi"][pairs].mean()), "phi": float(it["phi"].mean()),
            "S_std": float(it["S"][keep.expand_as(it["S"])].std()),
        })  # fmt: skip
    return out


def main() -> None:
    a = parse_args()
    set_threads(1)
    t0, c0 = time.perf_counter(), cpu_seconds()
    feats = load_features(Path(a.cache), a.split)
    train, val = feats["train"], feats["val"]
    cfg = TrainConfig(
        mode="paper", kernel=a.kernel, residual="none", init_scale=a.init, lr=a.lr,
        warmup=a.warmup, clip=a.clip or None, weight_decay=a.wd, epochs=a.epochs, seed=0,
    )  # fmt: skip
    cfg.check()
    m = build_lasf(cfg, train[0].x.shape[-1])
    probe_start(m, a)
    lengths = np.argsort([int(b.mask.sum(1).float().mean()) for b in train])
    watched = [train[lengths[len(lengths) // 10]], train[lengths[len(lengths) // 2]],
               train[lengths[-len(lengths) // 10]]]  # fmt: skip

    def norms(of_grad: bool = False) -> dict[str, float]:
        mats = {"L": m.L, "L_S": m.L_S, "L_Y": m.L_Y}
        return {k: float((p.grad if of_grad else p).detach().norm()) for k, p in mats.items()}

    step = 0

    def after_step(fraction: float, message: str) -> None:  # lasf-train's progress, every step
        nonlocal step
        step += 1
        if a.diag_every and step % a.diag_every == 0:
            row = {"step": step, "progress": message, "pnorm": norms(),
                   "gnorm_clipped": norms(of_grad=True), "diag": sigmoid_inputs(m, watched)}  # fmt: skip
            print(json.dumps(row), flush=True)

    print(json.dumps({"step": 0, "diag": sigmoid_inputs(m, watched), "pnorm": norms()}), flush=True)
    history = train_models({"lasf": m}, cfg, train, val, progress=after_step)  # lasf-train's loop
    for row in history:
        print(json.dumps(row), flush=True)
    res = {"name": a.name, "args": vars(a), "val_r2": [round(r["lasf"]["r2"], 4) for r in history]}
    if a.test:
        res["test"] = evaluate(m, feats["test"])
    res["cpu"], res["wall"] = cpu_seconds() - c0, time.perf_counter() - t0
    print("RESULT", json.dumps(res), flush=True)
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "results.jsonl", "a") as f:
        f.write(json.dumps(res) + "\n")
    torch.save(m.state_dict(), out / f"{a.name}.pt")


if __name__ == "__main__":
    main()
