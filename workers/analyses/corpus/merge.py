"""A corpus analysis in parts (docs/scaling.md): the partial statistics of a range of texts, and their
exact merge.

A part runs texts ``[start, stop)`` of the corpus (``corpus_partial``) and keeps what adds up:
per-head sums (float64), query counts and histogram counts (integers), the top pairs of its texts
(with their tokens and context, texts named by their place in the corpus), token counts and the
skipped texts. ``CorpusMerge`` folds partials in part order: integers add exactly, the float64 sums
are added in that fixed order (so the result is the same bit for bit whoever ran which part, and
equal to one run over the whole corpus up to float64 rounding), and top pairs are merged under the
accumulator's own total order (weight descending, then text, query, key), which gives exactly the
corpus-wide top k. Nothing is kept per text, so a merge holds one partial at a time.
Notebook use::

    parts = [corpus_partial(m, texts, start=a, stop=b) for a, b in ((0, 100), (100, 200))]
    merge = CorpusMerge()
    for p in parts:
        merge.add(p)
    res = merge.result()          # the keys of ``corpus_statistics`` (docs/results.md, "corpus")
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import numpy as np

from workers.analyses.corpus.run import (
    WINDOW_TEXTS,
    CorpusOptions,
    accumulate,
    model_facts,
    summarise,
)
from workers.analyses.corpus.statistics import LayerAccumulator
from workers.core.errors import HeadscopeError
from workers.core.progress import Progress
from workers.inputs.texts import TextSource, as_source

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from workers.models.loader import LoadedModel


def corpus_partial(
    loaded: LoadedModel,
    texts: Sequence[str] | TextSource,
    *,
    start: int,
    stop: int,
    options: CorpusOptions | None = None,
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
    tap: Any = None,
    window: int = WINDOW_TEXTS,
) -> dict[str, Any]:
    """The partial statistics of the corpus' texts ``[start, stop)`` (JSON-ready); ``texts``: the whole
    corpus as a list or a ``TextSource`` (only that range is read). ``tap``, ``window``: as
    ``corpus_statistics`` (a part of a split comparison reads its word maps from the same passes)."""
    opts = (options or CorpusOptions()).validate()
    source = as_source(texts)
    stop = min(stop, len(source))
    t0 = time.perf_counter()
    run = accumulate(
        loaded,
        source,
        opts=opts,
        start=start,
        stop=stop,
        progress=progress,
        should_stop=should_stop,
        tap=tap,
        window=window,
    )
    out: dict[str, Any] = {
        **model_facts(loaded),
        "first_text": start,
        "n_given": stop - start,
        "max_tokens": min(opts.max_tokens, loaded.max_length),
        "options": _options(opts),
        "n_texts": run.done,
        "n_tokens": run.n_tokens,
        "n_kept_tokens": run.n_kept,
        "truncated": run.truncated,
        "skipped": run.skipped,
    }
    if (
        run.done
    ):  # else every text of this part has only special tokens: it adds nothing but its skips
        acc = run.acc
        out.update(
            sums={s: acc.sums[s].tolist() for s in acc.statistics},
            counts={s: acc.counts[s].tolist() for s in acc.statistics},
            hist={s: acc.hist[s].tolist() for s in acc.statistics},
            top_pairs=run.contexts.top_pairs(acc),
        )
    return {**out, "seconds": time.perf_counter() - t0}


def _options(opts: CorpusOptions) -> dict[str, Any]:
    return {**asdict(opts), "statistics": list(opts.statistics)}


def _pair_order(p: dict[str, Any]) -> tuple[float, int, int, int]:
    return (-p["weight"], p["text"], p["query"], p["key"])


class CorpusMerge:
    """Partials folded in the order they are added (part order); ``result()`` as ``corpus_statistics``."""

    def __init__(self) -> None:
        self.acc: LayerAccumulator | None = None
        self.facts: dict[str, Any] = {}
        self.options: dict[str, Any] = {}
        self.pairs: list[list[list[dict[str, Any]]]] = []
        self.n_parts = self.n_given = self.n_texts = self.n_tokens = self.n_kept = (
            self.truncated
        ) = 0
        self.skipped: list[int] = []
        self.part_seconds = 0.0

    def add(self, partial: dict[str, Any]) -> None:
        """Fold in the next part's partial (they must come in part order, each exactly once)."""
        if partial["first_text"] != self.n_given:
            raise ValueError(
                f"part starting at text {partial['first_text']} came after {self.n_given} texts"
            )
        facts = {k: partial[k] for k in ("model", "family", "causal", "n_layers", "n_heads")}
        if not self.n_parts:
            self.facts, self.options = facts, partial["options"]
            o = partial["options"]
            self.acc = LayerAccumulator(
                n_layers=facts["n_layers"],
                n_heads=facts["n_heads"],
                statistics=tuple(o["statistics"]),
                causal=facts["causal"],
                max_tokens=partial["max_tokens"],
                top_k=o["top_k"],
                exclude_sink_self=o["exclude_sink_self"],
            )
            self.pairs = [[[] for _ in range(facts["n_heads"])] for _ in range(facts["n_layers"])]
        elif facts != self.facts or partial["options"] != self.options:
            raise ValueError("parts of one corpus job ran different models or options")
        assert self.acc is not None
        self.n_parts += 1
        self.n_given += partial["n_given"]
        self.n_texts += partial["n_texts"]
        self.n_tokens += partial["n_tokens"]
        self.n_kept += partial["n_kept_tokens"]
        self.truncated += partial["truncated"]
        self.skipped.extend(partial["skipped"])
        self.part_seconds += float(partial.get("seconds", 0.0))
        if "sums" not in partial:
            return
        for s in self.acc.statistics:  # float64, in part order: the same bits whoever ran what
            self.acc.sums[s] += np.asarray(partial["sums"][s], dtype=np.float64)
            self.acc.counts[s] += np.asarray(partial["counts"][s], dtype=np.int64)
            self.acc.hist[s] += np.asarray(partial["hist"][s], dtype=np.int64)
        k = self.acc.top_k
        for layer, row in enumerate(partial["top_pairs"]):
            for head, pairs in enumerate(row):
                if pairs:
                    both = self.pairs[layer][head] + pairs
                    self.pairs[layer][head] = sorted(both, key=_pair_order)[:k]

    def result(self, *, seconds: float | None = None) -> dict[str, Any]:
        """The merged result (docs/results.md, "corpus"); ``seconds``: the whole job's wall time."""
        if self.acc is None or self.n_texts == 0:
            if self.acc is None and not self.n_given:
                raise HeadscopeError("the corpus has no texts")
            raise HeadscopeError("no text of the corpus has a token left (only special tokens)")
        out = summarise(
            self.acc,
            contexts=None,
            n_texts=self.n_texts,
            n_tokens=self.n_tokens,
            n_kept=self.n_kept,
            pairs=self.pairs,
        )
        wall = self.part_seconds if seconds is None else seconds
        out.update(
            self.facts,
            truncated=self.truncated,
            skipped=self.skipped,
            options=self.options,
            seconds=round(wall, 3),
            texts_per_s=round(self.n_texts / max(wall, 1e-9), 2),
        )
        return out
