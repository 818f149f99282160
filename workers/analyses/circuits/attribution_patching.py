"""Attribution patching, AtP (docs/circuits.md; Nanda 2023, Kramár et al. 2024): the effect of
patching a node from the clean run C into the corrupted run K, to first order, for every node at
once.

A node's estimated effect is ``(n_C - n_K) · ∂m/∂n |_K`` divided by ``m_C - m_K`` (the fraction of the
metric's difference it restores, as ``interventions.patching`` reports it). Nodes: each head's output
``z_{l,h}`` (its slice of the input to ``W_O``, the value ``patching`` replaces), each feed-forward's
output and each residual stream ``X[l]`` per position. Cost: one clean forward, one corrupted forward
with gradients kept and one backward.

Notebook use::

    from workers.analyses.circuits.attribution_patching import attribution_patching
    atp = attribution_patching(m, encode(m, clean), encode(m, corrupted), real=True)
    atp["heads"]            # [L][H] estimated restored fraction; atp["real"]["heads"] the measured one
    atp["pearson"], atp["spearman"]
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from workers.analyses.causal.interventions import pair_keys, pair_target, patching
from workers.analyses.causal.views import TargetSpec, final_norm, head_of
from workers.analyses.circuits.qk_fix import Attn, qk_section, record_attention
from workers.core.errors import HeadscopeError
from workers.core.progress import Progress, no_progress, scaled
from workers.models.adapters import Encoded
from workers.models.sublayers import batch_inputs, locate

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel


@dataclass
class Run:
    """One forward's nodes: ``states`` [L+1][n, d] (X[0..L], X[L] before the final norm), ``contexts``
    [L][n, H*dh] (head outputs z), ``feedforward`` [L][n, d] and the last position's ``logits``."""

    states: list[torch.Tensor]
    contexts: list[torch.Tensor]
    feedforward: list[torch.Tensor]
    logits: torch.Tensor


def _first(out: Any) -> torch.Tensor:
    return out[0] if isinstance(out, tuple) else out


def capture(loaded: LoadedModel, encoded: Encoded, *, grad: bool) -> Run:
    """Run ``encoded`` once keeping every node; with ``grad`` the autograd graph is kept, for
    ``node_grads`` of a metric of ``logits``."""
    arch = locate(loaded)
    unembed = head_of(loaded)
    keep: dict[str, Any] = {"ctx": [], "ff": []}

    def leaf(m: torch.nn.Module, a: Any, out: torch.Tensor) -> torch.Tensor | None:
        if grad and not out.requires_grad:  # frozen weights: the graph starts at the embedding
            return out.detach().requires_grad_(True)
        return None

    handles = [
        loaded.model.get_input_embeddings().register_forward_hook(leaf),
        final_norm(loaded).register_forward_pre_hook(lambda m, a: keep.__setitem__("last", a[0])),
        *[
            la.context_module.register_forward_pre_hook(lambda m, a: keep["ctx"].append(a[0]))
            for la in arch.layers
        ],
        *[
            la.ff_module.register_forward_hook(lambda m, a, out: keep["ff"].append(_first(out)))
            for la in arch.layers
        ],
    ]
    try:
        with torch.enable_grad() if grad else torch.inference_mode():
            out = loaded.model(**batch_inputs(loaded, [encoded]), output_hidden_states=True)
            logits = unembed.logits(out.last_hidden_state[0, -1])
    finally:
        for h in handles:
            h.remove()
    return Run([*out.hidden_states[:-1], keep["last"]], keep["ctx"], keep["ff"], logits)


def node_grads(
    metric: torch.Tensor, run: Run, extra: list[torch.Tensor] | None = None
) -> tuple[Run, list[torch.Tensor]]:
    """``∂metric/∂node`` for every node of ``run`` (zeros where the metric does not depend on it) and for
    the ``extra`` tensors of the same graph; ``autograd.grad`` on these only, so no weight gradient is
    computed."""
    more = list(extra or [])
    nodes = [*run.states, *run.contexts, *run.feedforward, *more]
    wanted = [i for i, t in enumerate(nodes) if t.requires_grad]
    got = torch.autograd.grad(metric, [nodes[i] for i in wanted], allow_unused=True)
    grads = [torch.zeros_like(t) for t in nodes]
    for i, g in zip(wanted, got, strict=True):
        if g is not None:
            grads[i] = g
    a, b = len(run.states), len(run.states) + len(run.contexts)
    c = len(nodes) - len(more)
    return Run(grads[:a], grads[a:b], grads[b:c], run.logits), grads[c:]


