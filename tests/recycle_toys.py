"""Jobs for tests/test_recycle.py (an in-process worker imports them by dotted path ``recycle_toys.*``)."""

from __future__ import annotations

import weakref
from typing import Any

_refs: list[weakref.ref] = []  # weak references to the cycles made here
_kept: list[Any] = []  # strong references: objects the worker holds across jobs
_held: list[Any] = []


class Node:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def make_cycle() -> None:
    """Leave a reference cycle behind as garbage (a job's leftovers)."""
    node = Node()
    _refs.append(weakref.ref(node))


def alive() -> int:
    """How many of the cycles made here still exist."""
    return sum(r() is not None for r in _refs)


def keep_cycle() -> None:
    """A cycle the process holds (as a worker holds a model) until ``drop_kept``."""
    node = Node()
    _refs.append(weakref.ref(node))
    _kept.append(node)


def drop_kept(load: str = "") -> None:
    """Drop the held cycles (now garbage); ``load``: then load that catalogue model (the cache changes)."""
    _kept.clear()
    if load:
        from workers.models import load_model

        load_model(load, device="cpu")


def hold(n: int) -> None:
    """Keep ``n`` new objects for good (as a lazy import does)."""
    _held.extend([[i] for i in range(n)])


def reset() -> None:
    _refs.clear()
    _kept.clear()
    _held.clear()
