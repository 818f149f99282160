"""Attribution-patching node scores on a task data set (docs/circuits.md, "Circuits on a task data set";
SPEC 14): every head's and feed-forward's AtP effect (``attribution_patching``: ``(n_C - n_K) · ∂m/∂n
|_K`` summed over positions, a head's node its slice of the input to ``W_O``) summed over the discovery
examples and divided once by their summed ``m_C - m_K``, as the set's edge scores are, so examples
weigh by their logit difference. For one example it is that example's AtP.

Examples of one token length run together: a batch of clean runs, then a batch of corrupted runs with
the autograd graph kept and one backward of ``Σ_e m_e`` (the rows are independent, so each row's
gradient is its own example's). Cost: about three forwards per example.

Notebook use::

    from workers.analyses.circuits.set_nodes import example_node_effects, node_scores
    eff = example_node_effects(m, examples)          # per example, not divided
    res = node_scores(m, examples, range(len(examples)))
    res["top"][:5]   # [{"id": "L17H5", "kind": "head", "layer": 17, "head": 5, "score": 0.21}, ...]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from workers.analyses.causal.views import head_of, token_id
from workers.analyses.circuits.tasks import Example
from workers.core.errors import HeadscopeError
from workers.core.progress import Progress, no_progress
from workers.models.adapters import Encoded, encode
from workers.models.sublayers import batch_inputs, locate

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel

ROWS = 16  # examples of one length per batch
TOP_NODES = 20  # nodes listed in ``top``


@dataclass
class NodeEffects:
    """Per example (not divided by its own difference): ``heads`` [E, L, H], ``feedforward`` [E, L],
    and its ``m_clean``, ``m_corrupted`` [E] (float64)."""

    heads: np.ndarray
    feedforward: np.ndarray
    m_clean: np.ndarray
    m_corrupted: np.ndarray


def _run(
    loaded: LoadedModel, encs: list[Encoded], *, grad: bool
) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """The last position's logits [B, V], each layer's head outputs z [B, n, H*dh] and feed-forward
    outputs [B, n, d] of one batch of equal-length texts; with ``grad`` the autograd graph is kept."""
    arch = locate(loaded)
    ctx: list[torch.Tensor] = []
    ff: list[torch.Tensor] = []

    def leaf(m: torch.nn.Module, a: Any, out: torch.Tensor) -> torch.Tensor | None:
        if grad and not out.requires_grad:  # frozen weights: the graph starts at the embedding
            return out.detach().requires_grad_(True)
        return None

    def first(out: Any) -> torch.Tensor:
        return out[0] if isinstance(out, tuple) else out

    handles = [
        loaded.model.get_input_embeddings().register_forward_hook(leaf),
        *[la.context_module.register_forward_pre_hook(lambda m, a: ctx.append(a[0])) for la in arch.layers],
        *[la.ff_module.register_forward_hook(lambda m, a, out: ff.append(first(out))) for la in arch.layers],
    ]  # fmt: skip
    try:
        with torch.enable_grad() if grad else torch.inference_mode():
            out = loaded.model(**batch_inputs(loaded, encs))
            logits = head_of(loaded).logits(out.last_hidden_state[:, -1])
    finally:
        for h in handles:
            h.remove()
    return logits, ctx, ff


def example_node_effects(
    loaded: LoadedModel,
    examples: Sequence[Example],
    index: Sequence[int] | None = None,
    *,
    rows: int = ROWS,
    progress: Progress | None = None,
) -> NodeEffects:
    """Each example's AtP effects (``index``: which examples, all by default; in that order)."""
    progress = progress or no_progress
    index = list(range(len(examples))) if index is None else [int(i) for i in index]
    L, H = loaded.n_layers, loaded.n_heads
    heads = np.zeros((len(index), L, H))
    ffs = np.zeros((len(index), L))
    m_c = np.zeros(len(index))
    m_k = np.zeros(len(index))
    enc = {
        i: (encode(loaded, examples[i].clean), encode(loaded, examples[i].corrupted)) for i in index
    }
    by_len: dict[int, list[int]] = {}
    for pos, i in enumerate(index):
        c, k = enc[i]
        if c.n != k.n:
            raise HeadscopeError(
                f"example {i + 1}: the clean text has {c.n} tokens and the corrupted text {k.n}"
            )
        by_len.setdefault(c.n, []).append(pos)
    chunks = [v[s : s + rows] for _, v in sorted(by_len.items()) for s in range(0, len(v), rows)]
    done = 0
    for chunk in chunks:
        ids = [index[p] for p in chunk]
        a = torch.as_tensor(
            [token_id(loaded, examples[i].answer) for i in ids], device=loaded.device
        )
        b = torch.as_tensor(
            [token_id(loaded, examples[i].wrong) for i in ids], device=loaded.device
        )
        rows_ = torch.arange(len(ids), device=loaded.device)
        lc, cc, fc = _run(loaded, [enc[i][0] for i in ids], grad=False)
        lk, ck, fk = _run(loaded, [enc[i][1] for i in ids], grad=True)
        metric = lk[rows_, a].double() - lk[rows_, b].double()  # [B]
        grads = torch.autograd.grad(metric.sum(), [*ck, *fk], allow_unused=True)
        with torch.no_grad():
            for layer in range(L):
                g_z, g_f = grads[layer], grads[L + layer]
                if g_z is not None:
                    e = (cc[layer].double() - ck[layer].detach().double()) * g_z.double()
                    heads[chunk, layer] = e.reshape(*e.shape[:2], H, -1).sum((1, 3)).cpu().numpy()
                if g_f is not None:
                    e = (fc[layer].double() - fk[layer].detach().double()) * g_f.double()
                    ffs[chunk, layer] = e.sum((1, 2)).cpu().numpy()
            m_c[chunk] = (lc[rows_, a].double() - lc[rows_, b].double()).cpu().numpy()
            m_k[chunk] = metric.detach().cpu().numpy()
        done += len(chunk)
        progress(done / len(index), f"node scores: {done}/{len(index)} examples")
    return NodeEffects(heads, ffs, m_c, m_k)


def node_scores(
    loaded: LoadedModel,
    examples: Sequence[Example],
    index: Sequence[int],
    *,
    top: int = TOP_NODES,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The set's AtP node scores over examples ``index`` (docs/results.md, ``circuits-set``
    ``node_scores``): ``heads`` [L][H], ``feedforward`` [L] (fractions of the mean difference), and
    ``top``, the ``top`` nodes by |score| with the model's node names."""
    eff = example_node_effects(loaded, examples, index, progress=progress)
    diff = float((eff.m_clean - eff.m_corrupted).sum())
    if diff == 0:
        raise HeadscopeError(
            "the metric is the same on the clean and corrupted texts: nothing to restore"
        )
    heads, ffs = eff.heads.sum(0) / diff, eff.feedforward.sum(0) / diff
    nodes = [
        {"id": f"L{layer}H{h}", "kind": "head", "layer": layer, "head": h, "score": float(heads[layer, h])}
        for layer in range(heads.shape[0])
        for h in range(heads.shape[1])
    ] + [
        {"id": f"FF{layer}", "kind": "feedforward", "layer": layer, "head": None, "score": float(ffs[layer])}
        for layer in range(ffs.shape[0])
    ]  # fmt: skip
    nodes.sort(key=lambda nd: -abs(nd["score"]))
    return {
        "method": "AtP",
        "n_examples": len(index),
        "heads": heads.tolist(),
        "feedforward": ffs.tolist(),
        "top": nodes[:top],
    }
