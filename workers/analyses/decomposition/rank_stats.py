"""Spearman's rho between two models' term importances, per state and term (paper Fig. 3d-f).

numpy and scipy only, below both the analysis core and the dashboard, which both compare models.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import spearmanr

from workers.core.errors import HeadscopeError


def spearman_per_state(
    importance_a: np.ndarray,
    importance_b: np.ndarray,
    *,
    keep: np.ndarray | list[int] | None = None,
) -> np.ndarray:
    """[state, term]: Spearman's rho over tokens between two [state, token, term] importance arrays.

    States beyond the shallower model's depth are left out; NaN where either side is constant over
    the tokens (e.g. attention at state 0). ``keep``: the token indices to compare.
    """
    a, b = np.asarray(importance_a, dtype=np.float64), np.asarray(importance_b, dtype=np.float64)
    if a.ndim != 3 or b.ndim != 3 or a.shape[1:] != b.shape[1:]:
        raise HeadscopeError(
            f"importances must be [state, token, term] with the same tokens, got {a.shape} and {b.shape}"
        )
    if keep is not None:
        a, b = a[:, keep], b[:, keep]
    if a.shape[1] < 3:
        raise HeadscopeError("Spearman's rho needs at least 3 tokens")
    n_states = min(a.shape[0], b.shape[0])
    rho = np.full((n_states, a.shape[2]), np.nan)
    for s in range(n_states):
        for k in range(a.shape[2]):
            x, y = a[s, :, k], b[s, :, k]
            if np.ptp(x) > 0 and np.ptp(y) > 0:
                rho[s, k] = float(spearmanr(x, y).statistic)
    return rho
