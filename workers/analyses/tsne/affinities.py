"""Neighbour probabilities for t-SNE and the exact KL divergence every engine reports.

- ``head_affinities``: P straight from one head's attention matrix (docs/analyses.md#attention-head-t-sne).
- ``perplexity_affinities``: Gaussian kernels with per-point σ found by a safeguarded Newton search
  (docs/analyses.md#t-sne-of-hidden-states).
- ``kl_divergence``: ``KL(P || Q)`` with the Student-t Q of an embedding, computed exactly.
- ``entropies``, ``kernel_p``: P's entropy and the float32 copy of P the compiled kernels read.
"""

from __future__ import annotations

import numpy as np
import torch

from workers.analyses.tsne.options import P_FLUSH, numba_available
from workers.core.errors import HeadscopeError


def head_affinities(attention: np.ndarray, *, keep: np.ndarray | None = None) -> np.ndarray:
    """``P_ij = (1 - δ_ij)(A_ij + A_ji) / Σ_{m≠k}(A_mk + A_km)`` for one or many heads.

    Args:
        attention: [..., n, n] attention matrices (rows = queries).
        keep: optional boolean mask [n]; A is restricted to kept rows and columns first.

    Returns:
        [..., m, m] float64, symmetric, zero diagonal, each matrix summing to 1.
    """
    a = np.asarray(attention, dtype=np.float64)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise HeadscopeError(f"an attention matrix must be square, got shape {a.shape}")
    if keep is not None:
        idx = np.flatnonzero(np.asarray(keep, dtype=bool))
        if idx.size < 3:
            raise HeadscopeError("t-SNE needs at least 3 tokens after removing special tokens")
        a = a[..., idx, :][..., :, idx]
    p = a + np.swapaxes(a, -1, -2)
    n = p.shape[-1]
    p[..., np.arange(n), np.arange(n)] = 0.0
    total = p.sum(axis=(-2, -1), keepdims=True)
    if np.any(total <= 0):
        raise HeadscopeError(
            "the attention matrix puts all its weight on the diagonal; P is undefined"
        )
    return p / total


def conditional_probabilities(
    x: np.ndarray, *, perplexity: float = 20.0, tol: float = 1e-5
) -> np.ndarray:
    """Rows ``p_{j|i}`` of Gaussian kernels whose σ_i gives ``2^{H(P_i)} = perplexity``.

    σ_i is found on β_i = 1/(2σ_i²) (``conditional_from_distances``); the perplexity is capped at (n - 1) / 3, as
    openTSNE does, so a short text still works.

    Args:
        x: [n, d] points.
    Returns:
        [n, n] float64, rows summing to 1, zero diagonal.
    """
    x = np.asarray(x, dtype=np.float64)
    sq = np.sum(x * x, axis=1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * x @ x.T, 0.0)
    return conditional_from_distances(d2, perplexity=perplexity, tol=tol)


