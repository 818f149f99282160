"""Do LasF fields specialise? A probe set from a small grammar, and permutation tests.

The paper says some fields capture parts of speech, others dependencies or named entities, and
shows no method. Here: sentences generated from a grammar carry, by construction, each word's
part-of-speech tag, its head-dependent pairs and its entity spans. For each field and each
relation, the statistic is the mean weight on related token pairs minus the mean on the other
pairs (real tokens, i != j, pooled over sentences); its null distribution comes from label
shuffles (the tokens of each sentence permuted jointly in rows and columns of the relation). A
field passes a relation at Bonferroni-corrected ``alpha`` (over fields x relations) when the
two-sided Gaussian tail of its z against the shuffles is below ``alpha / tests`` and no shuffle
reached the observed effect (the exact permutation p, ``p_exact``, cannot go below 1/(1 + shuffles)).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

_LEX = {
    "DET": ["the", "a", "this", "every"],
    "ADJ": ["small", "old", "green", "quiet", "bright", "heavy", "young", "strange"],
    "NOUN": [
        "dog",
        "teacher",
        "river",
        "house",
        "letter",
        "farmer",
        "window",
        "song",
        "car",
        "child",
    ],
    "VERB": ["saw", "found", "painted", "carried", "wrote", "liked", "watched", "built"],
    "PREP": ["near", "under", "behind", "with", "beside"],
    "FIRST": ["Alice", "John", "Maria", "Peter", "Laura", "David"],
    "LAST": ["Smith", "Brown", "Garcia", "Miller", "Wilson", "Moore"],
    "CITY": ["Paris", "London", "Berlin", "Madrid", "Boston", "Rome"],
}


@dataclass
class ProbeSentence:
    """Words with tags, head-dependent pairs (word indices) and entity spans (word index sets)."""

    words: list[str]
    tags: list[str]
    deps: list[tuple[int, int]]
    entities: list[list[int]] = field(default_factory=list)

    @property
    def text(self) -> str:
        return " ".join(self.words) + "."


def _np(
    rng: random.Random,
    words: list[str],
    tags: list[str],
    deps: list[tuple[int, int]],
    ents: list[list[int]],
) -> int:
    """Append a noun phrase (maybe a person's name) and return its head word's index."""
    if rng.random() < 0.3:
        start = len(words)
        words += [rng.choice(_LEX["FIRST"]), rng.choice(_LEX["LAST"])]
        tags += ["PROPN", "PROPN"]
        deps.append((start + 1, start))  # surname heads the first name
        ents.append([start, start + 1])
        return start + 1
    det = len(words)
    words.append(rng.choice(_LEX["DET"]))
    tags.append("DET")
    adj = None
    if rng.random() < 0.5:
        adj = len(words)
        words.append(rng.choice(_LEX["ADJ"]))
        tags.append("ADJ")
    head = len(words)
    words.append(rng.choice(_LEX["NOUN"]))
    tags.append("NOUN")
    deps.append((head, det))
    if adj is not None:
        deps.append((head, adj))
    return head


def probe_sentences(n: int = 120, *, seed: int = 0) -> list[ProbeSentence]:
    """``n`` sentences: NP VERB NP [PREP (NP | CITY)], with tags, dependencies and entities."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words: list[str] = []
        tags: list[str] = []
        deps: list[tuple[int, int]] = []
        ents: list[list[int]] = []
        subj = _np(rng, words, tags, deps, ents)
        verb = len(words)
        words.append(rng.choice(_LEX["VERB"]))
        tags.append("VERB")
        obj = _np(rng, words, tags, deps, ents)
        deps += [(verb, subj), (verb, obj)]
        if rng.random() < 0.6:
            prep = len(words)
            words.append(rng.choice(_LEX["PREP"]))
            tags.append("PREP")
            deps.append((verb, prep))
            if rng.random() < 0.5:
                words.append(rng.choice(_LEX["CITY"]))
                tags.append("PROPN")
                ents.append([len(words) - 1])
                deps.append((prep, len(words) - 1))
            else:
                deps.append((prep, _np(rng, words, tags, deps, ents)))
        out.append(ProbeSentence(words, tags, deps, ents))
    return out


def token_relations(sent: ProbeSentence, word_of_token: list[int | None]) -> dict[str, np.ndarray]:
    """Boolean [n, n] matrices per relation over tokens (``None`` = special token, in no pair).

    Tokens of one word are related to each other by none of the relations but ``adjacent``.
    """
    n = len(word_of_token)
    w = np.array([-1 if x is None else x for x in word_of_token])
    real = w >= 0
    both = real[:, None] & real[None, :] & ~np.eye(n, dtype=bool)
    diff_word = w[:, None] != w[None, :]
    tags = np.array([sent.tags[x] if x >= 0 else "" for x in w])
    dep_words = np.zeros((len(sent.words), len(sent.words)), dtype=bool)
    for h, d in sent.deps:
        dep_words[h, d] = dep_words[d, h] = True
    ent = np.full(len(sent.words), -1)
    for k, span in enumerate(sent.entities):
        ent[span] = k
    wi = np.where(real, w, 0)
    rel = {
        "same-pos": (tags[:, None] == tags[None, :]) & diff_word,
        "dependency": dep_words[wi][:, wi] & diff_word,
        "same-entity": (ent[wi][:, None] == ent[wi][None, :]) & (ent[wi][:, None] >= 0) & diff_word,
        "adjacent": np.abs(np.arange(n)[:, None] - np.arange(n)[None, :]) == 1,
    }
    return {k: v & both for k, v in rel.items()}


def permutation_test(
    weights: list[np.ndarray], relations: list[dict[str, np.ndarray]], real: list[np.ndarray],
    *, n_perm: int = 1000, alpha: float = 0.01, seed: int = 0,
) -> dict[str, Any]:  # fmt: skip
    """Per field and relation: mean weight on related pairs minus the rest, and its p-value.

    Args:
        weights: per sentence, [n_fields, n, n] (what each field multiplies the signals by).
        relations: per sentence, relation name -> bool [n, n].
        real: per sentence, bool [n] (tokens that take part; special tokens False).

    Returns:
        ``relations``, ``effect`` / ``p`` / ``related_mean`` / ``other_mean`` [field][relation],
        ``passes`` [field][relation] (p < alpha / tests), ``count`` per relation, ``alpha``,
        ``threshold``, ``n_perm``.
    """
    names = list(relations[0])
    n_fields = weights[0].shape[0]
    rng = np.random.default_rng(seed)
    # per sentence: sum of weights over the pairs that count, and the related sums under each shuffle
    obs = np.zeros((n_fields, len(names)))
    perm = np.zeros((n_perm, n_fields, len(names)))
    n_rel = np.zeros(len(names))
    total = np.zeros(n_fields)
    n_pairs = 0
    for W, R, keep in zip(weights, relations, real, strict=True):
        idx = np.flatnonzero(keep)
        m = len(idx)
        if m < 2:
            continue
        Wk = W[:, idx][:, :, idx].astype(np.float64)  # [field, m, m]
        off = ~np.eye(m, dtype=bool)
        total += (Wk * off).sum((1, 2))
        n_pairs += m * (m - 1)
        Rk = np.stack([R[k][np.ix_(idx, idx)] for k in names]).astype(np.float64)  # [rel, m, m]
        n_rel += Rk.sum((1, 2))
        obs += np.einsum("fij,rij->fr", Wk, Rk)
        p = np.argsort(rng.random((n_perm, m)), axis=1)  # [perm, m]
        Wp = Wk[:, p[:, :, None], p[:, None, :]]  # [field, perm, m, m]: W relabelled
        perm += np.einsum("fpij,rij->pfr", Wp, Rk)
    n_other = n_pairs - n_rel
    with np.errstate(invalid="ignore", divide="ignore"):
        rel_mean = obs / n_rel
        other_mean = (total[:, None] - obs) / n_other
        effect = rel_mean - other_mean
        perm_effect = perm / n_rel - (total[None, :, None] - perm) / n_other
    exceed = (np.abs(perm_effect) >= np.abs(effect)[None] - 1e-12).sum(0)
    p_exact = np.where(n_rel > 0, (1.0 + exceed) / (1.0 + n_perm), 1.0)
    # 1/(1 + n_perm) is the smallest exact p, above alpha / tests for 1,000 shuffles and dozens of
    # tests: the p compared with the threshold is the two-sided Gaussian tail of the shuffles'
    # null distribution, and a pass also needs that no shuffle reached the observed effect.
    from scipy.stats import norm

    sd = perm_effect.std(0)
    z = np.divide(effect - perm_effect.mean(0), sd, out=np.zeros_like(effect), where=sd > 0)
    pval = np.where(n_rel > 0, 2.0 * norm.sf(np.abs(np.nan_to_num(z))), 1.0)
    threshold = alpha / (n_fields * len(names))
    passes = (pval < threshold) & (exceed == 0) & (n_rel > 0)
    return {
        "relations": names,
        "effect": np.nan_to_num(effect).tolist(),
        "related_mean": np.nan_to_num(rel_mean).tolist(),
        "other_mean": np.nan_to_num(other_mean).tolist(),
        "p": pval.tolist(),
        "p_exact": p_exact.tolist(),
        "z": np.nan_to_num(z).tolist(),
        "passes": passes.tolist(),
        "count": {k: int(passes[:, i].sum()) for i, k in enumerate(names)},
        "n_pairs": {k: int(n_rel[i]) for i, k in enumerate(names)},
        "alpha": alpha,
        "threshold": threshold,
        "n_perm": n_perm,
    }
