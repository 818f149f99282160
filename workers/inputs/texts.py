"""Texts read in batches: what a corpus analysis iterates over (docs/scaling.md "Streamed corpora").

A ``TextSource`` has a length and hands out the texts of an index range in order, a batch at a time,
so an analysis never needs a corpus whole in memory: a list is one (``ListSource``), a corpus in the
store is another (``workers.inputs.source.StoredCorpus``, which reads the store chunk by chunk). The
analysis core sees only this protocol; it imports no store.

    source = as_source(["A first text.", "A second one."])
    for texts in source.batches(0, 2, batch=1): ...   # ["A first text."], ["A second one."]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class TextSource(Protocol):
    """A corpus read by index range: ``len(source)`` texts, ``batches(start, stop, batch=)`` in order."""

    def __len__(self) -> int: ...

    def batches(
        self, start: int = 0, stop: int | None = None, *, batch: int = 1000
    ) -> Iterator[list[str]]:
        """The texts ``[start, stop)`` (``stop`` None: to the end) as lists of at most ``batch``."""
        ...


class ListSource:
    """A ``TextSource`` over texts already in memory."""

    def __init__(self, texts: Sequence[str]):
        self.texts = texts

    def __len__(self) -> int:
        return len(self.texts)

    def batches(
        self, start: int = 0, stop: int | None = None, *, batch: int = 1000
    ) -> Iterator[list[str]]:
        stop = len(self.texts) if stop is None else min(stop, len(self.texts))
        for at in range(start, stop, batch):
            yield list(self.texts[at : min(at + batch, stop)])


def as_source(texts: Sequence[str] | TextSource) -> TextSource:
    """``texts`` itself when it is a ``TextSource``, else a ``ListSource`` over it."""
    if isinstance(texts, (list, tuple)):
        return ListSource(texts)
    if isinstance(texts, TextSource):
        return texts
    return ListSource(list(texts))
