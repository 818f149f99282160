"""Compiled CPU kernels of the fast t-SNE engine (numba).

Each head is optimised by one thread; heads run in parallel (``prange``). Inside a head the
exact Student-t forces are summed over all pairs in float32 SIMD loops, so the whole head
(P, positions, forces) stays in the core's cache. Positions are stored axis-major,
``y[head, axis, point]``, so the inner loops read contiguous memory.

The gradient omits the factor 4, as openTSNE's does::

    grad_i = ex * sum_j p_ij w_ij (y_i - y_j) - (1 / Z) sum_j w_ij^2 (y_i - y_j),
    w_ij = 1 / (1 + |y_i - y_j|^2),  Z = sum_{i != j} w_ij.

Importing this module needs numba; ``fast`` falls back to torch without it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

# error_model="numpy": no ZeroDivisionError branch, so the loops vectorise; fastmath: reassociate.
_OPT: dict[str, Any] = {"fastmath": True, "error_model": "numpy", "cache": True, "nogil": True}
# The pair loops without "arcp": a true division instead of a reciprocal estimate + Newton step. The
# divider runs beside the FMA pipes the loop is bound by, so it is faster, and each w is exact to
# float32 rounding (measured: docs/tsne.md, "Measured choices in the code").
_DIV: dict[str, Any] = {**_OPT, "fastmath": {"reassoc", "contract", "nsz", "nnan", "ninf"}}
_F = np.float32
_LN2 = np.float32(np.log(2.0))


@intrinsic
def _bits(typingctx, x):  # pragma: no cover - compiled
    """The bits of a float32 / float64 as an int32 / int64 (a bitcast: free, and vectorisable)."""
    if x not in (types.float32, types.float64):
        return None
    width = x.bitwidth

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(width))

    return getattr(types, f"int{width}")(x), codegen


@intrinsic
def _from_bits(typingctx, b, like):  # pragma: no cover - compiled
    """The float of ``like``'s type whose bits are the low bits of the integer ``b``."""
    if not isinstance(b, types.Integer) or like not in (types.float32, types.float64):
        return None
    width = like.bitwidth

    def codegen(context, builder, signature, args):
        low = args[0] if b.bitwidth == width else builder.trunc(args[0], ir.IntType(width))
        return builder.bitcast(low, ir.FloatType() if width == 32 else ir.DoubleType())

    return like(b, like), codegen


@njit(**_DIV)
def _forces(p, y0, y1, out):  # pragma: no cover - compiled
    """Attraction (out[0:2]) and unnormalised repulsion (out[2:4]) of every point; returns Z."""
    n = y0.shape[0]
    one = _F(1.0)
    z = 0.0
    for i in range(n):
        pi = p[i]
        a0 = y0[i]
        a1 = y1[i]
        ax = _F(0.0)
        ay = _F(0.0)
        rx = _F(0.0)
        ry = _F(0.0)
        zi = _F(0.0)
        for j in range(n):  # the diagonal adds w = 1 to zi and nothing to the forces
            dx = a0 - y0[j]
            dy = a1 - y1[j]
            w = one / (one + dx * dx + dy * dy)
            pw = pi[j] * w
            ax += pw * dx
            ay += pw * dy
            w2 = w * w
            rx += w2 * dx
            ry += w2 * dy
            zi += w
        z += zi - 1.0
        out[0, i] = ax
        out[1, i] = ay
        out[2, i] = rx
        out[3, i] = ry
    return z


@njit(**_DIV)
def _update(ax, ay, rx, ry, u0, u1, g0, g1, y0, y1, ex, iz, mom, lr, max_step):  # pragma: no cover
    """One step of every point from its forces (``_forces``' rows): gains, momentum update clipped to
    ``max_step``, new positions (in place); returns the sums of the new positions. Branch-free, so the
    loop vectorises (measured: docs/tsne.md, "Measured choices in the code")."""
    m0 = 0.0
    m1 = 0.0
    for i in range(y0.shape[0]):
        gx = ex * ax[i] - rx[i] * iz
        gy = ex * ay[i] - ry[i] * iz
        ux = u0[i]
        uy = u1[i]
        # np.sign(update) != np.sign(gradient), as openTSNE: +0.2, else x0.8 + 0.01
        keep_x = ((ux > 0) == (gx > 0)) and ((ux < 0) == (gx < 0))
        keep_y = ((uy > 0) == (gy > 0)) and ((uy < 0) == (gy < 0))
        hx = g0[i] * _F(0.8) + _F(0.01) if keep_x else g0[i] + _F(0.2)
        hy = g1[i] * _F(0.8) + _F(0.01) if keep_y else g1[i] + _F(0.2)
        ux = mom * ux - lr * hx * gx
        uy = mom * uy - lr * hy * gy
        norm = np.sqrt(ux * ux + uy * uy)
        scale = max_step / max(norm, max_step)  # exactly 1 unless the step is clipped
        ux *= scale
        uy *= scale
        g0[i] = hx
        g1[i] = hy
        u0[i] = ux
        u1[i] = uy
        a = y0[i] + ux
        b = y1[i] + uy
        y0[i] = a
        y1[i] = b
        m0 += a
        m1 += b
    return m0, m1


