"""Progress reporting shared by long analyses: a callable taking (fraction in [0, 1], message).

A job's progress (docs/service.md) is one bar: its fraction never goes down, and its words name
what is computing now. ``stage`` gives each step of a job its share of the bar and its name;
``Monotone`` holds the bar to those rules (the queue's reporter writes through one).
"""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[float, str], None]

DONE = "done"  # the last word of a finished job, and of nothing else


def no_progress(fraction: float, message: str) -> None:
    """The default reporter: ignore."""


def scaled(progress: Progress | None, start: float, end: float) -> Progress:
    """A reporter mapping [0, 1] onto [start, end] of ``progress``."""
    base = progress or no_progress

    def report(fraction: float, message: str) -> None:
        base(start + (end - start) * min(max(fraction, 0.0), 1.0), message)

    return report


def stage(progress: Progress | None, start: float, end: float, name: str) -> Progress:
    """``scaled`` for one step of a longer job: each message is prefixed with the step's ``name``
    ("every head's t-SNE: layer 2/30"), and the step's own end ("done") reads "<name> finished"."""
    inner = scaled(progress, start, end)

    def report(fraction: float, message: str) -> None:
        words = f"{name} finished" if message == DONE else f"{name}: {message}"
        inner(fraction, words)

    return report


class Monotone:
    """A job's bar: ``report`` keeps the highest fraction seen, below 1 until ``finish``, and a
    computation's own end ("done") reads "storing the result" until the job is really done.

    ``__call__`` returns the (fraction, message) to show."""

    HOLD = 0.99  # the bar's highest point before the job is done

    def __init__(self) -> None:
        self.high = 0.0

    def __call__(self, fraction: float, message: str) -> tuple[float, str]:
        fraction = min(max(fraction, 0.0), self.HOLD)
        self.high = max(self.high, fraction)
        if message == DONE:
            message = "storing the result"
        return self.high, message

    def finish(self) -> tuple[float, str]:
        self.high = 1.0
        return 1.0, DONE
