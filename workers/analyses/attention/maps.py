"""Maximum attention (thesis Def. 4.2) and the column-mean alternative (docs/analyses.md#maximum-attention)."""

from __future__ import annotations

import numpy as np

from workers.core.errors import HeadscopeError

REDUCTIONS = ("max", "mean")


def attention_reduce(
    attentions: np.ndarray,
    *,
    reduce: str = "max",
    keep: np.ndarray | None = None,
    causal: bool = False,
) -> np.ndarray:
    """Per layer and head, how much attention each key token receives.

    Args:
        attentions: [layer, head, query, key], rows summing to 1.
        reduce: ``max`` — ``MA(A)_j = max_i A_ij``, the most any query takes from key j;
            ``mean`` — ``mean_i A_ij``, the average a query takes from key j.
        keep: optional boolean mask [token]; dropped tokens are removed as queries and as keys.
        causal: the model is a left-to-right decoder: key j is seen only by queries i >= j, and
            ``mean`` averages over those (``max`` is the same either way: the others give 0).

    Returns:
        [layer, head, key] array (keys restricted to ``keep``).
    """
    if attentions.ndim != 4 or attentions.shape[2] != attentions.shape[3]:
        raise HeadscopeError(
            f"attentions must be [layer, head, n, n], got shape {attentions.shape}"
        )
    a = attentions
    if keep is not None:
        idx = np.flatnonzero(np.asarray(keep, dtype=bool))
        if idx.size == 0:
            raise HeadscopeError("no tokens left after removing special tokens")
        a = a[:, :, idx][:, :, :, idx]
    if reduce == "max":
        return a.max(axis=2)
    if reduce == "mean":
        if causal:
            m = a.shape[-1]
            return a.sum(axis=2) / np.arange(m, 0, -1, dtype=np.float64)
        return a.mean(axis=2)
    raise HeadscopeError(f"unknown reduction {reduce!r}; use one of {', '.join(REDUCTIONS)}")


def max_attention(
    attentions: np.ndarray, *, keep: np.ndarray | None = None, causal: bool = False
) -> np.ndarray:
    """[layer, head, key]: ``max_i A[l, h, i, j]`` — one heads x tokens heatmap per layer."""
    return attention_reduce(attentions, reduce="max", keep=keep, causal=causal)


def mean_attention(
    attentions: np.ndarray, *, keep: np.ndarray | None = None, causal: bool = False
) -> np.ndarray:
    """[layer, head, key]: ``mean_i A[l, h, i, j]`` over the queries that see key j — the labelled
    alternative to max."""
    return attention_reduce(attentions, reduce="mean", keep=keep, causal=causal)