@njit(**_OPT)
def _steps(p, y, u, g, buf, steps, ex, mom, lr, max_step):  # pragma: no cover - compiled
    """``steps`` iterations of momentum gradient descent with delta-bar-delta gains (openTSNE's
    rule, steps clipped to ``max_step``, embedding re-centred after each step)."""
    n = y.shape[1]
    for _ in range(steps):
        z = _forces(p, y[0], y[1], buf)
        iz = _F(1.0 / max(z, 1e-30))
        m0, m1 = _update(buf[0], buf[1], buf[2], buf[3], u[0], u[1], g[0], g[1], y[0], y[1],
                         ex, iz, mom, lr, max_step)  # fmt: skip
        m0 /= n
        m1 /= n
        for i in range(n):
            y[0, i] -= m0
            y[1, i] -= m1


@njit(inline="always", **_DIV)
def _log1p_d2(x):  # pragma: no cover - compiled
    """``log x`` for float32 ``x = 1 + d2 >= 1``: ``x = 2^e m`` with m in [1, 2) through the float
    bits, ``log m = 2 atanh(t)``, ``t = (m - 1) / (m + 1) < 1/3``, the series to t^9 (~1e-6)."""
    one = _F(1.0)
    b = _bits(x)
    e = _F((b >> 23) - 127)
    m = _from_bits((b & 0x7FFFFF) | 0x3F800000, one)
    t = (m - one) / (m + one)
    t2 = t * t
    series = one + t2 * (_F(1 / 3) + t2 * (_F(1 / 5) + t2 * (_F(1 / 7) + t2 * _F(1 / 9))))
    return e * _LN2 + _F(2.0) * t * series


@njit(**_DIV)
def _cross_entropy_row(pi, a0, a1, y0, y1):  # pragma: no cover - compiled
    """``(sum_j w_ij, sum_j p_ij log(1 + d2_ij))`` over the points given (float32)."""
    one = _F(1.0)
    zi = _F(0.0)
    si = _F(0.0)
    for j in range(y0.shape[0]):
        dx = a0 - y0[j]
        dy = a1 - y1[j]
        dj = one + dx * dx + dy * dy
        zi += one / dj
        si += pi[j] * _log1p_d2(dj)
    return zi, si


@njit(**_OPT)
def _cross_entropy(p, y0, y1, sym):  # pragma: no cover - compiled
    """``-sum_ij p_ij log q_ij`` of one head (float32 terms, float64 sums; ~1e-7 relative).

    ``log(1 + d2)`` is computed by ``_log1p_d2`` so the loops vectorise (a libm call per pair cost
    more than the force evaluation: docs/tsne.md, "Measured choices in the code"). With ``sym`` (P
    exactly symmetric, as every P of the engine) each pair is taken once, ``j > i``, and counted
    twice: half the work.
    """
    n = y0.shape[0]
    z = 0.0
    s = 0.0
    for i in range(n):
        if sym:
            zi, si = _cross_entropy_row(p[i, i + 1 :], y0[i], y1[i], y0[i + 1 :], y1[i + 1 :])
            z += 2.0 * zi
            s += 2.0 * si
        else:  # the diagonal adds w = 1 to zi and p_ii log 1 = 0 to si
            zi, si = _cross_entropy_row(p[i], y0[i], y1[i], y0, y1)
            z += zi - 1.0
            s += si
    return s + np.log(max(z, 1e-30))