def conditional_from_distances(
    d2: np.ndarray, *, perplexity: float = 20.0, tol: float = 1e-5
) -> np.ndarray:
    """``conditional_probabilities`` from squared distances d2 [n, n] instead of points.

    Each row's β (= 1/(2σ²)) is found by Newton's method on log β, kept inside a bracket that every
    step narrows (a step leaving it bisects instead, in log β, doubling or halving while a side is
    open). A row stops at the first β whose entropy is within ``tol`` nats of log(perplexity), and
    only the rows still searching are computed again: a few passes per row, where bisection took
    dozens over every row (measured: docs/tsne.md, "Measured choices in the code").
    """
    d2 = np.array(d2, dtype=np.float64)
    n = d2.shape[0]
    if n < 4:
        raise HeadscopeError(f"t-SNE needs at least 4 points, got {n}")
    perp = min(float(perplexity), (n - 1) / 3.0)
    np.fill_diagonal(d2, np.inf)
    d2 -= d2.min(axis=1, keepdims=True)  # shift per row: same conditional P, no underflow
    np.fill_diagonal(
        d2, 0.0
    )  # the diagonal's weight, e^0 = 1, is taken out of each row's sum below
    target = np.log(perp)  # entropy in nats
    pc = np.zeros((n, n))
    # a row with k >= perplexity points at its nearest distance (duplicates: a repeated token's
    # first hidden state) never gets its entropy down to log(perplexity): its limit, β -> ∞, is
    # uniform over those k (where bisection ended too, after its 200 passes)
    scale = d2.sum(axis=1) / (n - 1)  # a row's mean distance
    ties = (
        d2 <= 1e-9 * scale[:, None]
    )  # at the nearest distance, up to the rounding of |x|² + |y|² - 2x·y
    np.fill_diagonal(ties, False)
    k = ties.sum(axis=1)
    tied = np.log(k) >= target - tol
    pc[tied] = ties[tied] / k[tied, None]
    # start where a row's mean distance has weight e^-1: the data's scale, not 1.0
    log_beta = -np.log(np.maximum(scale, 1e-300))
    lo = np.full(n, -np.inf)  # bracket on log β: entropy(lo) > target > entropy(hi)
    hi = np.full(n, np.inf)
    rows = np.flatnonzero(~tied)
    for step in range(200):
        if not len(rows):
            break
        f = d2 if len(rows) == n else d2[rows]
        beta = np.exp(log_beta[rows])
        w = f * -beta[:, None]
        np.exp(w, out=w)
        s = w.sum(axis=1) - 1.0  # without the diagonal
        t = w * f
        mean = t.sum(axis=1) / s
        t *= f
        var = np.maximum(t.sum(axis=1) / s - mean * mean, 0.0)
        diff = np.log(s) + beta * mean - target
        done = np.abs(diff) < tol
        if done.any() or step == 199:  # the last pass keeps its β (never seen to be needed)
            last = done | (step == 199)
            p = w[last] / s[last, None]
            p[np.arange(len(p)), rows[last]] = 0.0
            pc[rows[last]] = p
        up = diff > 0  # entropy too high -> increase β
        lo[rows[up]] = log_beta[rows[up]]
        hi[rows[~up]] = log_beta[rows[~up]]
        slope = beta * beta * var  # -dH/dlog β
        with np.errstate(
            divide="ignore", invalid="ignore", over="ignore"
        ):  # at most x e^2 per step
            newton = log_beta[rows] + np.where(slope > 0, np.clip(diff / slope, -2.0, 2.0), np.inf)
        below, above = lo[rows], hi[rows]
        halve = np.where(
            np.isfinite(below) & np.isfinite(above),
            (below + above) / 2,
            np.where(np.isfinite(below), below + np.log(2.0), above - np.log(2.0)),
        )
        inside = np.isfinite(newton) & (newton > below) & (newton < above)
        log_beta[rows] = np.where(inside, newton, halve)
        rows = rows[~done]
    return pc


def perplexity_affinities(
    x: np.ndarray, *, perplexity: float = 20.0, tol: float = 1e-5
) -> np.ndarray:
    """Symmetric Gaussian t-SNE probabilities ``(p_j|i + p_i|j) / 2n`` (docs/analyses.md#t-sne-of-hidden-states).

    Args:
        x: [n, d] points.
    Returns:
        [n, n] float64 P, symmetric, zero diagonal, summing to 1.
    """
    pc = conditional_probabilities(x, perplexity=perplexity, tol=tol)
    n = pc.shape[0]
    p = (pc + pc.T) / (2.0 * n)
    np.fill_diagonal(p, 0.0)
    return p / p.sum()


