"""The paper-mode sweep's probe (docs/lasf.md, "Paper mode: a sweep"): LasF alone (the baselines do not depend
on LasF's settings) trained on MiniLM's cached features, with the settings of one row of the sweep.

    headscope lasf-train --mode paper --cache-dir C --out runs/any   # once: writes C/lasf-features-*.pt
    PYTHONPATH=. nice -n 10 .venv/bin/python scripts/lasf_probe.py --cache C --out-dir runs/probe \
        --name p-ident-wd1-e12 --kernel identity --wd 1 --epochs 12 --test

Prints one JSON line per diagnostic step and epoch, then ``RESULT {...}``; appends the result to
OUT_DIR/results.jsonl and saves the state dict as OUT_DIR/NAME.pt. Same equations, batches, schedule
(one-cycle), AdamW and evaluation as ``lasf-train``; the options beyond lasf-train's (per-matrix init
scales, batch split, L_S aligned with L) are the sweep's probes of why paper mode stalls.
"""

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from workers.analyses.lasf.distil import cpu_seconds
from workers.analyses.lasf.train import (
    Batch,
    TrainConfig,
    build_lasf,
    evaluate,
    masked_mse,
    set_threads,
)

p = argparse.ArgumentParser()
p.add_argument("--name", required=True)
p.add_argument("--lr", type=float, default=1e-3)
p.add_argument("--lr-L", type=float, default=None)
p.add_argument("--lr-S", type=float, default=None)
p.add_argument("--lr-Y", type=float, default=None)
p.add_argument("--init", type=float, default=0.1)
p.add_argument("--init-L", type=float, default=None)
p.add_argument("--init-S", type=float, default=None)
p.add_argument("--init-Y", type=float, default=None)
p.add_argument("--clip", type=float, default=1.0)
p.add_argument("--warmup", type=float, default=0.1)
p.add_argument("--epochs", type=int, default=4)
p.add_argument("--wd", type=float, default=0.01)
p.add_argument("--beta2", type=float, default=0.999)
p.add_argument("--sched", default="onecycle")
p.add_argument("--kernel", default="gaussian")
p.add_argument(
    "--max-batches", type=int, default=0, help="use only this many train batches per epoch (0 all)"
)
p.add_argument("--split", type=int, default=1, help="split each batch of 32 into this many")
p.add_argument("--diag-every", type=int, default=50)
p.add_argument("--val-every", type=int, default=0, help="val R2 every N steps (0: per epoch)")
p.add_argument("--test", action="store_true")
p.add_argument(
    "--align",
    type=float,
    default=0.0,
    help="L_S init: this share of its norm in the span of L (same field)",
)
p.add_argument(
    "--stop", type=int, default=0, help="stop after this many epochs (schedule of --epochs)"
)
p.add_argument("--opt", default="adamw")
p.add_argument("--eps", type=float, default=1e-8)
p.add_argument("--momentum", type=float, default=0.9)
p.add_argument("--cache", required=True, help="the --cache-dir of an earlier lasf-train run")
p.add_argument("--out-dir", default="runs/probe")
a = p.parse_args()
set_threads(1)
t0, c0 = time.perf_counter(), cpu_seconds()
key = next(Path(a.cache).glob("lasf-features-*.pt"))
raw = torch.load(key, weights_only=True)
F = {s: [Batch(*b) for b in bs] for s, bs in raw.items()}
train, val, test = F["train"], F["val"], F["test"]


def trim(b):
    n = int(b.mask.sum(1).max())
    return Batch(b.x[:, :n], b.y[:, :n], b.mask[:, :n])


if a.split > 1:
    nt = []
    for b in train:
        for ch in torch.tensor_split(torch.arange(b.x.shape[0]), a.split):
            nt.append(trim(Batch(b.x[ch], b.y[ch], b.mask[ch])))
    train = nt
if a.max_batches:
    rng0 = np.random.default_rng(123)
    train = [train[i] for i in sorted(rng0.choice(len(train), a.max_batches, replace=False))]
cfg = TrainConfig(mode="paper", kernel=a.kernel, residual="none", init_scale=a.init, lr=a.lr)
torch.manual_seed(0)
m = build_lasf(cfg, 384)
with torch.no_grad():
    for nm, s in (("L", a.init_L), ("L_S", a.init_S), ("L_Y", a.init_Y)):
        if s is not None:
            getattr(m, nm).mul_(s / a.init)
    if a.align:
        g = torch.Generator().manual_seed(1)
        V = torch.randn(m.n_fields, m.d_q, m.d_s, generator=g)
        A = torch.einsum("fdq,fqs->fds", m.L, V)
        A = A * (m.L_S.norm() / A.norm())
        N = m.L_S.clone()
        m.L_S.copy_(math.sqrt(a.align) * A + math.sqrt(1 - a.align) * N)