@njit(parallel=True, cache=True)
def run_round(
    p, y, u, g, heads, steps, ex, mom, lr, max_step, entropy, kl, sym
):  # pragma: no cover
    """Advance each head in ``heads`` by ``steps`` iterations, then estimate its KL; heads run
    in parallel threads.

    Args:
        p: [head, n, n] float32 joint probabilities (exaggeration is applied here, by ``ex``).
        y, u, g: [head, 2, n] float32 positions, updates and gains, changed in place.
        heads: int64 indices of the heads to advance.
        ex, mom, lr: [head] float32 exaggeration, momentum and learning rate of each head.
        entropy: [head] float64 ``sum p log p``; kl: [head] float64 output, ``KL(P || Q)``.
        sym: every P is exactly symmetric (the KL estimate takes each pair once).
    """
    n = y.shape[2]
    for k in prange(heads.shape[0]):
        b = heads[k]
        buf = np.empty((4, n), np.float32)
        _steps(p[b], y[b], u[b], g[b], buf, steps, ex[b], mom[b], lr[b], max_step)
        kl[b] = entropy[b] + _cross_entropy(p[b], y[b, 0], y[b, 1], sym)


@njit(cache=True)
def run_round_serial(
    p, y, u, g, heads, steps, ex, mom, lr, max_step, entropy, kl, sym
):  # pragma: no cover
    """``run_round`` on the calling thread: for a single head, idle threads that spin while
    waiting only take CPU from the one that works."""
    n = y.shape[2]
    for k in range(heads.shape[0]):
        b = heads[k]
        buf = np.empty((4, n), np.float32)
        _steps(p[b], y[b], u[b], g[b], buf, steps, ex[b], mom[b], lr[b], max_step)
        kl[b] = entropy[b] + _cross_entropy(p[b], y[b, 0], y[b, 1], sym)


# ---------------------------------------------------------------------------- spectral start
# No BLAS or LAPACK call may run inside a prange region (OpenBLAS warns it may hang under OpenMP),
# so the Lanczos steps use plain loops and the small tridiagonal problems are solved by numpy.


@njit(**_OPT)
def _dot(a, b):  # pragma: no cover - compiled
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i] * b[i]
    return s


@njit(**_OPT)
def _lanczos_head(p, dis, v1, q, alpha, beta, j0, j1):  # pragma: no cover - compiled
    """Lanczos steps j0..j1-1 of ``m = D^-1/2 P D^-1/2`` restricted to the complement of its
    top eigenvector ``v1``, with full reorthogonalisation; returns the steps done (fewer at an
    invariant subspace). ``q`` [k + 1, n] holds the basis, ``q[0]`` the start."""
    n = p.shape[0]
    x = np.empty(n)
    w = np.empty(n)
    for j in range(j0, j1):
        qj = q[j]
        for i in range(n):
            x[i] = dis[i] * qj[i]
        for i in range(n):  # w = m @ qj, float32 P, float64 sums
            pi = p[i]
            acc = 0.0
            for t in range(n):
                acc += pi[t] * x[t]
            w[i] = dis[i] * acc
        alpha[j] = _dot(w, qj)
        for _ in range(2):  # full reorthogonalisation, twice
            c = _dot(w, v1)
            for i in range(n):
                w[i] -= c * v1[i]
            for r in range(j + 1):
                qr = q[r]
                c = _dot(w, qr)
                for i in range(n):
                    w[i] -= c * qr[i]
        b = np.sqrt(_dot(w, w))
        beta[j] = b
        if b < 1e-10:  # an invariant subspace: the Ritz pairs are exact
            return j + 1 - j0
        for i in range(n):
            q[j + 1, i] = w[i] / b
    return j1 - j0


@njit(parallel=True, cache=True)
def lanczos_round(p, dis, v1, q, alpha, beta, heads, j0, j1, done):  # pragma: no cover
    """Lanczos steps j0..j1-1 for each head in ``heads``; ``done[b]`` gets the steps taken."""
    for k in prange(heads.shape[0]):
        b = heads[k]
        done[b] = _lanczos_head(p[b], dis[b], v1[b], q[b], alpha[b], beta[b], j0, j1)


# ---------------------------------------------------------------------------- exact float64 KL
# The reported KL (``affinities.kl_divergence``) in float64 with a vectorisable logarithm: no
# ``arcp``/``afn`` fast-math flags (no approximate division or libm shortcuts), only reassociation
# of the sums and fused multiply-adds, so every term is within a few ulp of its exact value.
_EXACT: dict[str, Any] = {"fastmath": {"reassoc", "contract", "nsz"}, "error_model": "numpy", "cache": True,
                          "nogil": True}  # fmt: skip
