"""Progress reporting shared by long analyses: a callable taking (fraction in [0, 1], message)."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[float, str], None]


def no_progress(fraction: float, message: str) -> None:
    """The default reporter: ignore."""


def scaled(progress: Progress | None, start: float, end: float) -> Progress:
    """A reporter mapping [0, 1] onto [start, end] of ``progress``."""
    base = progress or no_progress

    def report(fraction: float, message: str) -> None:
        base(start + (end - start) * min(max(fraction, 0.0), 1.0), message)

    return report
