"""Term importance curves from a decomposition: means, spreads, model comparison, the JSON section.

``mu(e, t) = e.t / |e|^2`` (paper eq. 6) per token and term; per state the mean and standard
deviation over tokens (population sd, ddof = 0), optionally leaving special tokens out; Spearman's
rho between two models' importances on the same text, per state and term (paper Fig. 3d-f).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from workers.analyses.decomposition.rank_stats import spearman_per_state
from workers.analyses.decomposition.terms import CONVENTION, TERM_LABELS, Decomposition
from workers.core.errors import HeadscopeError

logger = logging.getLogger(__name__)


def kept_tokens(dec: Decomposition, *, drop_special: bool = False) -> np.ndarray:
    """Indices of the tokens that enter the means (all, or the non-special ones)."""
    if not drop_special:
        return np.arange(dec.encoded.n)
    kept = np.flatnonzero(~dec.special)
    if kept.size == 0:
        raise HeadscopeError("no tokens left after removing special tokens")
    return kept


@dataclass
class ImportanceCurves:
    """Per-state summaries of the term importances over the kept tokens.

    Shapes: ``per_token`` [state, token, term] (every token); ``mean``, ``sd`` [state, term];
    ``head_mean`` [state, layer, head]; ``ff_mean`` [state, layer].
    """

    per_token: np.ndarray
    mean: np.ndarray
    sd: np.ndarray
    head_mean: np.ndarray
    ff_mean: np.ndarray
    kept: np.ndarray
    labels: tuple[str, ...] = TERM_LABELS


def importance_curves(dec: Decomposition, *, drop_special: bool = False) -> ImportanceCurves:
    """Mean +- sd over tokens of each term's importance at every state (one curve per term)."""
    imp = dec.importance  # [state, token, term]
    kept = kept_tokens(dec, drop_special=drop_special)
    sel = imp[:, kept]
    return ImportanceCurves(
        per_token=imp,
        mean=sel.mean(axis=1),
        sd=sel.std(axis=1),
        head_mean=dec.head_importance[..., kept].mean(axis=-1),
        ff_mean=dec.ff_importance[..., kept].mean(axis=-1),
        kept=kept,
        labels=dec.labels,
    )


def importance_spearman(
    a: Decomposition, b: Decomposition, *, drop_special: bool = False
) -> np.ndarray:
    """[state, term]: Spearman's rho between two models' importances on the same text, per state.

    Both models must tokenise the text identically. When their depths differ, the first
    ``min(L_a, L_b) + 1`` states are compared.
    """
    if a.tokens != b.tokens:
        raise HeadscopeError(
            f"the models {a.model!r} and {b.model!r} tokenise the text differently "
            f"({len(a.tokens)} vs {len(b.tokens)} tokens); compare models that share a tokenizer"
        )
    keep = kept_tokens(a, drop_special=drop_special)
    return spearman_per_state(a.importance, b.importance, keep=keep)


def decomposition_section(
    dec: Decomposition, *, drop_special: bool = False, head_state: int | None = None
) -> dict[str, Any]:
    """The ``decomposition`` section of a result (docs/results.md).

    ``head_state``: the state whose per-token head importances are included (default: the last).
    """
    curves = importance_curves(dec, drop_special=drop_special)
    n_states = dec.states.shape[0]
    hs = n_states - 1 if head_state is None else int(head_state)
    if not 0 <= hs < n_states:
        raise HeadscopeError(f"state {hs} is out of range 0..{n_states - 1}")
    return {
        "terms": list(dec.labels),
        "convention": CONVENTION,
        "dtype": dec.dtype,
        "states": list(range(n_states)),
        "final_norm_in_last_state": dec.final_norm_in_last_state,
        "per_token": curves.per_token.tolist(),  # [state][token][term]
        "mean": curves.mean.tolist(),  # [state][term]
        "sd": curves.sd.tolist(),  # [state][term]
        "kept": curves.kept.tolist(),
        "max_abs_error": dec.max_abs_error.tolist(),  # [state]
        "max_rel_error": dec.max_rel_error.tolist(),  # [state], relative to each token's state norm
        "head_state": hs,
        "head_importance": dec.head_importance[hs].tolist(),  # [layer][head][token]
        "head_importance_mean": curves.head_mean.tolist(),  # [state][layer][head]
        "feedforward_importance": dec.ff_importance.tolist(),  # [state][layer][token]
        "feedforward_importance_mean": curves.ff_mean.tolist(),  # [state][layer]
    }