def kl_divergence(p: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor) -> np.ndarray:
    """Exact ``KL(P || Q)`` (nats) for one or a batch of embeddings, in float64.

    ``KL = sum p log p + sum p log(1 + d2) + (sum p) log Z`` with ``Z = sum_{i != j} 1 / (1 + d2_ij)``:
    the same value as ``sum p log(p / q)``. On the host with numba, a compiled float64 kernel
    (``cpu_kernels.kl_heads``: every term within a few ulp, heads in parallel, far less CPU than
    torch: docs/tsne.md, "Measured choices in the code"); otherwise (a CUDA tensor, no numba, a
    non-finite embedding) torch, a few matrices at a time. The two agree to ~1e-14 relative
    (tested).

    Args:
        p: [..., n, n] joint probabilities (zero diagonal, summing to 1).
        y: [..., n, c] embeddings.
    Returns:
        [...] array of KL values.
    """
    on_host = not any(isinstance(t, torch.Tensor) and t.device.type != "cpu" for t in (p, y))
    if on_host and numba_available():
        pn = np.asarray(p.numpy() if isinstance(p, torch.Tensor) else p, dtype=np.float64)
        yn = np.asarray(y.numpy() if isinstance(y, torch.Tensor) else y, dtype=np.float64)
        if np.isfinite(yn).all():
            return _kl_compiled(pn, yn)
    return _kl_torch(p, y)


def _kl_compiled(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    from workers.analyses.tsne.cpu_kernels import kl_heads

    n = p.shape[-1]
    lead = p.shape[:-2]
    pf = np.ascontiguousarray(p.reshape(-1, n, n))
    yf = np.ascontiguousarray(
        np.swapaxes(np.broadcast_to(y, (*lead, n, y.shape[-1])).reshape(-1, n, y.shape[-1]), 1, 2)
    )
    out = np.empty(pf.shape[0])
    kl_heads(pf, yf, out)
    return out.reshape(lead)


def _kl_torch(p: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor) -> np.ndarray:
    """``kl_divergence`` in torch float64 on P's device."""
    pt = torch.as_tensor(p, dtype=torch.float64)
    yt = torch.as_tensor(y).to(dtype=torch.float64, device=pt.device)
    n = pt.shape[-1]
    lead = pt.shape[:-2]
    pf = pt.reshape(-1, n, n)
    yf = yt.reshape(-1, n, yt.shape[-1])
    out = torch.empty(pf.shape[0], dtype=torch.float64, device=pt.device)
    chunk = max(1, (1 << 21) // (n * n))  # ~16 MiB per temporary
    for s in range(0, pf.shape[0], chunk):
        pc, yc = pf[s : s + chunk], yf[s : s + chunk]
        t = torch.cdist(yc, yc).pow_(2).log1p_()  # -log w_ij, [c, n, n]
        cross = (pc * t).sum(dim=(-2, -1))
        w = t.neg_().exp_()
        w.diagonal(dim1=-2, dim2=-1).zero_()
        z = w.sum(dim=(-2, -1))
        entropy = torch.special.xlogy(pc, pc).sum(dim=(-2, -1))
        out[s : s + chunk] = entropy + cross + pc.sum(dim=(-2, -1)) * torch.log(z)
    return out.reshape(lead).cpu().numpy()


def entropies(p: np.ndarray) -> np.ndarray:
    """``sum_ij p_ij log p_ij`` per matrix, float64, one matrix at a time: [B, n, n] -> [B]."""
    out = np.zeros(p.shape[0])
    if numba_available():
        from workers.analyses.tsne.cpu_kernels import xlogx_heads

        xlogx_heads(np.ascontiguousarray(p, dtype=np.float64), out)
        return out
    from scipy.special import xlogy

    for b in range(p.shape[0]):
        pb = np.asarray(p[b], dtype=np.float64)
        out[b] = xlogy(pb, pb).sum()
    return out


def kernel_p(p: np.ndarray) -> np.ndarray:
    """The float32 copy of P the kernels read, entries below ``P_FLUSH`` zeroed (their forces are
    < 1e-14 of a typical entry's; denormal products are slow): [B, n, n], no float64 temporaries."""
    out = np.empty(p.shape, dtype=np.float32)
    for b in range(p.shape[0]):
        out[b] = p[b]
        out[b][out[b] < P_FLUSH] = 0.0
    return out
