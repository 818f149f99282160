"""Causal evidence for the atlas' labels (docs/atlas.md "Causal evidence"; decoders with a
language-model head).

Every head in turn is mean-ablated (docs/causal.md: its output ``z`` replaced by its mean over the
probe's positions, by ``workers.analyses.causal.interventions.replace_heads``) on the first ``seqs``
sequences of the repeated-random-tokens probe, and the rest of the forward run. Two readings of each
run: the repeated half's loss, and the summed induction score of the induction-labelled heads. So the
distribution over all heads is exact (one ablation per head, several heads' runs batched into one
forward), not estimated.

- an induction head's **loss effect**: the rise of the repeated-half loss, with its rank among all
  heads (1 = the largest rise) and its z-score against all heads' rises;
- a previous-token head's **composition effect**: the fall of the induction heads' summed induction
  score, with its rank and z-score likewise.
A label is *backed* when its effect is positive with a z-score of at least ``BACKED_Z``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from workers.analyses.atlas.probe import (
    BATCH_TOKENS,
    Probe,
    half_losses,
    mask_of,
    repeated_scores,
    token_losses,
)
from workers.analyses.causal.interventions import HeadValues, replace_heads
from workers.analyses.causal.views import head_of
from workers.core.progress import Progress, no_progress
from workers.models.adapters import watch_attention
from workers.models.sublayers import locate

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel

BACKED_Z = 2.0


def _rank_and_z(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each value's rank (1 = largest) and z-score among ``values`` (flat)."""
    order = np.argsort(-values, kind="stable")
    rank = np.empty(len(values), dtype=np.int64)
    rank[order] = np.arange(1, len(values) + 1)
    sd = float(values.std())
    z = (values - values.mean()) / sd if sd > 0 else np.zeros_like(values)
    return rank, z


