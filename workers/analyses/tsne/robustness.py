"""Robustness of the two t-SNEs to disturbed input (docs/analyses.md#robustness, thesis 4.4).

A fraction of the (non-special) tokens is replaced by tokens drawn at random from the same text;
both t-SNEs run R times with and without disturbance; we report the KL distributions.
"""

from __future__ import annotations

import numpy as np

from workers.core.errors import HeadscopeError


def disturb_ids(
    input_ids: list[int], special: list[bool], *, fraction: float, rng: np.random.Generator
) -> tuple[list[int], list[int]]:
    """Replace ``round(fraction * m)`` (at least one) of the m non-special tokens by tokens drawn
    uniformly from the text's own non-special tokens. Returns the new ids and replaced positions."""
    positions = [i for i, s in enumerate(special) if not s]
    if len(positions) < 2:
        raise HeadscopeError("the robustness experiment needs at least 2 non-special tokens")
    count = max(1, int(round(fraction * len(positions))))
    chosen = sorted(rng.choice(positions, size=count, replace=False).tolist())
    pool = [input_ids[i] for i in positions]
    ids = list(input_ids)
    for i in chosen:
        ids[i] = int(pool[rng.integers(len(pool))])
    return ids, chosen


def summarize(kls: np.ndarray) -> dict[str, float]:
    """Mean, standard deviation (ddof=1), min and max of a KL sample."""
    kls = np.asarray(kls, dtype=np.float64)
    return {
        "mean": float(kls.mean()),
        "sd": float(kls.std(ddof=1)) if kls.size > 1 else 0.0,
        "min": float(kls.min()),
        "max": float(kls.max()),
    }
