"""Distil MiniLM's last layer into a LasF layer (paper section 4), with two baselines.

``train_lasf(TrainConfig(mode="stable"), out_dir)``: input = the 5th layer's output of MiniLM,
target = its final hidden states, MSE over non-padding tokens, AdamW. A linear map (D x D with bias)
and the same map followed by a LayerNorm are trained on the same batches in the same run. Held-out
metrics (``evaluate``): token R^2, nearest-neighbour top-1 within batches of 32 sentences, and
Spearman's rho between predicted and true pairwise cosine similarities of mean-pooled sentences.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from workers.analyses.lasf.module import KERNELS, MODES, RESIDUALS, LasF, n_parameters
from workers.core.errors import HeadscopeError
from workers.core.progress import Progress, no_progress

logger = logging.getLogger(__name__)

EVAL_BATCH = 32  # sentences per batch of the top-1 metric


@dataclass
class TrainConfig:
    """One training run (defaults: the shipped ``lasf-minilm``)."""

    mode: str = "stable"
    kernel: str = "identity"
    residual: str = "linear"
    n_fields: int = 12
    d_q: int = 15
    d_s: int = 128
    init_scale: float = 1.0  # paper mode: 0.1 (see docs/lasf.md)
    epochs: int = 4
    lr: float = 2e-3
    warmup: float = 0.1  # LasF's share of the steps spent warming up (one-cycle ``pct_start``)
    clip: float | None = None  # LasF's gradient norm clipped to this (None: no clipping)
    baseline_lr: float = 2e-3
    weight_decay: float = 0.01  # LasF's (AdamW, decoupled); paper mode: 1.0 (see docs/lasf.md)
    baseline_weight_decay: float = 0.01
    batch_size: int = 32
    seed: int = 0
    corpus_seed: int = 0
    max_sentences: int | None = 8000
    max_tokens: int = 64
    base_model: str = "minilm"
    replaced_layer: int = 5  # 0-based index of the layer LasF replaces (MiniLM's 6th)

    def check(self) -> None:
        if self.mode not in MODES:
            raise HeadscopeError(f"unknown mode {self.mode!r}; use one of {', '.join(MODES)}")
        if self.kernel not in KERNELS:
            raise HeadscopeError(f"unknown kernel {self.kernel!r}; use one of {', '.join(KERNELS)}")
        if self.residual not in RESIDUALS or (self.mode == "paper" and self.residual != "none"):
            raise HeadscopeError(f"residual {self.residual!r} is not available in {self.mode} mode")
        for name in ("epochs", "n_fields", "d_q", "d_s", "batch_size", "max_tokens"):
            if getattr(self, name) < 1:
                raise HeadscopeError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not 0.0 < self.warmup < 1.0:
            raise HeadscopeError(
                f"warmup is a share of the steps, between 0 and 1 (exclusive), got {self.warmup}"
            )
        for name in ("weight_decay", "baseline_weight_decay"):
            if not getattr(self, name) >= 0:  # NaN fails too
                raise HeadscopeError(
                    f"{name.replace('_', ' ')} must be at least 0, got {getattr(self, name)}"
                )
        if self.clip is not None and self.clip <= 0:
            raise HeadscopeError(f"clip must be positive, got {self.clip}")


@dataclass
class Batch:
    """Padded features of a batch of sentences. x, y: [b, L, D]; mask: [b, L]."""

    x: torch.Tensor
    y: torch.Tensor
    mask: torch.Tensor


def extract_batches(
    loaded: Any, sentences: list[str], *, layer: int, batch_size: int, max_tokens: int,
    sort: bool, progress: Progress = no_progress,
) -> list[Batch]:  # fmt: skip
    """MiniLM's state before ``layer`` (x) and its final state (y) for each batch of sentences.

    ``sort`` groups sentences of similar length (training); otherwise batches keep the given order
    (held-out sets: the top-1 metric is defined on consecutive batches of ``EVAL_BATCH``).
    """
    model, tok = loaded.model, loaded.tokenizer
    order = (
        sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
        if sort
        else list(range(len(sentences)))
    )
    out = []
    n_batches = math.ceil(len(order) / batch_size)
    with torch.no_grad():
        for b in range(n_batches):
            chunk = [sentences[i] for i in order[b * batch_size : (b + 1) * batch_size]]
            enc = tok(
                chunk, padding=True, truncation=True, max_length=max_tokens, return_tensors="pt"
            )
            enc = {k: v.to(loaded.device) for k, v in enc.items()}
            hs = model(**enc, output_hidden_states=True).hidden_states
            out.append(
                Batch(
                    hs[layer].float().cpu(),
                    hs[-1].float().cpu(),
                    enc["attention_mask"].bool().cpu(),
                )
            )
            progress((b + 1) / n_batches, f"features {b + 1}/{n_batches}")
    return out


class LinearLN(nn.Module):
    """The second baseline: a D x D linear map with bias, then a LayerNorm."""

    def __init__(self, d: int):
        super().__init__()
        self.linear = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.norm(self.linear(x))


class Linear(nn.Linear):
    """The first baseline: one D x D linear map with bias."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return super().forward(x)