def _correlations(est: np.ndarray, real: np.ndarray) -> tuple[float | None, float | None]:
    """Pearson and Spearman correlation over all heads (None where either side is constant)."""
    from scipy import stats

    x, y = est.ravel(), real.ravel()
    if x.std() == 0 or y.std() == 0:
        return None, None
    return float(stats.pearsonr(x, y)[0]), float(stats.spearmanr(x, y)[0])


def attribution_patching(
    loaded: LoadedModel,
    clean: Encoded,
    corrupted: Encoded,
    *,
    target: TargetSpec = None,
    real: bool = False,
    qk_fix: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """AtP (docs/circuits.md) from C into K (same token length), metric ``l[a] - l[b]`` at the last
    position as in ``patching``. Keys: ``heads`` [L][H], ``heads_by_position`` [L][H][n],
    ``feedforward`` [L], ``feedforward_by_position`` [L][n], ``residual`` [L+1][n] (fractions of
    ``m_C - m_K``), ``metric_clean``, ``metric_corrupted``; with ``real`` also ``real``
    (``patching``'s result) and the ``pearson`` / ``spearman`` correlation of the estimated and real
    head fractions; with ``qk_fix`` also every head's queries and keys, AtP* and plain AtP
    (``workers.analyses.circuits.qk_fix``)."""
    progress = progress or no_progress
    if clean.n != corrupted.n:
        raise HeadscopeError(
            f"the clean text has {clean.n} tokens and the corrupted text {corrupted.n}; "
            f"attribution patching needs the same length"
        )
    L, H, n = loaded.n_layers, loaded.n_heads, clean.n
    attn: tuple[list[Attn], list[Attn]] = ([], [])
    with record_attention(loaded, attn[0]) if qk_fix else nullcontext():
        rc = capture(loaded, clean, grad=False)
    with record_attention(loaded, attn[1]) if qk_fix else nullcontext():
        rk = capture(loaded, corrupted, grad=True)
    ia, ib = pair_target(loaded, rc.logits, rk.logits.detach(), target)
    m_c = float(rc.logits[ia].double() - rc.logits[ib].double())
    metric = rk.logits[ia].double() - rk.logits[ib].double()
    m_k = float(metric.detach())
    if m_c == m_k:
        raise HeadscopeError("the metric is the same on both texts: nothing to restore")
    progress(0.4, "attribution patching: clean and corrupted forwards done")
    gk, g_attn = node_grads(metric, rk, [a.weights for a in attn[1]])
    progress(0.8, "attribution patching: backward done")
    scale = m_c - m_k

    def effect(
        c: torch.Tensor, k: torch.Tensor, g: torch.Tensor
    ) -> torch.Tensor:  # [1, n, d] -> [n, d]
        return (c[0].double() - k.detach()[0].double()) * g[0].double()

    with torch.no_grad():
        residual = torch.stack(
            [effect(*t).sum(-1) for t in zip(rc.states, rk.states, gk.states, strict=True)]
        )
        ff = torch.stack(
            [
                effect(*t).sum(-1)
                for t in zip(rc.feedforward, rk.feedforward, gk.feedforward, strict=True)
            ]
        )
        dh = rk.contexts[0].shape[-1] // H
        by_pos = torch.stack(
            [
                effect(*t).reshape(n, H, dh).sum(-1).T
                for t in zip(rc.contexts, rk.contexts, gk.contexts, strict=True)
            ]
        )  # [L, H, n]
    by_pos_np = by_pos.cpu().numpy() / scale
    out: dict[str, Any] = {
        "heads": by_pos_np.sum(-1),
        "heads_by_position": by_pos_np,
        "feedforward": ff.sum(-1).cpu().numpy() / scale,
        "feedforward_by_position": ff.cpu().numpy() / scale,
        "residual": residual.cpu().numpy() / scale,
        **pair_keys(loaded, corrupted, ia, ib, m_c, m_k),
        "qk_fix": bool(qk_fix),
    }
    if qk_fix:
        out.update(qk_section(attn[0], attn[1], g_attn, scale))
    assert out["heads"].shape == (L, H) and out["residual"].shape == (L + 1, n)
    if real:
        pat = patching(
            loaded, clean, corrupted, target=[ia, ib], progress=scaled(progress, 0.8, 1.0)
        )
        out["real"] = {"heads": pat["heads"], "residual": pat["residual"]}
        out["pearson"], out["spearman"] = _correlations(out["heads"], pat["heads"])
        r_p, r_s = _correlations(out["residual"], pat["residual"])
        out["residual_pearson"], out["residual_spearman"] = r_p, r_s
    progress(1.0, "attribution patching done")
    return out
