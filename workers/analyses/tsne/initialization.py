"""Starts of a t-SNE run: openTSNE's spectral start (diffusion map of P), random and pca starts.

``spectral_init`` takes a full eigendecomposition of every head's normalised P, O(n^3) each; the
start needs only the two leading non-trivial eigenpairs. ``fast_spectral_init`` finds them by
Lanczos with full reorthogonalisation, all heads in parallel (``cpu_kernels.lanczos_round``), and
gives the same start (tested); ``device_spectral_init`` is the same Lanczos in torch on P's device.
"""

from __future__ import annotations

import numpy as np
import torch

from workers.analyses.tsne.affinities import kernel_p
from workers.analyses.tsne.options import numba_available
from workers.core.errors import HeadscopeError


def _rescale(y: np.ndarray, target_std: float = 1e-4) -> np.ndarray:
    std = y[..., :, :1].std(axis=-2, keepdims=True)
    return y / np.where(std > 0, std, 1.0) * target_std


def spectral_init(p: np.ndarray, *, seed: int = 0) -> np.ndarray:
    """openTSNE's spectral start (diffusion map of P), batched: [..., n, n] -> [..., n, 2]."""
    return finish_spectral(spectral_vectors(p), seed=seed)


def spectral_vectors(p: np.ndarray) -> np.ndarray:
    """The diffusion-map coordinates behind ``spectral_init``, before sign and scale."""
    pt = torch.as_tensor(p, dtype=torch.float64)
    d = pt.sum(dim=-1).clamp_min(1e-300)
    dis = d.rsqrt()
    m = pt * dis[..., :, None] * dis[..., None, :]
    evals, evecs = torch.linalg.eigh(m)  # ascending
    vals = evals[..., -3:].flip(-1)  # the 3 largest, decreasing
    vecs = (evecs[..., -3:].flip(-1) * dis[..., :, None]) * vals[..., None, :]
    return vecs[..., :, 1:3].cpu().numpy()


def finish_spectral(y: np.ndarray, *, seed: int, index: np.ndarray | None = None) -> np.ndarray:
    """Sign, scale and jitter of a spectral start ``[..., n, 2]`` (shared by every engine).

    The jitter of batch element ``b`` is drawn for index ``b``, or ``index[b]`` when given (a
    subset of a batch, e.g. the heads of one length, keeps each head's jitter)."""
    # a deterministic sign: the largest-magnitude coordinate of each axis is positive
    idx = np.abs(y).argmax(axis=-2, keepdims=True)
    sign = np.sign(np.take_along_axis(y, idx, axis=-2))
    y = _rescale(y * np.where(sign == 0, 1.0, sign))
    flat = y.reshape(-1, *y.shape[-2:])
    heads = range(flat.shape[0]) if index is None else np.asarray(index).tolist()
    jitter = np.stack([_normal(seed, b, flat.shape[-2:]) for b in heads])
    return y + 1e-6 * jitter.reshape(y.shape)  # 1 % of the std, so coinciding points separate


def _normal(seed: int, index: int, shape: tuple[int, ...]) -> np.ndarray:
    """Standard normal draws for batch element ``index``: independent of the batch's size."""
    return np.random.default_rng([seed, index]).normal(0.0, 1.0, size=shape)


def random_init(batch: int, n: int, *, seed: int) -> np.ndarray:
    """Isotropic Gaussian start with std 1e-4: [batch, n, 2]."""
    return _rescale(np.stack([_normal(seed, b, (n, 2)) for b in range(batch)]))


def pca_init(x: np.ndarray) -> np.ndarray:
    """First two principal components of the data, scaled to std 1e-4: [n, 2]."""
    xc = np.asarray(x, dtype=np.float64) - np.mean(x, axis=0)
    u, s, _ = np.linalg.svd(xc, full_matrices=False)
    return _rescale(u[:, :2] * s[:2])


def initial_embedding(
    p: np.ndarray, *, init: str, seed: int, restart: int, x: np.ndarray | None = None
) -> np.ndarray:
    """The start of restart ``restart`` for a batch [B, n, n] of P: [B, n, 2]."""
    batch, n = p.shape[0], p.shape[-1]
    if restart > 0 or init == "random":
        return random_init(batch, n, seed=seed + restart)
    if init == "pca":
        if x is None:
            raise HeadscopeError(
                "pca initialisation needs the data points; use spectral for attention"
            )
        return np.broadcast_to(pca_init(x), (batch, n, 2)).copy()
    return spectral_init(p, seed=seed)


