"""Quantile-equidistant rescaling (docs/analyses.md#quantile-equidistant-rescaling, thesis A.3)."""

from __future__ import annotations

import numpy as np
import pytest

from frontend.figures.rescale import fit_axis, quantile_rescale, ticks


@pytest.fixture
def clustered():
    rng = np.random.default_rng(0)
    return np.concatenate([rng.normal(0, 0.1, 300), rng.normal(10, 3, 50), [40.0]])


@pytest.mark.parametrize("k", [5, 100, 351])
def test_phi_is_monotone_and_maps_min_max_to_0_1(clustered, k):
    axis = fit_axis(clustered, k=k)
    grid = np.linspace(clustered.min(), clustered.max(), 2000)
    phi = axis.forward(grid)
    assert np.all(np.diff(phi) >= 0)
    assert axis.forward(np.array([clustered.min()]))[0] == 0.0
    assert axis.forward(np.array([clustered.max()]))[0] == 1.0


def test_ticks_are_equidistant_and_labels_invert_phi(clustered):
    axis = fit_axis(clustered, k=100)
    pos, labels = ticks(axis, count=6, digits=12)
    assert np.allclose(np.diff(pos), 0.2)
    for t, label in zip(pos, labels, strict=True):
        assert axis.forward(np.array([float(label)]))[0] == pytest.approx(t, abs=1e-9)


def test_k_equal_n_gives_the_empirical_cdf():
    x = np.array([3.0, 1.0, 7.0, 2.0, 10.0])
    axis = fit_axis(x, k=len(x) - 1)
    np.testing.assert_allclose(axis.forward(np.sort(x)), np.linspace(0, 1, 5))


def test_rescaled_axes_are_roughly_uniform(clustered):
    res = quantile_rescale(clustered, clustered[::-1], k=100)
    hist, _ = np.histogram(res.x, bins=10, range=(0, 1))
    assert hist.max() < 2.5 * len(clustered) / 10  # the raw data puts 85 % in one bin
    raw_hist, _ = np.histogram(clustered, bins=10)
    assert raw_hist.max() > 0.8 * len(clustered)


def test_repeated_values_do_not_divide_by_zero():
    x = np.array([1.0] * 50 + [2.0] * 3 + [5.0])
    axis = fit_axis(x, k=100)
    assert np.all(np.isfinite(axis.forward(x)))
    assert np.all(np.diff(axis.knots) > 0)
    pos, labels = ticks(axis)
    assert all(np.isfinite(float(v)) for v in labels)
    const = fit_axis(np.full(10, 3.0))
    assert np.all(const.forward(np.full(10, 3.0)) == 0.5)
    assert ticks(const)[1] == ["3"] * 6


def test_rejects_empty_input():
    with pytest.raises(ValueError, match="no finite values"):
        fit_axis(np.array([np.nan]))


def test_repeated_quantiles_merge_to_the_mean_of_their_levels():
    x = np.array([1.0] * 40 + [2.0] * 7 + list(np.linspace(3.0, 4.0, 20)) + [9.0] * 30)
    k = 50
    axis = fit_axis(x, k=k)
    levels = np.linspace(0.0, 1.0, k + 1)
    q = np.quantile(x, levels)
    assert axis.knots.size < k + 1  # some quantiles repeat
    for i, knot in enumerate(axis.knots):
        want = levels[q == knot].mean() if 0 < i < axis.knots.size - 1 else float(i > 0)
        assert axis.levels[i] == pytest.approx(want, abs=1e-12), (i, knot)
