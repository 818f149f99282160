"""Train an LST model and write a checkpoint directory.

``train_lst(LSTConfig(pe="learned", sigma=0.2, epochs=20), out)`` writes:

- ``out/model.safetensors``: the model's state dict; the positional encoding is ``pe`` [16, d]
  (zeros for ``nope``, the fixed table for ``1d-fixed`` / ``2d-fixed``); ``pe_init`` [16, d] holds
  a learned PE's initial value.
- ``out/config.json``: the configuration, the tensor names and the token coding.
- ``out/metrics.json``: per epoch ``train_accuracy`` (running, over the epoch's batches),
  ``train_loss``, ``val_accuracy``, ``val_loss``, ``val_accuracy_by_vectors``, ``seconds``.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from workers.analyses.positional.lst.model import PE_KINDS, PE_TENSOR, LSTModel
from workers.analyses.positional.lst.puzzles import BLANK, PROBE, SIZE, Puzzles, make_dataset
from workers.core.errors import HeadscopeError
from workers.core.progress import Progress, no_progress

logger = logging.getLogger(__name__)

PE_INIT_TENSOR = "pe_init"


@dataclass
class LSTConfig:
    """Everything that defines one training run (paper defaults where it gives them)."""

    pe: str = "learned"
    sigma: float = 0.2
    epochs: int = 10
    seed: int = 0  # model initialisation and batch order
    data_seed: int = 0  # puzzles; the same for every model by default
    n_train: int = 8000
    n_val: int = 1000
    batch_size: int = 64
    lr: float = 1e-4
    d_model: int = 160
    n_layers: int = 4
    n_heads: int = 1
    d_ff: int = 640

    def check(self) -> None:
        if self.pe not in PE_KINDS:
            raise HeadscopeError(f"unknown PE {self.pe!r}; use one of {', '.join(PE_KINDS)}")
        if self.pe == "learned" and not 0 < self.sigma <= 100:
            raise HeadscopeError(f"sigma must be in (0, 100], got {self.sigma}")
        for name in (
            "epochs",
            "n_train",
            "n_val",
            "batch_size",
            "d_model",
            "n_layers",
            "n_heads",
            "d_ff",
        ):
            if getattr(self, name) < 1:
                raise HeadscopeError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.d_model % self.n_heads or (self.pe == "2d-fixed" and self.d_model % 2):
            raise HeadscopeError(f"d_model {self.d_model} must be even and divisible by the heads")
        if not 0 < self.lr < 1:
            raise HeadscopeError(f"learning rate must be in (0, 1), got {self.lr}")


def build_model(config: LSTConfig) -> LSTModel:
    """A fresh model; for one seed every PE kind gets the same weights besides its PE."""
    torch.manual_seed(config.seed)
    return LSTModel(
        pe=config.pe,
        sigma=config.sigma,
        d_model=config.d_model,
        n_layers=config.n_layers,
        n_heads=config.n_heads,
        d_ff=config.d_ff,
        pe_seed=config.seed + 1_000_003,
    )


def _tensors(p: Puzzles, device: torch.device) -> tuple[torch.Tensor, ...]:
    return tuple(torch.as_tensor(a, device=device) for a in (p.tokens, p.probe, p.answer))


@torch.no_grad()
def evaluate(model: LSTModel, puzzles: Puzzles, *, batch_size: int = 1000) -> dict[str, Any]:
    """Accuracy and loss on ``puzzles``, overall and by the number of vectors."""
    model.eval()
    device = next(model.parameters()).device
    tokens, probe, answer = _tensors(puzzles, device)
    correct, losses = [], []
    for s in range(0, len(tokens), batch_size):
        logits, _ = model(tokens[s : s + batch_size], probe[s : s + batch_size])
        losses.append(F.cross_entropy(logits, answer[s : s + batch_size], reduction="sum").item())
        correct.append((logits.argmax(dim=1) == answer[s : s + batch_size]).cpu().numpy())
    hit = np.concatenate(correct) if correct else np.zeros(0, dtype=bool)
    by = {
        str(k): float(hit[puzzles.vectors == k].mean())
        for k in (1, 2, 3)
        if (puzzles.vectors == k).any()
    }
    return {"accuracy": float(hit.mean()), "loss": sum(losses) / max(len(hit), 1), "by_vectors": by}


def train_lst(
    config: LSTConfig,
    out: str | Path,
    *,
    device: str = "cpu",
    progress: Progress | None = None,
    data: tuple[Puzzles, Puzzles] | None = None,
) -> dict[str, Any]:
    """Train on CPU (or ``device``) and write ``out``; returns the metrics."""
    config.check()
    report = progress or no_progress
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    report(0.0, "generating puzzles")
    train, val = data or make_dataset(
        n_train=config.n_train, n_val=config.n_val, seed=config.data_seed
    )
    dev = torch.device(device)
    model = build_model(config).to(dev)
    pe_init = model.pe.detach().cpu().clone()
    opt = torch.optim.Adam(model.parameters(), lr=config.lr)
    tokens, probe, answer = _tensors(train, dev)
    order_gen = torch.Generator().manual_seed(config.seed)
    steps_per_epoch = -(-len(train) // config.batch_size)
    first = evaluate(model, val)
    metrics: dict[str, Any] = {
        "epoch": [], "train_accuracy": [], "train_loss": [], "val_accuracy": [], "val_loss": [],
        "val_accuracy_by_vectors": {k: [] for k in first["by_vectors"]}, "seconds": [],
        "initial_val_accuracy": first["accuracy"], "n_train": len(train), "n_val": len(val),
        "steps_per_epoch": steps_per_epoch,
    }  # fmt: skip
    setup_s = time.perf_counter() - start
    for epoch in range(1, config.epochs + 1):
        model.train()
        perm = torch.randperm(len(train), generator=order_gen).to(dev)
        hits, loss_sum = 0, 0.0
        for step in range(steps_per_epoch):
            idx = perm[step * config.batch_size : (step + 1) * config.batch_size]
            logits, _ = model(tokens[idx], probe[idx])
            loss = F.cross_entropy(logits, answer[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            hits += int((logits.argmax(dim=1) == answer[idx]).sum())
            loss_sum += loss.item() * len(idx)
            done = ((epoch - 1) * steps_per_epoch + step + 1) / (config.epochs * steps_per_epoch)
            report(done, f"epoch {epoch}/{config.epochs}")
        ev = evaluate(model, val)
        metrics["epoch"].append(epoch)
        metrics["train_accuracy"].append(hits / len(train))
        metrics["train_loss"].append(loss_sum / len(train))
        metrics["val_accuracy"].append(ev["accuracy"])
        metrics["val_loss"].append(ev["loss"])
        for k, v in ev["by_vectors"].items():
            metrics["val_accuracy_by_vectors"][k].append(v)
        metrics["seconds"].append(time.perf_counter() - start)
        logger.info("epoch %d: train %.3f val %.3f", epoch, hits / len(train), ev["accuracy"])
    metrics["setup_seconds"] = setup_s
    save_run(model, config, metrics, out, pe_init=pe_init)
    report(1.0, "done")
    return metrics


def save_run(
    model: LSTModel, config: LSTConfig, metrics: dict[str, Any], out: Path, *, pe_init: torch.Tensor
) -> None:
    """Write model.safetensors, config.json and metrics.json into ``out``."""
    from safetensors.torch import save_file

    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    if config.pe == "learned":
        state[PE_INIT_TENSOR] = pe_init.contiguous()
    save_file(
        state, str(out / "model.safetensors"), metadata={"format": "pt", "pe_tensor": PE_TENSOR}
    )
    (out / "config.json").write_text(json.dumps(run_config(config), indent=2) + "\n")
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")


def run_config(config: LSTConfig) -> dict[str, Any]:
    """config.json: the training configuration plus what a reader needs to use the checkpoint."""
    return {
        "task": "latin-square",
        **asdict(config),
        "pe_tensor": PE_TENSOR,
        "pe_init_tensor": PE_INIT_TENSOR if config.pe == "learned" else None,
        "grid": [SIZE, SIZE],
        "tokens": {"symbols": [0, 1, 2, 3], "blank": BLANK, "probe": PROBE},
        "positions": "cells in row-major order, t = 4 * row + column",
        "architecture": "encoder-only post-LN transformer, ReLU feed-forward, no dropout, readout at the probe",
        "optimizer": "Adam",
    }


def load_run(path: str | Path) -> tuple[LSTModel, LSTConfig]:
    """The trained model of a directory written by :func:`train_lst`."""
    from safetensors.torch import load_file

    path = Path(path)
    try:
        raw = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise HeadscopeError(f"{path}: not an LST run directory ({exc})") from None
    config = LSTConfig(**{f.name: raw[f.name] for f in fields(LSTConfig) if f.name in raw})
    model = build_model(config)
    state = load_file(str(path / "model.safetensors"))
    state.pop(PE_INIT_TENSOR, None)
    model.load_state_dict(state)
    model.eval()
    return model, config


@torch.no_grad()
def attention_maps(model: LSTModel, puzzles: Puzzles) -> np.ndarray:
    """Every layer's attention on ``puzzles``. # [layer, puzzle, head, query, key]"""
    model.eval()
    device = next(model.parameters()).device
    tokens, probe, _ = _tensors(puzzles, device)
    _, maps = model(tokens, probe, need_attention=True)
    return torch.stack(maps).cpu().numpy()
