"""The corpus probe of the atlas (docs/atlas.md): the corpus statistics (docs/corpus.md, computed by
``workers.analyses.corpus``) kept per text, so that the atlas can bootstrap over texts.

``PerText`` is a tap of ``workers.analyses.corpus.run.accumulate``: it reads the same forward passes
and folds each batch's per-query statistics (``query_statistics``, the corpus analysis' own maths)
into per-text sums and counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from workers.analyses.atlas.labels import CORPUS_STATS, Items
from workers.analyses.corpus.run import CorpusOptions, accumulate
from workers.analyses.corpus.statistics import STATISTICS, KeptBatch, kept_maps, query_statistics
from workers.core.errors import HeadscopeError
from workers.core.progress import Progress
from workers.inputs.texts import as_source

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel


class PerText:
    """Per-text sums [text, layer, head] and query counts [text, layer] of ``CORPUS_STATS``."""

    def __init__(self, loaded: LoadedModel, n_texts: int):
        self.loaded = loaded
        self.pick = [STATISTICS.index(s) for s in CORPUS_STATS]
        shape = (n_texts, loaded.n_layers, loaded.n_heads)
        self.sums = {s: np.zeros(shape) for s in CORPUS_STATS}
        self.counts = {s: np.zeros(shape[:2], dtype=np.int64) for s in CORPUS_STATS}
        self.kept: KeptBatch | None = None
        self.rows: np.ndarray = np.zeros(0, dtype=np.int64)

    def start(self, text_ids: list[int], ids: list[list[int]]) -> None:
        tok = self.loaded.tokenizer
        keep = [
            [not s for s in tok.get_special_tokens_mask(row, already_has_special_tokens=True)]
            for row in ids
        ]
        self.kept = KeptBatch.build(ids, keep, text_ids, device=self.loaded.device)
        self.rows = np.asarray(text_ids, dtype=np.int64)

    def layer(self, layer: int, weights: torch.Tensor) -> None:
        assert self.kept is not None
        a, total = kept_maps(weights.detach(), self.kept)
        values, applies = query_statistics(a, total, self.kept, causal=self.loaded.causal)
        values, applies = values[self.pick], applies[self.pick]
        sums = (values * applies[:, :, None].to(values.dtype)).sum(-1).double().cpu().numpy()
        n = applies.sum(-1).cpu().numpy()  # [stat, batch]
        for si, stat in enumerate(CORPUS_STATS):
            self.sums[stat][self.rows, layer] = sums[si]
            self.counts[stat][self.rows, layer] = n[si]

    def finish(self, output: Any) -> None:
        self.kept = None


def corpus_items(
    loaded: LoadedModel,
    texts: Sequence[str],
    *,
    max_tokens: int = 128,
    progress: Progress | None = None,
) -> tuple[Items, dict[str, Any]]:
    """Every text through the model once: the per-text parts of ``CORPUS_STATS`` and the run's facts
    (texts run, tokens, truncated)."""
    if not texts:
        raise HeadscopeError("the atlas' corpus has no texts")
    tap = PerText(loaded, len(texts))
    opts = CorpusOptions(max_tokens=max_tokens, statistics=("previous",), top_k=0)
    run = accumulate(loaded, as_source(list(texts)), opts=opts, progress=progress, tap=tap)
    if run.done == 0:
        raise HeadscopeError("no text of the atlas' corpus has a token left (only special tokens)")
    ran = np.setdiff1d(np.arange(len(texts)), np.asarray(run.skipped, dtype=np.int64))
    items = Items(
        {s: v[ran] for s, v in tap.sums.items()}, {s: v[ran] for s, v in tap.counts.items()}
    )
    facts = {"n_texts": run.done, "n_tokens": run.n_tokens, "truncated": run.truncated}
    return items, facts
