"""Causal evidence for the atlas' labels (docs/atlas.md "Causal evidence"; decoders with a
language-model head).

A head is mean-ablated (docs/causal.md: its output ``z`` replaced by its mean over the positions of
the sequences run, by ``workers.analyses.causal.interventions.replace_heads``) on the first ``seqs``
sequences of the repeated-random-tokens probe, and the rest of the forward run. Two readings of each
run: the repeated half's loss, and the summed induction score of the induction-labelled heads.

The labelled heads (induction, previous-token) are ablated exactly, one at a time (several heads'
runs batched into one forward). The distribution over all heads they are ranked against comes, by
default, from attribution patching (docs/circuits.md; Nanda 2023): one forward and one backward per
reading give every head's first-order estimate ``(z̄ − z) · ∂m/∂z`` summed over positions, with the
mean activations as the corrupted run. ``exact_all`` ablates every head exactly instead (one forward
per head: minutes on SmolLM2 on two cores). ``method`` in the result says which.

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
)
from workers.analyses.causal.interventions import HeadValues, replace_heads
from workers.analyses.causal.views import head_of
from workers.core.progress import Progress, no_progress, scaled
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


def _mean_z(loaded: LoadedModel, tokens: torch.Tensor) -> dict[int, torch.Tensor]:
    """Each layer's head outputs' mean over every position of ``tokens``: [head, 1, dh]."""
    arch = locate(loaded)
    sums: dict[int, torch.Tensor] = {}

    def keep(layer: int) -> Any:
        def hook(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
            sums[layer] = args[0].double().sum(dim=(0, 1))

        return hook

    handles = [
        la.context_module.register_forward_pre_hook(keep(i)) for i, la in enumerate(arch.layers)
    ]
    try:
        with torch.inference_mode():
            loaded.model(**mask_of(tokens))
    finally:
        for h in handles:
            h.remove()
    n = tokens.shape[0] * tokens.shape[1]
    return {
        layer: (z / n).to(loaded.dtype).reshape(loaded.n_heads, 1, -1) for layer, z in sums.items()
    }


@torch.inference_mode()
def ablate_heads(
    loaded: LoadedModel,
    ids: np.ndarray,
    heads: list[tuple[int, int]],
    *,
    length: int,
    offset: int,
    induction_heads: list[tuple[int, int]],
    progress: Progress | None = None,
    what: str = "heads",
) -> dict[str, Any]:
    """``heads`` mean-ablated one at a time on probe sequences ``ids`` [S, n]: the base and each
    head's repeated-half loss and summed induction score of ``induction_heads`` (means over the
    sequences): ``loss`` and ``induction`` [len(heads)]. ``what``: the heads in the progress' words
    ("ablations: 3/15 labelled heads, each alone")."""
    report = progress or no_progress
    unembed = head_of(loaded)
    s, _ = ids.shape
    by_layer: dict[int, list[int]] = {}
    for layer, head in induction_heads:
        by_layer.setdefault(layer, []).append(head)
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
            unembed, out.last_hidden_state, batch, length=length, offset=offset, first=False
        )
        return second.double().cpu().numpy(), ind_rows.numpy()

    tokens = torch.as_tensor(ids, device=loaded.device)
    mean = _mean_z(loaded, tokens)
    per_call = max(1, BATCH_TOKENS // tokens.numel())
    loss = np.zeros(len(heads))
    ind = np.zeros(len(heads))
    report(0.0, f"ablations: 0/{len(heads)} {what}, each alone")
    with watch_attention(loaded, sink):
        base_loss, base_ind = forward(tokens)
        for start in range(0, len(heads), per_call):
            chunk = heads[start : start + per_call]
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
            report(done / max(1, len(heads)), f"ablations: {done}/{len(heads)} {what}, each alone")
    return {
        "base_loss": float(base_loss.mean()),
        "base_induction": float(base_ind.mean()),
        "loss": loss,
        "induction": ind,
    }


def attribution(
    loaded: LoadedModel,
    ids: np.ndarray,
    *,
    length: int,
    offset: int,
    induction_heads: list[tuple[int, int]],
) -> dict[str, np.ndarray]:
    """Attribution-patching estimates of every head's mean ablation (module docstring): ``loss_rise``
    and ``induction_fall`` [layer, head] (the latter None without induction heads)."""
    arch = locate(loaded)
    unembed = head_of(loaded)
    tokens = torch.as_tensor(ids, device=loaded.device)
    mean = _mean_z(loaded, tokens)
    L, H = loaded.n_layers, loaded.n_heads
    zs: dict[int, torch.Tensor] = {}

    def leaf(layer: int) -> Any:
        def hook(module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
            z = args[0].detach().requires_grad_(True)
            zs[layer] = z
            return (z, *args[1:])

        return hook

    by_layer: dict[int, list[int]] = {}
    for layer, head in induction_heads:
        by_layer.setdefault(layer, []).append(head)
    ind: list[torch.Tensor] = []

    def sink(layer: int, weights: torch.Tensor) -> None:
        if layer in by_layer:
            got = repeated_scores(weights, length=length, offset=offset)["induction"]
            ind.append(got[:, by_layer[layer]].sum(-1).mean())

    handles = [
        la.context_module.register_forward_pre_hook(leaf(i)) for i, la in enumerate(arch.layers)
    ]
    try:
        with torch.enable_grad(), watch_attention(loaded, sink):
            out = loaded.model(**mask_of(tokens))
            _, second = half_losses(
                unembed, out.last_hidden_state, tokens, length=length, offset=offset, first=False
            )
            metrics = [second.mean()] + ([torch.stack(ind).sum()] if ind else [])
            grads = [
                torch.autograd.grad(
                    m, [zs[i] for i in range(L)], retain_graph=True, allow_unused=True
                )
                for m in metrics
            ]
    finally:
        for h in handles:
            h.remove()
    est = []
    for g in grads:
        per = np.zeros((L, H))
        for layer in range(L):
            if g[layer] is None:
                continue
            z = zs[layer].detach()
            dz = (mean[layer].reshape(1, 1, -1) - z.reshape(z.shape[0], z.shape[1], -1)).double()
            per[layer] = (
                ((dz * g[layer].double()).reshape(z.shape[0], z.shape[1], H, -1).sum(dim=(0, 1, 3)))
                .cpu()
                .numpy()
            )
        est.append(per)
    return {"loss_rise": est[0], "induction_fall": -est[1] if len(est) > 1 else None}


def add_evidence(
    loaded: LoadedModel,
    probe: Probe,
    heads: list[dict[str, Any]],
    *,
    seqs: int,
    exact_all: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Fill each induction- and previous-token-labelled head's ``evidence`` (module docstring); the
    summary of the runs (how the all-heads distribution was obtained, its spread) is returned.

    ``loss_rise`` / ``induction_fall`` of a head are its exact ablation's; ``rank`` (1 = the largest)
    and ``z`` place that value in the all-heads distribution (the other heads' values, exact or
    estimated as ``exact_all`` says)."""
    report = progress or no_progress
    ids = probe.ids[: min(seqs, probe.n)]
    L, H = loaded.n_layers, loaded.n_heads
    induction = [(h["layer"], h["head"]) for h in heads if h["label"] == "induction"]
    kw = {"length": probe.length, "offset": probe.offset, "induction_heads": induction}
    labelled = [
        (h["layer"], h["head"])
        for h in heads
        if h["label"] == "induction" or (h["label"] == "previous-token" and induction)
    ]
    every = [(layer, head) for layer in range(L) for head in range(H)]
    if exact_all:
        exact = ablate_heads(loaded, ids, every, progress=report, **kw)  # type: ignore[arg-type]
        rise_all = exact["loss"] - exact["base_loss"]
        fall_all = exact["base_induction"] - exact["induction"]
        exact_at = {hd: i for i, hd in enumerate(every)}
        method = (
            f"exact mean ablation of every head, one at a time, on the probe's first {len(ids)} "
            f"sequences (its output replaced by its mean over their positions); ranks and z-scores "
            f"against all {L * H} heads"
        )
    else:
        report(0.0, f"ablations: attribution patching estimates all {L * H} heads")
        est = attribution(loaded, ids, **kw)  # type: ignore[arg-type]
        exact = ablate_heads(
            loaded, ids, labelled, progress=scaled(report, 0.2, 1.0), what="labelled heads", **kw
        )  # type: ignore[arg-type]
        rise_all = est["loss_rise"].reshape(-1).copy()
        fall_all = (
            est["induction_fall"].reshape(-1).copy()
            if est["induction_fall"] is not None
            else np.zeros(L * H)
        )
        exact_at = {hd: i for i, hd in enumerate(labelled)}
        for (layer, head), i in exact_at.items():  # exact values where measured
            rise_all[layer * H + head] = exact["loss"][i] - exact["base_loss"]
            fall_all[layer * H + head] = exact["base_induction"] - exact["induction"][i]
        method = (
            f"exact mean ablation of the {len(labelled)} labelled heads (induction; previous-token "
            f"where there are induction heads), one at a time, on the probe's first {len(ids)} "
            f"sequences (its output replaced by its mean over their positions); ranks and z-scores "
            f"against all {L * H} heads, the others estimated by attribution patching (one forward "
            "and one backward per reading, mean activations as the corrupted run)"
        )
    rise_rank, rise_z = _rank_and_z(rise_all)
    fall_rank, fall_z = _rank_and_z(fall_all)
    for h in heads:
        i = h["layer"] * H + h["head"]
        if (h["layer"], h["head"]) not in exact_at:
            continue
        if h["label"] == "induction":
            h["evidence"] = {
                "effect": "loss",
                "loss_rise": float(rise_all[i]),
                "rank": int(rise_rank[i]),
                "z": float(rise_z[i]),
                "backed": bool(rise_all[i] > 0 and rise_z[i] >= BACKED_Z),
            }
        elif h["label"] == "previous-token":
            h["evidence"] = {
                "effect": "composition",
                "induction_fall": float(fall_all[i]),
                "rank": int(fall_rank[i]),
                "z": float(fall_z[i]),
                "backed": bool(fall_all[i] > 0 and fall_z[i] >= BACKED_Z),
            }

    def spread(values: np.ndarray) -> dict[str, Any]:
        return {
            "median": float(np.median(values)),
            "mean": float(values.mean()),
            "sd": float(values.std()),
            "map": values.reshape(L, H).tolist(),
        }

    return {
        "method": method,
        "exact_all": exact_all,
        "sequences": len(ids),
        "backed_z": BACKED_Z,
        "base_loss_repeated": exact["base_loss"],
        "base_induction_sum": exact["base_induction"],
        "induction_heads": [list(h) for h in induction],
        "exact_heads": [list(h) for h in exact_at] if not exact_all else "all",
        "loss_rise": spread(rise_all),
        "induction_fall": spread(fall_all) if induction else None,
    }
