"""The head atlas (docs/atlas.md): every head labelled by what it does, how sure, and (decoders with a
language-model head) whether ablating it changes what its type predicts.

Notebook use::

    from workers.models import load_model
    from workers.analyses.atlas.run import AtlasSettings, atlas
    res = atlas(load_model("smollm2"), AtlasSettings(random_seqs=8))
    [h for h in res["heads"] if h["label"] == "induction"]
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from workers.analyses.atlas.corpus_items import corpus_items
from workers.analyses.atlas.labels import (
    RULES,
    TYPES,
    check_thresholds,
    label_heads,
    scores_and_intervals,
)
from workers.analyses.atlas.probe import check_probe, make_probe, run_probe
from workers.core.errors import HeadscopeError
from workers.core.progress import Progress, no_progress, scaled, stage

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel


@dataclass(frozen=True)
class AtlasSettings:
    """The atlas' settings (the analysis' options carry the same names; docs/atlas.md)."""

    corpus: str = "builtin-english"
    max_texts: int = 200  # the corpus' first texts, for speed
    max_tokens: int = 128  # per text
    random_seqs: int = 32  # S
    random_len: int = 64  # R
    seed: int = 0
    bootstrap: int = 200  # resamples for the 95 % intervals (0: none)
    thresholds: dict[str, float] = field(default_factory=dict)
    rule: str = "specific-first"  # the labelling rule (labels.RULES, docs/atlas.md "Labels")
    loss: bool | None = (
        None  # the repeated-half loss; None: where the model has a language-model head
    )
    evidence: bool = True  # the ablation checks (decoders with a language-model head)
    evidence_seqs: int = 8  # the probe's first sequences the ablations run on
    evidence_exact_all: bool = False  # every head ablated exactly (else attribution patching)

    def validate(self, loaded: LoadedModel | None = None) -> AtlasSettings:
        check_probe(random_seqs=self.random_seqs, random_len=self.random_len)
        check_thresholds(self.thresholds)
        if self.rule not in RULES:
            raise HeadscopeError(f"unknown labelling rule {self.rule!r}; use {' or '.join(RULES)}")
        if self.max_texts < 1:
            raise HeadscopeError(f"max_texts must be at least 1 (got {self.max_texts})")
        if self.bootstrap < 0:
            raise HeadscopeError(f"bootstrap must be 0 or more (got {self.bootstrap})")
        if self.evidence_seqs < 1:
            raise HeadscopeError(f"evidence_seqs must be at least 1 (got {self.evidence_seqs})")
        if loaded is not None and self.loss and not can_score_loss(loaded):
            raise HeadscopeError(loss_refusal(loaded.name))
        return self


def can_score_loss(loaded: LoadedModel) -> bool:
    return loaded.causal and loaded.has_lm_head


def loss_refusal(name: str) -> str:
    return (
        f"the repeated-half loss needs a decoder with a language-model head; {name} is not one "
        "(leave loss unset: the atlas then labels its heads by attention alone)"
    )


def corpus_texts(ref: str, max_texts: int) -> list[str]:
    """The first ``max_texts`` texts of a shipped corpus (``builtin-...``); an uploaded one (``cp-...``)
    is read from the store by the job's runner and handed to ``atlas`` as ``texts``."""
    from workers.inputs.corpora import SHIPPED, shipped_corpus

    got = shipped_corpus(ref)
    if got is None:
        if ref.startswith("cp-"):
            raise HeadscopeError(
                f"corpus {ref} is an uploaded one: it is read from the store (pass its texts)"
            )
        raise HeadscopeError(f"unknown corpus {ref!r}; the shipped ones are {', '.join(SHIPPED)}")
    return got.texts[:max_texts]


def atlas(
    loaded: LoadedModel,
    settings: AtlasSettings | None = None,
    *,
    texts: Sequence[str] | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The atlas of ``loaded`` (keys: docs/results.md, the atlas section). ``texts``: the corpus itself, in place
    of ``settings.corpus``."""
    s = (settings or AtlasSettings()).validate(loaded)
    report = progress or no_progress
    t0 = time.perf_counter()
    thresholds = check_thresholds(s.thresholds)
    loss = can_score_loss(loaded) if s.loss is None else s.loss
    evidence = s.evidence and can_score_loss(loaded)
    if texts is None:
        texts = corpus_texts(s.corpus, s.max_texts)
    # one bar (docs/atlas.md, "Progress"): the corpus' texts, the random sequences, the bootstrap,
    # then the ablations, each step's words naming what it counts
    cut = (0.0, 0.35, 0.5, 1.0) if evidence else (0.0, 0.7, 1.0, 1.0)
    corpus, facts = corpus_items(
        loaded,
        list(texts),
        max_tokens=s.max_tokens,
        progress=stage(report, cut[0], cut[1], f"corpus {s.corpus}"),
    )
    probe = make_probe(loaded, random_seqs=s.random_seqs, random_len=s.random_len, seed=s.seed)
    items, halves = run_probe(loaded, probe, loss=loss, progress=scaled(report, cut[1], cut[2]))
    report(
        cut[2],
        f"bootstrap: {s.bootstrap} resamples of {facts['n_texts']} texts and {probe.n} sequences",
    )
    scores, intervals = scores_and_intervals(corpus, items, draws=s.bootstrap, seed=s.seed)
    heads = label_heads(scores, intervals, thresholds, rule=s.rule)
    out: dict[str, Any] = {
        "model": loaded.name,
        "n_layers": loaded.n_layers,
        "n_heads": loaded.n_heads,
        "causal": loaded.causal,
        "types": {t: {"statistic": st, "probe": src} for t, (st, src) in TYPES.items()},
        "thresholds": thresholds,
        "rule": s.rule,
        "probe": {
            **{k: v for k, v in asdict(s).items() if k not in ("thresholds", "rule")},
            "loss": loss,
            "evidence": evidence,
            "leading_special": bool(probe.offset),
            "corpus_texts": facts["n_texts"],
            "corpus_tokens": facts["n_tokens"],
            "corpus_truncated": facts["truncated"],
        },
        "loss_repeated": None,
        "evidence": None,
        "heads": heads,
    }
    if halves is not None:
        out["loss_repeated"] = {
            "first": float(np.mean(halves["first"])),
            "repeated": float(np.mean(halves["repeated"])),
            "per_sequence": halves,
        }
    for h in heads:
        h["evidence"] = {}
    if evidence:
        from workers.analyses.atlas.evidence import add_evidence

        out["evidence"] = add_evidence(
            loaded,
            probe,
            heads,
            seqs=s.evidence_seqs,
            exact_all=s.evidence_exact_all,
            progress=scaled(report, cut[2], 1.0),
        )
    out["seconds"] = round(time.perf_counter() - t0, 3)
    report(
        1.0, f"every head labelled ({len(heads)} heads)"
    )  # the job says "done" (docs/service.md)
    return out
