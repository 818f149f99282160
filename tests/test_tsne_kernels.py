"""The fast engine's compiled CPU kernels against plain float64 numpy: the exact KL and its logarithm,
P's entropy, and the forces and gradient of the optimiser (issue 34: each cut in CPU keeps the results)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workers.analyses.tsne.affinities import _kl_torch, entropies, head_affinities, kl_divergence
from workers.analyses.tsne.options import numba_available

pytestmark = pytest.mark.skipif(not numba_available(), reason="the compiled kernels need numba")


def random_p(batch: int, n: int, *, seed: int, sharp: float = 4.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(batch, n, n)) * sharp
    a = np.exp(logits - logits.max(-1, keepdims=True))
    return head_affinities(a / a.sum(-1, keepdims=True))


def test_log64_is_within_two_ulp_of_numpy():
    from workers.analyses.tsne.cpu_kernels import log64

    rng = np.random.default_rng(0)
    x = np.concatenate([
        np.exp(rng.uniform(-744, 709, 100_000)),  # subnormal to near the largest float64
        1.0 + rng.random(10_000) * 1e-9,  # log(1 + tiny d2): close points
        [5e-324, 1e-310, 2.2250738585072014e-308, 1.0, 2.0, np.sqrt(2.0), np.nextafter(np.sqrt(2.0), 3.0), 0.5, 1.7e308],
    ])  # fmt: skip
    x = x[(x > 0) & np.isfinite(x)]
    got, want = log64(x), np.log(x)
    ulp = np.spacing(np.maximum(np.abs(want), np.finfo(float).tiny))
    assert (np.abs(got - want) <= 2 * ulp + 1e-300).all(), np.abs(got - want).max()
    assert log64(np.array([1.0]))[0] == 0.0


@pytest.mark.parametrize("spread", [1e-3, 1.0, 30.0])
def test_compiled_kl_equals_the_torch_kl(spread):
    """The compiled KL (the one every engine reports) against the torch float64 KL: maps tight, ordinary
    and wide, P with exact zeros and a non-symmetric P, batched as [2, 3] and as CPU tensors."""
    p = random_p(6, 70, seed=1).reshape(2, 3, 70, 70)
    p[0, 0, :5, 5:9] = 0.0
    p[0, 1] = p[0, 1] * np.linspace(0.5, 1.5, 70)[:, None]  # not symmetric
    y = np.random.default_rng(2).normal(size=(2, 3, 70, 2)) * spread
    y[1, 2, 3] = y[1, 2, 4]  # two points at the same place
    got = kl_divergence(p, y)
    want = _kl_torch(p, y)
    assert got.shape == (2, 3)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    np.testing.assert_allclose(
        kl_divergence(torch.as_tensor(p), torch.as_tensor(y)), want, rtol=1e-12, atol=0
    )
    three = np.random.default_rng(3).normal(size=(2, 3, 70, 3))  # a 3-d map
    np.testing.assert_allclose(kl_divergence(p, three), _kl_torch(p, three), rtol=1e-12, atol=0)


def test_kl_of_a_non_finite_map_is_not_finite():
    p = random_p(2, 20, seed=4)
    y = np.random.default_rng(5).normal(size=(2, 20, 2))
    y[0, 3, 0] = np.nan
    y[1, 2, 1] = np.inf
    assert not np.isfinite(kl_divergence(p, y)).any()


def test_compiled_entropy_equals_xlogy():
    from scipy.special import xlogy

    p = random_p(3, 50, seed=6)
    p[1, 0, 1:4] = 0.0
    p[2, 4, 7] = 1e-310  # subnormal
    np.testing.assert_allclose(entropies(p), [xlogy(q, q).sum() for q in p], rtol=1e-13, atol=0)
    p[0, 1, 2] = -1e-3
    assert np.isnan(entropies(p)[0]) and np.isfinite(entropies(p)[1:]).all()


def test_kl_estimate_takes_each_pair_once_only_for_a_symmetric_p():
    """The schedule's float32 KL estimate (``_cross_entropy``) is the exact KL to ~1e-6 relative, with
    each pair once (``sym``) for a symmetric P, and over all pairs for a P that is not symmetric (the
    host state checks which)."""
    from workers.analyses.tsne.affinities import kernel_p
    from workers.analyses.tsne.cpu_kernels import _cross_entropy
    from workers.analyses.tsne.host_engine import _NumbaState

    p = random_p(1, 90, seed=7)
    y = (np.random.default_rng(8).normal(size=(1, 90, 2)) * 5).astype(np.float32)
    lop = p * np.linspace(0.2, 1.8, 90)[:, None]  # rows scaled: not symmetric
    lop /= lop.sum()
    for q, sym in ((p, True), (lop, False)):
        state = _NumbaState(kernel_p(q), y.astype(np.float64), entropies(q))
        assert state.sym is sym
        exact = kl_divergence(q, y.astype(np.float64))[0]
        est = entropies(q)[0] + _cross_entropy(state.p[0], state.y[0, 0], state.y[0, 1], sym)
        assert est == pytest.approx(exact, rel=2e-6)
    wrong = entropies(lop)[0] + _cross_entropy(kernel_p(lop)[0], y[0, :, 0], y[0, :, 1], True)
    assert wrong != pytest.approx(kl_divergence(lop, y.astype(np.float64))[0], rel=1e-3)


@pytest.mark.parametrize("size", [2, 3, 40, 150])
def test_ritz_pairs_are_those_of_eigh_tridiagonal(size):
    """The Lanczos start's Ritz solver calls LAPACK's drivers directly: bit for bit scipy's answer."""
    from scipy.linalg import eigh_tridiagonal

    from workers.analyses.tsne.initialization import _ritz

    rng = np.random.default_rng(size)
    alpha, beta = rng.normal(size=(3, 150)), np.abs(rng.normal(size=(3, 150)))
    vals, vecs = _ritz(alpha, beta, size)
    for i in range(3):
        w, v = eigh_tridiagonal(
            alpha[i, :size], beta[i, : size - 1], select="i", select_range=(size - 2, size - 1)
        )
        np.testing.assert_array_equal(vals[i], w)
        np.testing.assert_array_equal(vecs[i], v)


