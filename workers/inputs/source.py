"""The texts of a job's corpus, read in batches (docs/scaling.md "Streamed corpora").

``open_corpus(corpus)`` gives a ``TextSource`` (``workers.inputs.texts``) for a shipped corpus
(``builtin-...``, a few hundred texts in memory) or a stored one (``cp-...``, read from the store by
index range, one stored chunk at a time, ``Store.iter_corpus_texts``). A job, or a part of a split job
(``workers/queue/parts.py``), takes its texts ``[start, stop)`` from it and never the whole corpus::

    source = open_corpus("cp-...", store=store)
    len(source)                                         # texts in the corpus
    for texts in source.batches(2000, 2500, batch=256):  # a part's texts, 256 at a time
        ...
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from workers.core.errors import HeadscopeError
from workers.inputs.texts import ListSource, TextSource


class StoredCorpus:
    """A ``TextSource`` over a corpus in the store; its length is read once, its texts on demand."""

    def __init__(self, store: Any, corpus_id: str, n_texts: int):
        self.store = store
        self.corpus_id = corpus_id
        self.n_texts = n_texts

    def __len__(self) -> int:
        return self.n_texts

    def batches(
        self, start: int = 0, stop: int | None = None, *, batch: int = 1000
    ) -> Iterator[list[str]]:
        from workers.store.corpora import CorpusGone

        stop = self.n_texts if stop is None else min(stop, self.n_texts)
        try:
            yield from self.store.iter_corpus_texts(self.corpus_id, start, stop, batch=batch)
        except CorpusGone as exc:
            raise HeadscopeError(f"{exc}; upload it again") from None


def open_corpus(corpus: str, *, store: Any = None) -> TextSource:
    """The texts of a shipped (``builtin-...``) or stored (``cp-...``) corpus as a ``TextSource``;
    a stored corpus is read from ``store`` (``workers.store.Store``) and its expiry clock restarts.
    Raises ``HeadscopeError`` naming an unknown corpus."""
    from workers.inputs.corpora import shipped_corpus

    if corpus.startswith("builtin-"):
        found = shipped_corpus(corpus)
        if found is None:
            raise HeadscopeError(f"unknown shipped corpus {corpus!r}")
        return ListSource(found.texts)
    if store is None:
        raise ValueError(f"corpus {corpus}: a stored corpus is read from the store; pass store=")
    n = store.corpus_length(corpus)
    if n is None:
        raise HeadscopeError(f"corpus {corpus} is no longer stored; upload it again")
    store.touch_corpus(corpus)
    return StoredCorpus(store, corpus, n)