def masked_mse(pred: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask[..., None].to(pred.dtype)
    return (((pred - y) * m) ** 2).sum() / (m.sum() * y.shape[-1])


def build_lasf(config: TrainConfig, d: int) -> LasF:
    torch.manual_seed(config.seed)
    return LasF(
        config.n_fields, d, config.d_q, config.d_s, d, mode=config.mode,  # type: ignore[arg-type]
        kernel=config.kernel, residual=config.residual, init_scale=config.init_scale,  # type: ignore[arg-type]
    )  # fmt: skip


@torch.no_grad()
def evaluate(model: nn.Module, batches: list[Batch]) -> dict[str, float]:
    """Token R^2, NN top-1 within each batch, Spearman's rho of pooled-sentence cosine similarities."""
    from scipy.stats import spearmanr

    model.eval()
    sse, trues, pooled_p, pooled_t = 0.0, [], [], []
    hits = total = 0
    for bt in batches:
        p = model(bt.x, bt.mask)
        m = bt.mask
        pt, tt = p[m].double(), bt.y[m].double()  # [tokens, D]
        sse += float(((pt - tt) ** 2).sum())
        trues.append(tt)
        d2 = torch.cdist(pt, tt)  # [predicted, true]
        hits += int((d2.argmin(1) == torch.arange(len(tt))).sum())
        total += len(tt)
        mf = m[..., None].double()
        pooled_p.append((p.double() * mf).sum(1) / mf.sum(1))
        pooled_t.append((bt.y.double() * mf).sum(1) / mf.sum(1))
    allt = torch.cat(trues)
    sst = float(((allt - allt.mean(0)) ** 2).sum())
    cp, ct = (nn.functional.normalize(torch.cat(v), dim=1) for v in (pooled_p, pooled_t))
    iu = torch.triu_indices(len(cp), len(cp), offset=1)
    rho = spearmanr((cp @ cp.T)[iu[0], iu[1]].numpy(), (ct @ ct.T)[iu[0], iu[1]].numpy()).statistic
    return {"r2": 1.0 - sse / sst, "top1": hits / total, "rho": float(rho), "tokens": total}


def train_models(
    models: dict[str, nn.Module], config: TrainConfig, train: list[Batch], val: list[Batch],
    *, progress: Progress = no_progress,
) -> list[dict[str, Any]]:  # fmt: skip
    """Train every model on the same batches in the same order; per-epoch losses and val metrics."""
    rng = np.random.default_rng(config.seed)
    opts = {
        k: torch.optim.AdamW(
            m.parameters(),
            lr=config.lr if k == "lasf" else config.baseline_lr,
            weight_decay=config.weight_decay if k == "lasf" else config.baseline_weight_decay,
        )
        for k, m in models.items()
    }
    steps = config.epochs * len(train)
    scheds = {k: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=o.param_groups[0]["lr"], total_steps=steps,
                                                     pct_start=config.warmup if k == "lasf" else 0.1)
              for k, o in opts.items()}  # fmt: skip
    history, step, start = [], 0, time.perf_counter()
    for epoch in range(config.epochs):
        losses = {k: 0.0 for k in models}
        for m in models.values():
            m.train()
        for bi in rng.permutation(len(train)):
            bt = train[bi]
            for k, m in models.items():
                loss = masked_mse(m(bt.x, bt.mask), bt.y, bt.mask)
                if not torch.isfinite(loss):
                    raise HeadscopeError(f"{k}: the loss became {float(loss)} in epoch {epoch + 1}")
                opts[k].zero_grad(set_to_none=True)
                loss.backward()
                if k == "lasf" and config.clip is not None:
                    nn.utils.clip_grad_norm_(m.parameters(), config.clip)
                opts[k].step()
                scheds[k].step()
                losses[k] += float(loss.detach()) / len(train)
            step += 1
            progress(
                step / steps,
                f"epoch {epoch + 1}/{config.epochs} loss {losses['lasf'] * len(train) / max(1, step - epoch * len(train)):.4f}",
            )
        row: dict[str, Any] = {"epoch": epoch + 1, "seconds": time.perf_counter() - start}
        for k, m in models.items():
            row[k] = {"train_loss": losses[k], **evaluate(m, val)}
        logger.info("epoch %d: %s", epoch + 1, row)
        history.append(row)
    return history


@torch.no_grad()
def init_output_norms(models: dict[str, nn.Module], train: list[Batch]) -> None:
    """Start every final LayerNorm at the targets' per-dimension mean and spread.

    MiniLM's last hidden states have a small per-dimension variance; a LayerNorm's default gain of 1
    starts far from them and, with a few epochs, never gets there (held-out R^2 below 0).
    """
    ys = torch.cat([b.y[b.mask] for b in train]).double()  # [tokens, D]
    mean, std = ys.mean(0).float(), ys.std(0).float()
    for m in models.values():
        norm = getattr(m, "norm", None)
        if isinstance(norm, nn.LayerNorm):
            norm.weight.copy_(std)
            norm.bias.copy_(mean)


def set_threads(threads: int | None = None) -> None:
    """``threads`` torch threads, default every core this process may run on (CPU-bound work)."""
    if threads is None:
        try:
            threads = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not on Linux
            return
    torch.set_num_threads(max(1, threads))


def baselines(d: int, seed: int) -> dict[str, nn.Module]:
    torch.manual_seed(seed)
    return {"linear": Linear(d, d), "linear_ln": LinearLN(d)}


def summary(config: TrainConfig, lasf: LasF) -> dict[str, Any]:
    return {**asdict(config), "parameters": n_parameters(lasf)}
