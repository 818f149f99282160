"""The fast engine's spectral start: openTSNE's diffusion-map start by Lanczos.

``spectral_init`` (tsne.py) takes a full eigendecomposition of every head's normalised P, O(n^3)
each; the start needs only the two leading non-trivial eigenpairs. Lanczos with full
reorthogonalisation finds them with a few dozen matrix-vector products, all heads in parallel
(``fast_kernels.lanczos_round``), and gives the same start (tested).
"""

from __future__ import annotations

import numpy as np

from workers.analysis import fast_tsne


def fast_spectral_init(
    p: np.ndarray, *, seed: int = 0, max_steps: int = 150, tol: float = 1e-6, every: int = 20
) -> np.ndarray:
    """``spectral_init`` by Lanczos (only the eigenpairs it needs), heads in parallel: [B, n, 2].

    The diffusion map of P: with ``m = D^-1/2 P D^-1/2`` and its eigenpairs (λ_k, v_k) after the
    trivial one (λ = 1, v ∝ sqrt(d)), the start is ``D^-1/2 v_k λ_k`` for k = 1, 2, then the same
    sign, scale and jitter as ``spectral_init``. A head stops when both Ritz residuals are below
    ``tol`` (checked every ``every`` steps). Falls back to ``spectral_init`` without numba.
    """
    from workers.analysis.tsne import finish_spectral, spectral_init, spectral_vectors

    if not fast_tsne.numba_available():
        return spectral_init(p, seed=seed)
    from workers.analysis.fast_kernels import lanczos_round

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
    pk = fast_tsne.kernel_p(p)
    active = np.arange(batch)
    while len(active):
        j0 = int(used[active[0]])  # active heads move in step
        j1 = min(k, j0 + every)
        lanczos_round(pk, dis, v1, q, alpha, beta, active, j0, j1, taken)
        used[active] += taken[active]
        stopped = taken[active] < (j1 - j0)  # invariant subspace found
        _, vecs = _ritz(alpha[active], beta[active], int(used[active].max()))
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
        basis = np.einsum("hsn,hsc->hnc", q[heads, :steps], top)  # Ritz vectors v_k
        out[heads] = basis * dis[heads, :, None] * vals[:, None, ::-1]
    return finish_spectral(out, seed=seed)


def _ritz(alpha: np.ndarray, beta: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The two largest eigenpairs of each Lanczos tridiagonal matrix ``[h, size, size]``:
    ([h, 2] ascending, [h, size, 2]). LAPACK's tridiagonal solver, one head at a time: no BLAS
    threads to fight the kernels' threads for the cores."""
    from scipy.linalg import eigh_tridiagonal

    h = alpha.shape[0]
    vals, vecs = np.zeros((h, 2)), np.zeros((h, size, 2))
    for i in range(h):
        w, v = eigh_tridiagonal(
            alpha[i, :size], beta[i, : size - 1], select="i", select_range=(size - 2, size - 1)
        )
        vals[i], vecs[i] = w, v
    return vals, vecs