groups = [
    {"params": [m.L], "lr": a.lr_L or a.lr, "name": "L"},
    {"params": [m.L_S], "lr": a.lr_S or a.lr, "name": "L_S"},
    {"params": [m.L_Y], "lr": a.lr_Y or a.lr, "name": "L_Y"},
]
opt = (
    torch.optim.AdamW(groups, lr=a.lr, weight_decay=a.wd, betas=(0.9, a.beta2), eps=a.eps)
    if a.opt == "adamw"
    else torch.optim.SGD(groups, lr=a.lr, momentum=a.momentum, weight_decay=a.wd)
)
steps = a.epochs * len(train)
if a.sched == "onecycle":
    sch = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=[g["lr"] for g in groups], total_steps=steps, pct_start=a.warmup
    )
elif a.sched == "const":
    sch = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, a.warmup * steps))
    )
elif a.sched == "cosine":
    w = max(1, int(a.warmup * steps))
    sch = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (
            (s + 1) / w if s < w else 0.5 * (1 + math.cos(math.pi * (s - w) / max(1, steps - w)))
        ),
    )
lens = [int(b.mask.sum(1).float().mean()) for b in train]
order_len = np.argsort(lens)
diag_b = [
    train[order_len[len(order_len) // 10]],
    train[order_len[len(order_len) // 2]],
    train[order_len[-len(order_len) // 10]],
]


@torch.no_grad()
def diag():
    out = []
    for b in diag_b:
        it = m.internals(b.x, b.mask)
        mk = b.mask[:, None, :, None].expand_as(it["O"])
        phi, relayed = it["phi_used"], torch.einsum("bmij,bmjs->bmis", it["weights"], it["S"])
        z = torch.einsum("blm,bmis->blis", phi, relayed)[mk]
        out.append(
            {
                "n": int(b.mask.sum(1).float().mean()),
                "z_std": float(z.std()),
                "z_mean": float(z.mean()),
                "sat": float((z.abs() > 4).float().mean()),
                "psi": float(
                    it["psi"][
                        b.mask[:, None, :, None].expand_as(it["psi"])
                        & b.mask[:, None, None, :].expand_as(it["psi"])
                    ].mean()
                ),
                "phi": float(it["phi"].mean()),
                "S_std": float(it["S"][b.mask[:, None, :, None].expand_as(it["S"])].std()),
            }
        )
    return out


rng = np.random.default_rng(0)
hist, step, log = [], 0, []


def pn():
    return {g["name"]: float(g["params"][0].detach().norm()) for g in groups}


print(json.dumps({"step": 0, "diag": diag(), "pnorm": pn()}), flush=True)
for ep in range(a.stop or a.epochs):
    m.train()
    tl = 0.0
    for bi in rng.permutation(len(train)):
        b = train[bi]
        loss = masked_mse(m(b.x, b.mask), b.y, b.mask)
        if not torch.isfinite(loss):
            print("nonfinite")
            sys.exit(1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = {g["name"]: float(g["params"][0].grad.norm()) for g in groups}
        if a.clip:
            nn.utils.clip_grad_norm_(m.parameters(), a.clip)
        opt.step()
        sch.step()
        step += 1
        tl += float(loss) / len(train)
        if a.diag_every and step % a.diag_every == 0:
            print(
                json.dumps(
                    {
                        "step": step,
                        "loss": float(loss),
                        "n": lens[bi],
                        "gnorm": gn,
                        "pnorm": pn(),
                        "diag": diag(),
                        "lr": sch.get_last_lr()[0],
                    }
                ),
                flush=True,
            )
        if a.val_every and step % a.val_every == 0:
            print(json.dumps({"step": step, "val_r2": evaluate(m, val)["r2"]}), flush=True)
            m.train()
    ev = evaluate(m, val)
    hist.append(round(ev["r2"], 4))
    print(
        json.dumps(
            {
                "epoch": ep + 1,
                "train_loss": tl,
                "val": ev,
                "cpu": cpu_seconds() - c0,
                "wall": time.perf_counter() - t0,
            }
        ),
        flush=True,
    )
res = {"name": a.name, "args": vars(a), "val_r2": hist}
if a.test:
    res["test"] = evaluate(m, test)
res["cpu"], res["wall"] = cpu_seconds() - c0, time.perf_counter() - t0
print("RESULT", json.dumps(res), flush=True)
out = Path(a.out_dir)
out.mkdir(parents=True, exist_ok=True)
with open(out / "results.jsonl", "a") as f:
    f.write(json.dumps(res) + "\n")
torch.save(m.state_dict(), out / f"{a.name}.pt")