@torch.inference_mode()
def ablate_each_head(
    loaded: LoadedModel,
    ids: np.ndarray,
    *,
    length: int,
    offset: int,
    induction_heads: list[tuple[int, int]],
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Every head mean-ablated in turn on probe sequences ``ids`` [S, n]: the base and each head's
    repeated-half loss and summed induction score of ``induction_heads`` (means over the sequences),
    ``loss`` and ``induction`` [layer, head]."""
    report = progress or no_progress
    L, H = loaded.n_layers, loaded.n_heads
    arch = locate(loaded)
    unembed = head_of(loaded)
    s, n = ids.shape
    by_layer: dict[int, list[int]] = {}
    for layer, head in induction_heads:
        by_layer.setdefault(layer, []).append(head)
    z_sum: dict[int, torch.Tensor] = {}

    def keep_z(layer: int) -> Any:
        def hook(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
            z = args[0].double().sum(dim=(0, 1))
            z_sum[layer] = z if layer not in z_sum else z_sum[layer] + z

        return hook

    ind_rows = torch.zeros(0)

    def sink(layer: int, weights: torch.Tensor) -> None:
        nonlocal ind_rows
        if layer in by_layer:
            got = repeated_scores(weights, length=length, offset=offset)["induction"]
            ind_rows = ind_rows + got[:, by_layer[layer]].sum(-1).cpu()

    def forward(batch: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        nonlocal ind_rows
        ind_rows = torch.zeros(batch.shape[0], dtype=torch.float64)
        out = loaded.model(**mask_of(batch))
        _, second = half_losses(
            token_losses(unembed.logits(out.last_hidden_state), batch), length=length, offset=offset
        )
        return second.cpu().numpy(), ind_rows.numpy()

    tokens = torch.as_tensor(ids, device=loaded.device)
    handles = [
        la.context_module.register_forward_pre_hook(keep_z(i)) for i, la in enumerate(arch.layers)
    ]
    try:
        with watch_attention(loaded, sink):
            base_loss, base_ind = forward(tokens)
    finally:
        for h in handles:
            h.remove()
    dh = z_sum[0].shape[0] // H
    mean = {layer: (z / (s * n)).to(loaded.dtype).reshape(H, 1, dh) for layer, z in z_sum.items()}
    every = [(layer, head) for layer in range(L) for head in range(H)]
    per_call = max(1, BATCH_TOKENS // (s * n))
    loss = np.zeros(L * H)
    ind = np.zeros(L * H)
    with watch_attention(loaded, sink):
        for start in range(0, len(every), per_call):
            chunk = every[start : start + per_call]
            values: HeadValues = {}
            for k, (layer, head) in enumerate(chunk):
                values.setdefault(layer, []).extend(
                    (k * s + r, head, mean[layer][head]) for r in range(s)
                )
            with replace_heads(loaded, values):
                got_loss, got_ind = forward(tokens.repeat(len(chunk), 1))
            loss[start : start + len(chunk)] = got_loss.reshape(len(chunk), s).mean(1)
            ind[start : start + len(chunk)] = got_ind.reshape(len(chunk), s).mean(1)
            done = start + len(chunk)
            report(done / len(every), f"ablations: {done}/{len(every)} heads, each alone")
    return {
        "base_loss": float(base_loss.mean()),
        "base_induction": float(base_ind.mean()),
        "loss": loss.reshape(L, H),
        "induction": ind.reshape(L, H),
    }


def add_evidence(
    loaded: LoadedModel,
    probe: Probe,
    heads: list[dict[str, Any]],
    *,
    seqs: int,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Fill each induction- and previous-token-labelled head's ``evidence`` (module docstring); the
    summary of the runs (how the all-heads distribution was obtained, its spread) is returned."""
    ids = probe.ids[: min(seqs, probe.n)]
    induction = [(h["layer"], h["head"]) for h in heads if h["label"] == "induction"]
    runs = ablate_each_head(
        loaded, ids, length=probe.length, offset=probe.offset, induction_heads=induction,
        progress=progress,
    )  # fmt: skip
    rise = (runs["loss"] - runs["base_loss"]).reshape(-1)
    fall = (runs["base_induction"] - runs["induction"]).reshape(-1)
    rise_rank, rise_z = _rank_and_z(rise)
    fall_rank, fall_z = _rank_and_z(fall)
    H = loaded.n_heads
    for h in heads:
        i = h["layer"] * H + h["head"]
        if h["label"] == "induction":
            h["evidence"] = {
                "effect": "loss",
                "loss_rise": float(rise[i]),
                "rank": int(rise_rank[i]),
                "z": float(rise_z[i]),
                "backed": bool(rise[i] > 0 and rise_z[i] >= BACKED_Z),
            }
        elif h["label"] == "previous-token" and induction:
            h["evidence"] = {
                "effect": "composition",
                "induction_fall": float(fall[i]),
                "rank": int(fall_rank[i]),
                "z": float(fall_z[i]),
                "backed": bool(fall[i] > 0 and fall_z[i] >= BACKED_Z),
            }
    return {
        "method": (
            f"exact mean ablation of every head, one at a time, on the probe's first {len(ids)} "
            f"sequences (its output replaced by its mean over their positions); ranks and z-scores "
            f"against all {rise.size} heads"
        ),
        "sequences": len(ids),
        "backed_z": BACKED_Z,
        "base_loss_repeated": runs["base_loss"],
        "base_induction_sum": runs["base_induction"],
        "induction_heads": [list(h) for h in induction],
        "loss_rise": {
            "median": float(np.median(rise)),
            "mean": float(rise.mean()),
            "sd": float(rise.std()),
            "map": rise.reshape(-1, H).tolist(),
        },
        "induction_fall": {
            "median": float(np.median(fall)),
            "mean": float(fall.mean()),
            "sd": float(fall.std()),
            "map": fall.reshape(-1, H).tolist(),
        }
        if induction
        else None,
    }
