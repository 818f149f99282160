"""Quantile-equidistant rescaling of scatter plots (docs/analyses.md#quantile-equidistant-rescaling, thesis A.3).

Pure numpy, no Dash: the figure functions and the tests call it directly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class AxisRescale:
    """The piecewise-linear map φ of one axis through (q_0, 0), (q_1, 1/k), …, (q_k, 1)."""

    knots: np.ndarray  # [m] strictly increasing original values (repeated quantiles merged)
    levels: np.ndarray  # [m] their images in [0, 1]

    def forward(self, x: np.ndarray) -> np.ndarray:
        """φ(x) in [0, 1]."""
        if self.knots.size == 1:
            return np.full(np.shape(x), 0.5)
        return np.interp(x, self.knots, self.levels)

    def inverse(self, t: np.ndarray) -> np.ndarray:
        """φ⁻¹(t): the original value at rescaled position t."""
        if self.knots.size == 1:
            return np.full(np.shape(t), float(self.knots[0]))
        return np.interp(t, self.levels, self.knots)


def fit_axis(values: np.ndarray, *, k: int = 100) -> AxisRescale:
    """φ for one axis from k quantiles (k + 1 knots from min to max); k >= n gives the ECDF.

    Repeated quantile values are merged (keeping the mean of their levels) so φ never divides by
    zero and stays monotone.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    if v.size == 0:
        raise ValueError("no finite values to rescale")
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    levels = np.linspace(0.0, 1.0, k + 1)
    q = np.quantile(v, levels)
    uniq, inverse = np.unique(q, return_inverse=True)
    # each knot's level: the mean of the levels of its repeated quantiles (one pass: the gallery's
    # 270 maps fit 540 axes per update)
    merged = np.bincount(inverse, weights=levels, minlength=uniq.size) / np.bincount(
        inverse, minlength=uniq.size
    )
    if uniq.size > 1:
        merged[0], merged[-1] = 0.0, 1.0
    return AxisRescale(knots=uniq, levels=merged)


def ticks(axis: AxisRescale, *, count: int = 6, digits: int = 3) -> tuple[list[float], list[str]]:
    """Equidistant tick positions in [0, 1] and the original values φ⁻¹(t) as labels."""
    pos = np.linspace(0.0, 1.0, count)
    vals = axis.inverse(pos)
    return pos.tolist(), [f"{v:.{digits}g}" for v in vals]


@dataclass
class Rescaled:
    """Rescaled coordinates and the ticks that label them in original units."""

    x: list[float]
    y: list[float]
    x_ticks: list[float]
    x_labels: list[str]
    y_ticks: list[float]
    y_labels: list[str]


def quantile_rescale(x: np.ndarray, y: np.ndarray, *, k: int = 100, n_ticks: int = 6) -> Rescaled:
    """Rescale both axes of a scatter plot; see the module docstring."""
    ax, ay = fit_axis(x, k=k), fit_axis(y, k=k)
    xt, xl = ticks(ax, count=n_ticks)
    yt, yl = ticks(ay, count=n_ticks)
    return Rescaled(
        x=ax.forward(np.asarray(x, dtype=np.float64)).tolist(),
        y=ay.forward(np.asarray(y, dtype=np.float64)).tolist(),
        x_ticks=xt,
        x_labels=xl,
        y_ticks=yt,
        y_labels=yl,
    )
