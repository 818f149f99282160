"""The comparison of two models in parts of texts (docs/scaling.md, docs/compare.md): a part's partial
result, and their merge in part order.

A part runs both models over its range of texts, model A first (its word maps kept for those texts
only), then model B (one after the other when the memory plan says so), exactly as ``compare_models``
does over the whole corpus. It keeps what adds up: both models' corpus partials
(``corpus_merge.corpus_partial``, top_k 0), the similarity sums and the number of rows
(``SimilarityAccumulator.state``, float64), its texts and, for a decoder, their words' surprisal.
``CompareMerge`` adds the partials in part order and does the matching and the profiles once
(``compare.finish_compare``).

Exactness: a part is whole windows of ``window`` texts (the texts sorted into padded batches
together), and the accumulator flushes its pairwise term at every window (``compare.WindowFlush``),
so a part computes the one job's forward passes and float32 blocks bit for bit; only the float64
totals are added in another order (part by part), ~1e-16 relative. Notebook use::

    p = [compare_partial(load_a, load_b, texts[a:b], first=a, window=50) for a, b in ((0, 50), (50, 100))]
    merge = CompareMerge()
    for x in p:
        merge.add(x)
    res = merge.result()      # the keys of ``compare_models`` (docs/results.md, "compare")
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from workers.analyses.compare.comparison import WordMapTap, check_texts, finish_compare, run_both
from workers.analyses.compare.head_similarity import SimilarityAccumulator
from workers.analyses.corpus.merge import CorpusMerge, corpus_partial
from workers.analyses.corpus.run import WINDOW_TEXTS, CorpusOptions
from workers.core.errors import HeadscopeError
from workers.core.progress import Progress, no_progress

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel


def compare_partial(
    load_a: Callable[[], LoadedModel],
    load_b: Callable[[], LoadedModel],
    texts: list[str],
    *,
    first: int,
    max_tokens: int = 128,
    window: int = WINDOW_TEXTS,
    release: Callable[[], None] | None = None,
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """The partial comparison of ``texts``, the corpus' texts ``[first, first + len(texts))`` (JSON-ready).
    ``first`` must be a multiple of ``window`` for the merge to equal one job's comparison."""
    t0 = time.perf_counter()
    texts = list(texts)
    options = CorpusOptions(max_tokens=max_tokens, top_k=0)

    def run_side(loaded: LoadedModel, tap: WordMapTap, side_progress: Progress) -> dict[str, Any]:
        out = corpus_partial(
            loaded,
            texts,
            start=0,
            stop=len(texts),
            options=options,
            progress=side_progress,
            should_stop=should_stop,
            tap=tap,
            window=window,
        )
        return {**out, "first_text": first, "skipped": [first + i for i in out["skipped"]]}

    both = run_both(
        load_a,
        load_b,
        texts,
        max_tokens=max_tokens,
        window=window,
        run_side=run_side,
        release=release,
        report=progress or no_progress,
    )
    words = None
    if both.facts_a["has_lm_head"] or both.facts_b["has_lm_head"]:
        words = [{"a": both.words_a.get(i), "b": both.words_b.get(i)} for i in range(len(texts))]
    return {
        "first_text": first,
        "n_given": len(texts),
        "texts": texts,
        "max_tokens": max_tokens,
        "model_a": both.facts_a,
        "model_b": both.facts_b,
        "causal": both.causal,
        "a": both.run_a,
        "b": both.run_b,
        "similarity": both.acc.state(),
        "words": words,
        "seconds": time.perf_counter() - t0,
    }


class CompareMerge:
    """Partial comparisons folded in the order they are added (part order); ``result()`` as
    ``compare_models``. Holds the running sums, both corpus merges and every text's words."""

    def __init__(self) -> None:
        self.a, self.b = CorpusMerge(), CorpusMerge()
        self.acc: SimilarityAccumulator | None = None
        self.facts: dict[str, Any] = {}
        self.texts: list[str] = []
        self.words_a: dict[int, dict[str, Any]] = {}
        self.words_b: dict[int, dict[str, Any]] = {}
        self.part_seconds = 0.0

    def add(self, partial: dict[str, Any]) -> None:
        """Fold in the next part's partial (in part order, each exactly once)."""
        if partial["first_text"] != len(self.texts):
            raise ValueError(
                f"part starting at text {partial['first_text']} came after {len(self.texts)} texts"
            )
        facts = {k: partial[k] for k in ("model_a", "model_b", "causal", "max_tokens")}
        if self.acc is None:
            self.facts = facts
            n_a = facts["model_a"]["n_layers"] * facts["model_a"]["n_heads"]
            self.acc = SimilarityAccumulator(
                n_a, facts["model_b"]["n_layers"] * facts["model_b"]["n_heads"]
            )
        elif facts != self.facts:
            raise ValueError("parts of one comparison ran different models or options")
        self.a.add(partial["a"])
        self.b.add(partial["b"])
        self.acc.add_state(
            partial["similarity"]
        )  # float64, in part order: the same bits whoever ran what
        for j, w in enumerate(partial["words"] or []):
            i = partial["first_text"] + j
            if w["a"] is not None:
                self.words_a[i] = w["a"]
            if w["b"] is not None:
                self.words_b[i] = w["b"]
        self.texts.extend(partial["texts"])
        self.part_seconds += float(partial.get("seconds", 0.0))

    def result(self, *, seconds: float | None = None) -> dict[str, Any]:
        """The merged comparison (docs/results.md, "compare"); ``seconds``: the whole job's wall time."""
        if self.acc is None:
            raise HeadscopeError("the corpus has no texts")
        check_texts(self.texts)
        stats_a, stats_b = self.a.result()["statistics"], self.b.result()["statistics"]
        f = self.facts
        return finish_compare(
            f["model_a"],
            f["model_b"],
            stats_a=stats_a,
            stats_b=stats_b,
            acc=self.acc,
            causal=f["causal"],
            texts=self.texts,
            words_a=self.words_a,
            words_b=self.words_b,
            max_tokens=f["max_tokens"],
            seconds=self.part_seconds if seconds is None else seconds,
        )
