"""Progress as log lines: when a long job writes one, and what it says.

A terminal gets a redrawn bar (``backend.cli.progress.StderrProgress``); a log file or a pipe gets lines, one
per step: a new step (the message with its numbers taken out changes, "robustness: repeat 3/200"
-> "decomposition: layer 1/6"), or the same step again after ``every_s`` seconds, or the end. So
a 200-repeat robustness run writes a few dozen short lines, never one line of carriage returns.
Imports nothing heavy: the CLI (backend) and the workers both use it.
"""

from __future__ import annotations

import re
import time

_NUMBERS = re.compile(r"\d+(\.\d+)?")


def step_of(message: str) -> str:
    """The message without its numbers: ``"layer 3/6"`` -> ``"layer #/#"``."""
    return _NUMBERS.sub("#", message)


def progress_line(label: str, fraction: float, elapsed_s: float, message: str) -> str:
    """``"robustness  42.0%   12.3s  repeat 84/200"`` (no newline)."""
    pct = 100.0 * max(0.0, min(1.0, fraction))
    return f"{label} {pct:5.1f}% {elapsed_s:7.1f}s  {message[:120]}".rstrip()


class ProgressLines:
    """Decides which progress reports become lines (see the module docstring)."""

    def __init__(self, *, every_s: float = 5.0, clock=time.monotonic):
        self.every_s = every_s
        self.clock = clock
        self.start = clock()
        self._step: str | None = None
        self._last = float("-inf")
        self._ended = False

    def due(self, fraction: float, message: str) -> bool:
        """True when this report should be written as a line."""
        now = self.clock()
        step = step_of(message)
        end = fraction >= 1.0
        if end and self._ended:
            return False
        if step != self._step or end or now - self._last >= self.every_s:
            self._step, self._last, self._ended = step, now, end
            return True
        return False

    def elapsed(self) -> float:
        return self.clock() - self.start
