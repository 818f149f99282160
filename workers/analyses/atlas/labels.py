"""Head types, the score each is judged by, thresholds, labels and bootstrap intervals (docs/atlas.md).

Torch-free: the scores come in as arrays [layer, head] with their per-item parts (per text of the
corpus, per sequence of the repeated-random-tokens probe), so the bootstrap resamples items.

A score that is a mean over queries is the ratio of the items' summed values to their summed query
counts (the corpus statistics, docs/corpus.md); a probe score is the mean of its sequences' means
(every sequence has the same queries). ``local`` is ``1 / (1 + distance)`` of the corpus mean
distance, eligible only where ``previous`` stays under its threshold (previous not dominant).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# type -> (the statistic it is judged by, where it comes from)
TYPES: dict[str, tuple[str, str]] = {
    "previous-token": ("previous", "corpus"),
    "induction": ("induction", "random"),
    "duplicate-token": ("duplicate", "random"),
    "first-token": ("sink", "corpus"),
    "self": ("self", "corpus"),
    "local": ("distance", "corpus"),
    "broad": ("entropy_normalised", "corpus"),
}
# documented defaults (docs/atlas.md "Thresholds"); every one settable
THRESHOLDS: dict[str, float] = {
    "previous-token": 0.5,
    "induction": 0.3,
    "duplicate-token": 0.3,
    "first-token": 0.6,
    "self": 0.5,
    "local": 0.5,  # a mean distance of at most 1 token
    "broad": 0.85,
}
# the labelling rules (docs/atlas.md "Labels"): ``specific-first`` (the default): the best specific
# type that clears its threshold, else the best default one (an induction head rests on the first
# token where a text offers nothing to copy, so on SmolLM2 every head with induction >= 0.47 also has
# sink >= 0.86); ``largest``: SPEC 15 as written, the largest score among the types that clear
RULES: tuple[str, ...] = ("specific-first", "largest")
SPECIFIC: tuple[str, ...] = ("previous-token", "induction", "duplicate-token")
CORPUS_STATS: tuple[str, ...] = ("entropy_normalised", "sink", "previous", "self", "distance")
PROBE_STATS: tuple[str, ...] = ("induction", "duplicate", "previous")


def score_of(type_: str, value: np.ndarray) -> np.ndarray:
    """The score of ``type_`` from its statistic's value (``local``: ``1 / (1 + distance)``)."""
    return 1.0 / (1.0 + value) if type_ == "local" else value


