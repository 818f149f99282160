"""Agreement of two models' attention maps on the same inputs (paper Fig. 3 and A8).

numpy only; ``workers.analyses.positional.encodings`` re-exports :func:`attention_agreement`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workers.core.errors import HeadscopeError


def attention_agreement(A: np.ndarray, B: np.ndarray, *, eps: float = 1e-12) -> dict[str, Any]:
    """Two models' attention maps on the same inputs. # [..., query, key], rows sum to 1

    ``cosine``: cosine similarity of the flattened maps; ``cosine_per_map`` the same per map
    (leading axes flattened); ``jsd``: mean Jensen–Shannon divergence (base 2, in [0, 1]) of rows;
    ``jsd_per_map`` per map.
    """
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    if A.shape != B.shape or A.ndim < 2:
        raise HeadscopeError(
            f"attention maps must have the same shape, got {list(A.shape)} and {list(B.shape)}"
        )
    if np.any(A < 0) or np.any(B < 0):
        raise HeadscopeError("attention maps must be non-negative")
    q, k = A.shape[-2:]
    a, b = A.reshape(-1, q, k), B.reshape(-1, q, k)  # [map, query, key]

    def cos(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        num = (x * y).sum(axis=-1)
        den = np.linalg.norm(x, axis=-1) * np.linalg.norm(y, axis=-1)
        return num / np.maximum(den, eps)

    p = a / np.maximum(a.sum(axis=-1, keepdims=True), eps)
    r = b / np.maximum(b.sum(axis=-1, keepdims=True), eps)
    m = (p + r) / 2

    def kl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(x > 0, x * np.log2(x / np.maximum(y, eps)), 0.0)
        return terms.sum(axis=-1)

    jsd = np.clip((kl(p, m) + kl(r, m)) / 2, 0.0, 1.0)  # [map, query]
    return {
        "cosine": float(cos(a.reshape(1, -1), b.reshape(1, -1))[0]),
        "cosine_per_map": cos(a.reshape(len(a), -1), b.reshape(len(b), -1)).tolist(),
        "jsd": float(jsd.mean()),
        "jsd_per_map": jsd.mean(axis=1).tolist(),
        "n_maps": int(len(a)),
    }