@pytest.mark.parametrize("spread", [1e-3, 1.0, 20.0])
def test_forces_equal_the_float64_gradient(spread):
    """The compiled forces (a true float32 division per pair since issue 34, no reciprocal estimate) and
    the gradient they make equal a plain float64 numpy evaluation to float32 precision."""
    from workers.analyses.tsne.affinities import kernel_p
    from workers.analyses.tsne.cpu_kernels import _forces

    n = 300
    p = random_p(1, n, seed=9, sharp=3.0)[0]
    y = (np.random.default_rng(10).normal(size=(2, n)) * spread).astype(np.float32)
    out = np.empty((4, n), np.float32)
    z = _forces(kernel_p(p[None])[0], y[0], y[1], out)
    yd = y.astype(np.float64)
    dx, dy = yd[0][:, None] - yd[0][None], yd[1][:, None] - yd[1][None]
    w = 1.0 / (1.0 + dx**2 + dy**2)
    np.fill_diagonal(w, 0.0)
    want = np.stack(
        [(p * w * dx).sum(1), (p * w * dy).sum(1), (w * w * dx).sum(1), (w * w * dy).sum(1)]
    )
    assert z == pytest.approx(w.sum(), rel=1e-6)
    scale = np.abs(want).max(axis=1, keepdims=True)
    assert (np.abs(out - want) <= 1e-5 * scale).all(), (np.abs(out - want) / scale).max(axis=1)
    ex = 12.0
    grad, want_grad = ex * out[:2] - out[2:] / z, ex * want[:2] - want[2:] / w.sum()
    assert (np.abs(grad - want_grad) <= 1e-5 * np.abs(want_grad).max()).all()


def test_update_is_openTSNEs_rule_with_clipping():
    """The branch-free update (``_update``): delta-bar-delta gains by the signs of update and gradient
    (zeros included), momentum, the step clipped to ``max_step``, as a float64 numpy evaluation."""
    from workers.analyses.tsne.cpu_kernels import _update

    rng = np.random.default_rng(11)
    n = 64
    f = rng.normal(size=(4, n)).astype(np.float32) * np.float32(3)
    f[:, :4] = 0.0  # zero gradients
    u = rng.normal(size=(2, n)).astype(np.float32)
    u[:, 4:8] = 0.0  # zero updates
    g = rng.uniform(0.5, 2.0, size=(2, n)).astype(np.float32)
    y = rng.normal(size=(2, n)).astype(np.float32)
    ex, iz, mom, lr, max_step = 4.0, 0.5, 0.8, 3.0, 5.0
    grad = ex * f[:2].astype(np.float64) - f[2:] * iz
    want_g = np.where(np.sign(u) != np.sign(grad), g + 0.2, g * 0.8 + 0.01)
    want_u = mom * u - lr * want_g * grad
    norm = np.linalg.norm(want_u, axis=0)
    assert (norm > max_step).sum() > 5  # clipping is exercised
    want_u = np.where(norm > max_step, want_u / norm * max_step, want_u)
    want_y = y + want_u
    f32 = np.float32
    uu, gg, yy = u.copy(), g.copy(), y.copy()
    m0, m1 = _update(
        *f,
        uu[0],
        uu[1],
        gg[0],
        gg[1],
        yy[0],
        yy[1],
        f32(ex),
        f32(iz),
        f32(mom),
        f32(lr),
        f32(max_step),
    )
    np.testing.assert_allclose(gg, want_g, rtol=1e-6)
    np.testing.assert_allclose(uu, want_u, rtol=1e-5, atol=1e-5 * np.abs(want_u).max())
    np.testing.assert_allclose(yy, want_y, rtol=1e-5, atol=1e-5 * np.abs(want_y).max())
    assert (m0, m1) == pytest.approx(tuple(yy.astype(np.float64).sum(1)), rel=1e-6, abs=1e-5)