def fast_spectral_init(
    p: np.ndarray, *, seed: int = 0, max_steps: int = 150, tol: float = 1e-6, every: int = 20
) -> np.ndarray:
    """``spectral_init`` by Lanczos (only the eigenpairs it needs), heads in parallel: [B, n, 2].

    The diffusion map of P: with ``m = D^-1/2 P D^-1/2`` and its eigenpairs (λ_k, v_k) after the
    trivial one (λ = 1, v ∝ sqrt(d)), the start is ``D^-1/2 v_k λ_k`` for k = 1, 2, then the same
    sign, scale and jitter as ``spectral_init``. A head stops when both Ritz residuals are below
    ``tol`` (checked every ``every`` steps). Falls back to ``spectral_init`` without numba.
    """
    if not numba_available():
        return spectral_init(p, seed=seed)
    from workers.analyses.tsne.cpu_kernels import lanczos_round

    batch, n = p.shape[0], p.shape[-1]
    d = np.maximum(np.asarray(p, dtype=np.float64).sum(-1), 1e-300)  # [B, n]
    dis = 1.0 / np.sqrt(d)
    v1 = np.sqrt(d) / np.linalg.norm(np.sqrt(d), axis=-1, keepdims=True)
    k = min(max_steps, n - 1)
    q = np.zeros((batch, k + 1, n))
    start = np.random.default_rng(12345).normal(size=(batch, n))  # fixed: a deterministic start
    start -= (start * v1).sum(-1, keepdims=True) * v1
    q[:, 0] = start / np.linalg.norm(start, axis=-1, keepdims=True)
    alpha, beta = np.zeros((batch, k)), np.zeros((batch, k))
    used = np.zeros(batch, dtype=np.int64)
    taken = np.zeros(batch, dtype=np.int64)
    pk = kernel_p(p)
    active = np.arange(batch)
    while len(active):
        j0 = int(used[active[0]])  # active heads move in step
        j1 = min(k, j0 + every)
        lanczos_round(pk, dis, v1, q, alpha, beta, active, j0, j1, taken)
        used[active] += taken[active]
        stopped = taken[active] < (j1 - j0)  # invariant subspace found
        size = int(used[active].max())
        if size < 2:  # every head stopped after one step (e.g. uniform P): no pair of Ritz vectors
            converged = np.ones(len(active), dtype=bool)
        else:
            _, vecs = _ritz(alpha[active], beta[active], size)
            res = np.abs(vecs[:, -1, :]) * beta[active, np.maximum(used[active] - 1, 0)][:, None]
            converged = (res < tol).all(-1) & (used[active] >= min(k, 2 * every))
        active = active[~(stopped | converged | (used[active] >= k))]
    out = np.zeros((batch, n, 2))
    for steps in np.unique(used):
        heads = np.flatnonzero(used == steps)
        if steps < 2:  # P's graph falls apart into tiny pieces: take the full decomposition
            out[heads] = spectral_vectors(p[heads])
            continue
        vals, vecs = _ritz(alpha[heads], beta[heads], int(steps))
        top = vecs[:, :, ::-1]  # [h, steps, 2], largest first
        # Ritz vectors v_k, head by head: no copy of the basis (an einsum over q[heads] copied it)
        basis = np.stack([q[b, :steps].T @ top[i] for i, b in enumerate(heads)])
        out[heads] = basis * dis[heads, :, None] * vals[:, None, ::-1]
    return finish_spectral(out, seed=seed)