_SQRT2 = np.sqrt(2.0)
_LN2_64 = np.log(2.0)


@njit(inline="always", **_EXACT)
def _log64(x):  # pragma: no cover - compiled
    """``log(x)`` of a positive finite float64 to ~2 ulp: ``x = 2^e m`` with m in [sqrt(1/2), sqrt(2)),
    ``log m = 2 atanh(t)``, ``t = (m - 1) / (m + 1)``, |t| < 0.172, the series to t^19 (truncation < 1e-16
    relative). Subnormal x are scaled by 2^54 first."""
    small = x < 2.2250738585072014e-308
    x = x * 18014398509481984.0 if small else x
    b = _bits(x)
    e = ((b >> 52) & 0x7FF) - 1023 - (54 if small else 0)
    m = _from_bits((b & 0xFFFFFFFFFFFFF) | 0x3FF0000000000000, x)  # [1, 2)
    big = m > _SQRT2
    m = m * 0.5 if big else m
    e = e + 1 if big else e
    t = (m - 1.0) / (m + 1.0)
    t2 = t * t
    s = 1.0 / 19.0
    s = s * t2 + 1.0 / 17.0
    s = s * t2 + 1.0 / 15.0
    s = s * t2 + 1.0 / 13.0
    s = s * t2 + 1.0 / 11.0
    s = s * t2 + 1.0 / 9.0
    s = s * t2 + 1.0 / 7.0
    s = s * t2 + 1.0 / 5.0
    s = s * t2 + 1.0 / 3.0
    return e * _LN2_64 + (2.0 * t + 2.0 * t * (t2 * s))


@njit(**_EXACT)
def log64(x):  # pragma: no cover - compiled
    """``_log64`` elementwise over a 1-d float64 array (for tests)."""
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = _log64(x[i])
    return out


@njit(**_EXACT)
def _xlogx_sum(p):  # pragma: no cover - compiled
    """``sum p log p`` over a 2-d float64 matrix (p >= 0; 0 log 0 = 0)."""
    s = 0.0
    for i in range(p.shape[0]):
        pi = p[i]
        for j in range(pi.shape[0]):
            v = pi[j]
            term = v * _log64(v if v > 0.0 else 1.0)
            s += term if v >= 0.0 else np.nan  # as xlogy: nan for a negative entry
    return s


@njit(**_EXACT)
def _kl_head(p, y, d):  # pragma: no cover - compiled
    """Exact ``KL(P || Q)`` of one head: p [n, n] float64, y [c, n] float64 axis-major, d [n] scratch.
    ``sum p log p + sum_{i != j} p_ij log(1 + d2_ij) + (sum p) log Z``, ``Z = sum_{i != j} 1 / (1 + d2_ij)``."""
    n = p.shape[0]
    cross = 0.0
    z = 0.0
    total = 0.0
    for i in range(n):
        for j in range(n):
            d[j] = 1.0
        for k in range(y.shape[0]):
            yk = y[k]
            a = yk[i]
            for j in range(n):
                t = a - yk[j]
                d[j] += t * t
        pi = p[i]
        zi = 0.0
        si = 0.0
        ti = 0.0
        for j in range(n):  # the diagonal: d = 1, log 1 = 0, and 1 / d = 1 taken off below
            x = d[j]
            zi += 1.0 / x
            si += pi[j] * _log64(x)
            ti += pi[j]
        z += zi - 1.0
        cross += si
        total += ti
    return _xlogx_sum(p) + cross + total * np.log(z)


@njit(parallel=True, cache=True)
def kl_heads(p, y, out):  # pragma: no cover - compiled
    """``_kl_head`` of every head, heads in parallel: p [B, n, n], y [B, c, n] float64, out [B]."""
    for b in prange(p.shape[0]):
        out[b] = _kl_head(p[b], y[b], np.empty(p.shape[1]))


@njit(parallel=True, cache=True)
def xlogx_heads(p, out):  # pragma: no cover - compiled
    """``sum p log p`` of every matrix [B, n, n] float64, in parallel: out [B]."""
    for b in prange(p.shape[0]):
        out[b] = _xlogx_sum(p[b])