@dataclass
class Items:
    """Per-item parts of some statistics: ``sums[stat]`` [item, layer, head] and ``counts[stat]``
    [item, layer] (a ratio of sums), or ``counts`` None: ``sums`` are each item's mean (a mean of
    means)."""

    sums: dict[str, np.ndarray]
    counts: dict[str, np.ndarray] | None

    @property
    def n(self) -> int:
        return int(next(iter(self.sums.values())).shape[0])

    def weighted(self, w: np.ndarray) -> dict[str, np.ndarray]:
        """Each statistic under item weights ``w`` [draw, item]: [draw, layer, head] (NaN: no query)."""
        out = {}
        for stat, s in self.sums.items():
            num = np.einsum("bt,tlh->blh", w, s)
            if self.counts is None:
                den = w.sum(1)[:, None, None]
            else:
                den = np.einsum("bt,tl->bl", w, self.counts[stat].astype(np.float64))[:, :, None]
            with np.errstate(invalid="ignore", divide="ignore"):
                out[stat] = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
        return out

    def means(self) -> dict[str, np.ndarray]:
        """Each statistic over every item, [layer, head]."""
        return {k: v[0] for k, v in self.weighted(np.ones((1, self.n))).items()}

    def bootstrap(self, draws: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Each statistic over ``draws`` resamples of the items with replacement: [draw, layer, head]."""
        picks = rng.integers(0, self.n, size=(draws, self.n))
        w = np.zeros((draws, self.n))
        np.add.at(w, (np.arange(draws)[:, None], picks), 1.0)
        return self.weighted(w)


def interval(draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 95 % percentile interval of bootstrap draws [draw, ...] -> (lo, hi) [...]."""
    with np.errstate(invalid="ignore"):
        lo, hi = np.nanpercentile(draws, [2.5, 97.5], axis=0)
    return lo, hi


def check_thresholds(thresholds: dict[str, float] | None) -> dict[str, float]:
    """The defaults updated by ``thresholds``; an unknown type or a value outside [0, 1] is refused."""
    from workers.core.errors import HeadscopeError

    out = dict(THRESHOLDS)
    for k, v in (thresholds or {}).items():
        if k not in THRESHOLDS:
            raise HeadscopeError(f"unknown head type {k!r} in thresholds; use {', '.join(TYPES)}")
        if not 0.0 <= float(v) <= 1.0:
            raise HeadscopeError(f"the threshold of {k} must be within 0 and 1, not {v}")
        out[k] = float(v)
    return out


def scores_and_intervals(
    corpus: Items, probe: Items, *, draws: int, seed: int
) -> tuple[dict[str, np.ndarray], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Every type's score [layer, head] and its 95 % bootstrap interval (corpus types over texts,
    probe types over sequences; ``draws`` = 0: intervals equal to the score)."""
    rng = np.random.default_rng(seed)
    means = {"corpus": corpus.means(), "random": probe.means()}
    boots = (
        {"corpus": corpus.bootstrap(draws, rng), "random": probe.bootstrap(draws, rng)}
        if draws > 0
        else None
    )
    scores, intervals = {}, {}
    for type_, (stat, source) in TYPES.items():
        scores[type_] = score_of(type_, means[source][stat])
        if boots is None:
            intervals[type_] = (scores[type_], scores[type_])
        else:
            lo, hi = interval(score_of(type_, boots[source][stat]))
            intervals[type_] = (lo, hi)
    return scores, intervals


def label_heads(
    scores: dict[str, np.ndarray],
    intervals: dict[str, tuple[np.ndarray, np.ndarray]],
    thresholds: dict[str, float],
    rule: str = "specific-first",
) -> list[dict[str, Any]]:
    """One record per head (layer-major): ``label`` the type with the largest score among those that
    clear their thresholds (``local`` only where ``previous-token`` does not clear) — under the
    ``specific-first`` rule the specific types (``SPECIFIC``) before the default ones, under
    ``largest`` all alike — or None; ``cleared`` every type that clears; ``confident`` when the
    label's interval's lower end clears its threshold too."""
    if rule not in RULES:
        from workers.core.errors import HeadscopeError

        raise HeadscopeError(f"unknown labelling rule {rule!r}; use {' or '.join(RULES)}")
    n_layers, n_heads = next(iter(scores.values())).shape
    heads = []
    for layer in range(n_layers):
        for head in range(n_heads):
            s = {t: _num(v[layer, head]) for t, v in scores.items()}
            iv = {
                t: [_num(lo[layer, head]), _num(hi[layer, head])]
                for t, (lo, hi) in intervals.items()
            }
            cleared = [t for t, v in s.items() if v is not None and v >= thresholds[t]]
            if "previous-token" in cleared and "local" in cleared:
                cleared.remove("local")
            tier = cleared
            if rule == "specific-first":
                tier = [t for t in cleared if t in SPECIFIC] or cleared
            label = max(tier, key=lambda t: s[t]) if tier else None  # type: ignore[arg-type,return-value]
            lo = iv[label][0] if label else None
            heads.append(
                {
                    "layer": layer,
                    "head": head,
                    "label": label,
                    "confident": bool(label and lo is not None and lo >= thresholds[label]),
                    "cleared": cleared,
                    "scores": s,
                    "intervals": iv,
                }
            )
    return heads


def _num(x: Any) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None