def _ritz(alpha: np.ndarray, beta: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The two largest eigenpairs of each Lanczos tridiagonal matrix ``[h, size, size]``:
    ([h, 2] ascending, [h, size, 2]). LAPACK's tridiagonal solver, one head at a time: no BLAS
    threads to fight the kernels' threads for the cores. The drivers ``eigh_tridiagonal`` picks
    for this case (``stebz`` for the values, ``stein`` for the vectors), called directly: the same
    numbers, without the argument checks that cost more than the solve (measured: docs/tsne.md,
    "Measured choices in the code")."""
    from scipy.linalg.lapack import dstebz, dstein

    h = alpha.shape[0]
    vals, vecs = np.zeros((h, 2)), np.zeros((h, size, 2))
    for i in range(h):
        d, e = np.ascontiguousarray(alpha[i, :size]), np.ascontiguousarray(beta[i, : size - 1])
        m, w, iblock, isplit, info = dstebz(d, e, 2, 0.0, 1.0, size - 1, size, 0.0, "B")
        if info != 0 or m != 2:
            raise np.linalg.LinAlgError(
                f"stebz failed on a Lanczos matrix (info {info}, {m} values)"
            )
        v, info = dstein(d, e, w[:2], iblock, isplit)
        if info != 0:
            raise np.linalg.LinAlgError(f"stein failed on a Lanczos matrix (info {info})")
        order = np.argsort(w[:2])
        vals[i], vecs[i] = w[:2][order], v[:, order]
    return vals, vecs


def device_spectral_init(
    p: torch.Tensor,
    *,
    seed: int = 0,
    lengths: torch.Tensor | None = None,
    max_steps: int = 150,
    tol: float = 1e-6,
    every: int = 20,
) -> torch.Tensor:
    """fast_spectral_init on P's torch device: p [B, N, N] float32 or float64 (zero padded past each
    head's length when `lengths` [B] is given: head b uses p[b, :n_b, :n_b]); returns [B, N, 2]
    float64 on p's device, rows past a head's length zero.

    The same Lanczos as ``fast_spectral_init`` (same start vector, steps, stopping rule and Ritz
    solver), all heads' products ``P x`` as one batched matmul in P's dtype (P symmetric, as every
    t-SNE P), the basis in float64. The host is consulted every ``every`` steps (the convergence
    check, on the tiny tridiagonal problems) and at the end: only [B, k] coefficients and the
    [B, N, 2] result cross, never P (but for a head whose Lanczos stops before 2 steps: that head's
    full decomposition, as the CPU path). Head b's start vector and jitter are those of index b in
    a batch of heads of its length, so each head gets the start ``fast_spectral_init`` gives it
    there, whatever the padding and the other heads. Once at most a quarter of the heads are still
    running, their P is gathered (a copy of at most B/4 heads) so the finished ones cost nothing.
    Points with no weight (d = 0) start at 0. On CUDA, float32 P needs full-precision matmuls
    (TF32 would cost ~1e-3 of the start's scale).
    """
    import torch

    batch, size = p.shape[0], p.shape[-1]
    dev, f64 = p.device, torch.float64
    lens = (
        np.full(batch, size, np.int64)
        if lengths is None
        else torch.as_tensor(lengths).cpu().numpy()
    )
    lens = lens.astype(np.int64)
    if (
        p.ndim != 3
        or p.shape[1] != size
        or lens.shape != (batch,)
        or (lens < 0).any()
        or (lens > size).any()
    ):
        raise ValueError(
            f"P must be [B, N, N] with lengths [B] in 0..N, got {tuple(p.shape)}, {lens}"
        )
    inside = torch.arange(size, device=dev) < torch.as_tensor(lens, device=dev)[:, None]  # [B, N]
    d = torch.where(inside, p.sum(-1, dtype=f64), 0.0)  # padded rows of P are zero anyway
    # d = 0 (padding, or a point without weight): 1 / sqrt(d) would overflow float32 to inf and
    # make nan; with dis = 0 there, m = D^-1/2 P D^-1/2 is the same (its row and column are zero)
    dis = torch.where(d > 0, 1.0 / d.clamp_min(1e-300).sqrt(), 0.0)
    v1 = d.sqrt() / d.sqrt().norm(dim=-1, keepdim=True).clamp_min(1e-300)
    k = max(min(max_steps, size - 1), 0)
    kb = np.clip(np.minimum(max_steps, lens - 1), 0, None)  # each head's step limit
    start = np.zeros((batch, size))  # fixed: head b's row in fast_spectral_init's at its length
    for n in np.unique(lens[lens > 0]):
        heads = np.flatnonzero(lens == n)
        start[heads, :n] = np.random.default_rng(12345).normal(size=(heads[-1] + 1, n))[heads]
    start = torch.as_tensor(start, device=dev)
    start = start - (start * v1).sum(-1, keepdim=True) * v1
    q = torch.zeros(batch, k + 1, size, dtype=f64, device=dev)
    q[:, 0] = start / start.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    alpha, beta = (
        torch.zeros(batch, k, dtype=f64, device=dev),
        torch.zeros(batch, k, dtype=f64, device=dev),
    )
    alpha_h, beta_h = np.zeros((batch, k)), np.zeros((batch, k))  # host copies for the checks
    used = np.zeros(batch, dtype=np.int64)
    kb_d = torch.as_tensor(kb, device=dev)
    active = np.flatnonzero(kb > 0)
    while len(active):
        j0 = int(used[active[0]])  # active heads move in step
        j1 = min(k, j0 + every)
        idx = torch.as_tensor(active, device=dev)
        if len(active) > batch // 4:  # all heads, the finished ones masked off: no copy of P
            live = torch.zeros(batch, dtype=torch.bool, device=dev)
            live[idx] = True
            taken = _device_steps(p, dis, v1, q, alpha, beta, kb_d, live, j0, j1)[idx]
        else:
            sub = [t.index_select(0, idx) for t in (q, alpha, beta)]
            live = torch.ones(len(active), dtype=torch.bool, device=dev)
            pick = (p.index_select(0, idx), dis[idx], v1[idx], *sub, kb_d[idx], live)
            taken = _device_steps(*pick, j0, j1)
            for full, part in zip((q, alpha, beta), sub, strict=True):
                full[idx] = part
        got = (
            torch.cat([alpha[idx, j0:j1], beta[idx, j0:j1], taken[:, None].to(f64)], 1)
            .cpu()
            .numpy()
        )
        alpha_h[active, j0:j1], beta_h[active, j0:j1] = got[:, : j1 - j0], got[:, j1 - j0 : -1]
        steps = got[:, -1].astype(np.int64)
        used[active] += steps
        go = active[steps == j1 - j0]  # the others found an invariant subspace or their limit
        if len(go) == 0 or j1 < 2:  # (heads of 2 points: one step, then the full decomposition)
            break
        _, vecs = _ritz(alpha_h[go], beta_h[go], j1)
        res = np.abs(vecs[:, -1, :]) * beta_h[go, j1 - 1][:, None]
        converged = (res < tol).all(-1) & (j1 >= np.minimum(kb[go], 2 * every))
        active = go[~(converged | (used[go] >= kb[go]))]
    out = torch.zeros(batch, size, 2, dtype=f64, device=dev)
    for steps in np.unique(used):
        heads = np.flatnonzero((used == steps) & (lens > 0))
        if steps < 2:  # P's graph falls apart into tiny pieces: that head's full decomposition
            for b in heads:
                one = p[b : b + 1, : lens[b], : lens[b]].cpu().numpy()
                out[b, : lens[b]] = torch.as_tensor(spectral_vectors(one)[0], device=dev)
            continue
        if len(heads) == 0:
            continue
        vals, vecs = _ritz(alpha_h[heads], beta_h[heads], int(steps))
        h = torch.as_tensor(heads, device=dev)
        top = torch.as_tensor(vecs[:, :, ::-1].copy(), device=dev)  # [h, steps, 2], largest first
        basis = torch.einsum("hsn,hsc->hnc", q[h, :steps], top)  # Ritz vectors v_k
        out[h] = basis * dis[h, :, None] * torch.as_tensor(vals[:, None, ::-1].copy(), device=dev)
    raw, final = out.cpu().numpy(), np.zeros((batch, size, 2))
    for n in np.unique(lens[lens > 0]):  # finish_spectral per length, each head's own jitter
        heads = np.flatnonzero(lens == n)
        final[heads, :n] = finish_spectral(raw[heads, :n], seed=seed, index=heads)
    return torch.as_tensor(final, device=dev)


def _device_steps(
    p: torch.Tensor,
    dis: torch.Tensor,
    v1: torch.Tensor,
    q: torch.Tensor,
    alpha: torch.Tensor,
    beta: torch.Tensor,
    kb: torch.Tensor,
    live: torch.Tensor,
    j0: int,
    j1: int,
) -> torch.Tensor:
    """Lanczos steps j0..j1-1 of every head in ``live`` (``_lanczos_head`` batched): ``P x`` (P is
    symmetric) in P's dtype, the rest in float64, full reorthogonalisation twice (classical
    Gram-Schmidt against ``v1`` and the basis); no host synchronisation. Returns the steps taken."""
    import torch

    taken = torch.zeros(p.shape[0], dtype=torch.int64, device=p.device)
    for j in range(j0, j1):
        run = live & (kb > j)
        qj = q[:, j]
        # x^T P = (P x)^T for symmetric P: the row form is faster than P @ x in CPU torch
        w = torch.bmm((dis * qj).to(p.dtype).unsqueeze(1), p).squeeze(1).to(torch.float64) * dis
        a = (w * qj).sum(-1)
        basis = q[:, : j + 1]
        for _ in range(2):
            w = w - (w * v1).sum(-1, keepdim=True) * v1
            c = torch.bmm(w.unsqueeze(1), basis.transpose(1, 2))  # [B, 1, j + 1]
            w = w - torch.bmm(c, basis).squeeze(1)
        b = w.norm(dim=-1)
        alpha[:, j] = torch.where(run, a, alpha[:, j])
        beta[:, j] = torch.where(run, b, beta[:, j])
        taken += run
        live = run & (b >= 1e-10)  # below: an invariant subspace, the Ritz pairs are exact
        q[:, j + 1] = torch.where(live[:, None], w / b.clamp_min(1e-300)[:, None], q[:, j + 1])
    return taken
