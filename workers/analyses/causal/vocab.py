"""Read the whole vocabulary's logits row by row without holding them (docs/causal.md, *Cost*).

``read_vocab(unembed, normed, k=..., ids=...)`` gives, per row of ``normed`` [R, d] (states after the
final norm), what the views show of ``l = W_U normed + b_U`` (soft-capped where the model caps): the
top-k tokens and their logits, the log-sum-exp, and for the rows that have one the logit and rank of a
given token. It multiplies ``normed`` by ``W_U`` in blocks of ``CHUNK`` vocabulary rows and keeps a
running top-k, a running log-sum-exp and a running count, so no ``[R, vocabulary]`` array is ever
made: on Gemma 3 (262,144 tokens) the lens over 19 states x 256 positions would be 5.1 GB in float32.

The logits are the model's dtype, as the full product gives them up to the order of its sums (a
block's product may add the ``d`` terms in another order than the full one: ~1e-7 relative in
float32); a token's reported logit is the entry of the block product its rank was counted in. The log-sum-exp adds each block's sum of ``exp(l - block max)`` in
float64; within a block that sum is float32 (torch's pairwise sum: at least as accurate as one
float32 ``logsumexp`` over the row; the lens) or, with ``exact_sum``, float64 (as a float64
``log_softmax`` of the row; predictions). The rank of token ``a`` is 1 plus the number of *other* tokens whose logit is strictly
larger than ``a``'s (its own column is left out, so a last-bit difference between the block product and
``Unembedding.logit_of`` cannot count the token against itself).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from workers.analyses.causal.spec import VOCAB_CHUNK, VOCAB_ROWS

if TYPE_CHECKING:
    from workers.models.lm_head import Unembedding

CHUNK = VOCAB_CHUNK  # vocabulary rows a block
ROWS = VOCAB_ROWS  # rows of ``normed`` a block (the W_U block is reused across them while it is in cache)


@dataclass
class VocabRead:
    """Per row: ``top_ids``/``top_logits`` [R, k] (best first), ``lse`` [R] (float64); where ``ids``
    named a token, its logit ``own`` [R] (the model's dtype; NaN elsewhere) and ``rank`` [R] (1 = top;
    0 elsewhere)."""

    top_ids: torch.Tensor
    top_logits: torch.Tensor
    lse: torch.Tensor
    own: torch.Tensor | None
    rank: torch.Tensor | None

    def logprob_top(self) -> torch.Tensor:
        """log p of the top-k tokens [R, k], float64."""
        return self.top_logits.double() - self.lse[:, None]

    def logprob_own(self) -> torch.Tensor:
        """log p of the given tokens [R], float64 (NaN where none was given)."""
        assert self.own is not None
        return self.own.double() - self.lse


def _cap(unembed: Unembedding, logits: torch.Tensor) -> torch.Tensor:
    return (
        logits
        if unembed.softcap is None
        else (logits / unembed.softcap).tanh_().mul_(unembed.softcap)
    )


@torch.inference_mode()
def read_vocab(
    unembed: Unembedding,
    normed: torch.Tensor,
    *,
    k: int = 1,
    ids: torch.Tensor | None = None,
    chunk: int = CHUNK,
    rows: int = ROWS,
    exact_sum: bool = False,
    progress: Callable[[float], None] | None = None,
) -> VocabRead:
    """``normed`` [R, d] (after the final norm) -> ``VocabRead``; ``ids`` [R]: the token whose logit
    and rank each row reports, -1 for none. ``exact_sum``: the log-sum-exp's exponentials in float64
    (as a float64 ``log_softmax`` of the row; its cost: docs/causal.md, "Cost of the lens") rather
    than the model's dtype. ``progress(fraction)`` after each vocabulary block."""
    R = normed.shape[0]
    V = unembed.vocab_size
    k = min(int(k), V)
    dev, dt = normed.device, normed.dtype
    own = rank = None
    if (
        ids is not None
    ):  # the reference the ranks count against (NaN > x is False: rows without a token)
        own = _cap(unembed, unembed.logit_of(normed, ids.clamp(min=0)))
        own = torch.where(ids >= 0, own, torch.nan)
    top_l = torch.full((R, k), -torch.inf, dtype=dt, device=dev)
    top_i = torch.zeros((R, k), dtype=torch.long, device=dev)
    run_max = torch.full((R,), -torch.inf, dtype=torch.float64, device=dev)
    run_sum = torch.zeros(R, dtype=torch.float64, device=dev)
    count = torch.zeros(R, dtype=torch.long, device=dev)
    own_block = torch.full((R,), torch.nan, dtype=dt, device=dev)
    w, b = unembed.weight, unembed.bias
    for s in range(0, V, chunk):
        e = min(s + chunk, V)
        w_c = w[s:e]  # [c, d]
        b_c = None if b is None else b[s:e]
        for r0 in range(0, R, rows):  # the W_U block stays in cache across the row blocks
            r1 = min(r0 + rows, R)
            lg = normed[r0:r1] @ w_c.T  # [r, c]
            if b_c is not None:
                lg += b_c
            lg = _cap(unembed, lg)
            if k == 1:
                c_max, c_arg = lg.max(dim=-1, keepdim=True)
                better = (
                    c_max > top_l[r0:r1]
                )  # strict: the first of equal logits stays, as max keeps it
                top_l[r0:r1] = torch.where(better, c_max, top_l[r0:r1])
                top_i[r0:r1] = torch.where(better, c_arg + s, top_i[r0:r1])
                c_max = c_max[:, 0]
            else:
                c_top, c_arg = lg.topk(min(k, e - s), dim=-1)
                both_l = torch.cat([top_l[r0:r1], c_top], dim=1)
                both_i = torch.cat([top_i[r0:r1], c_arg + s], dim=1)
                best, where = both_l.topk(k, dim=-1)
                top_l[r0:r1], top_i[r0:r1] = best, both_i.gather(1, where)
                c_max = c_top[:, 0]
            if own is not None and ids is not None:  # other tokens with a strictly larger logit
                ref = own[r0:r1, None]
                count[r0:r1] += (lg > ref).sum(-1)
                tid = ids[r0:r1]
                inside = torch.nonzero((tid >= s) & (tid < e))[:, 0]
                if inside.numel():  # the token's own column is not counted against it
                    mine = lg[inside, tid[inside] - s]
                    count[r0 + inside] -= (mine > ref[inside, 0]).long()
                    own_block[r0 + inside] = mine  # the block product's entry
            c_max64 = c_max.double()
            if exact_sum:  # every exp and the sum in float64, as a float64 log_softmax of the row
                c_sum = torch.exp(lg.double() - c_max64[:, None]).sum(-1)
            else:  # the model's dtype within the block (torch's pairwise sum), float64 across blocks
                c_sum = torch.exp(lg - c_max[:, None]).sum(-1).double()
            new_max = torch.maximum(run_max[r0:r1], c_max64)
            run_sum[r0:r1] = run_sum[r0:r1] * torch.exp(
                run_max[r0:r1] - new_max
            ) + c_sum * torch.exp(c_max64 - new_max)
            run_max[r0:r1] = new_max
        if progress is not None:
            progress(e / V)
    lse = run_max + torch.log(run_sum)
    if ids is not None:
        rank = torch.where(ids >= 0, count + 1, 0)
        own = own_block
    return VocabRead(top_i, top_l, lse, own, rank)
