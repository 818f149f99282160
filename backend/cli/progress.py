"""The CLI's progress on stderr (every ``headscope`` command that runs long work uses it)."""

from __future__ import annotations

import sys
import time
from typing import Any


class StderrProgress:
    """Progress on stderr: a one-line bar redrawn in a terminal (for work that lasts over a
    second); in a log file or a pipe, one line per step (``workers.core.progress_lines``)."""

    def __init__(self, label: str, *, enabled: bool = True, stream: Any = None):
        from workers.core.progress_lines import ProgressLines

        self.label = label
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self.drawn = False
        self.last = 0.0
        isatty = getattr(self.stream, "isatty", None)
        self.lines = None if (isatty and isatty()) else ProgressLines()

    def __call__(self, fraction: float, message: str) -> None:
        if not self.enabled:
            return
        if self.lines is not None:
            if self.lines.due(fraction, message):
                from workers.core.progress_lines import progress_line

                self.stream.write(
                    progress_line(self.label, fraction, self.lines.elapsed(), message) + "\n"
                )
                self.stream.flush()
            return
        now = time.perf_counter()
        if now - self.start < 1.0 or (now - self.last < 0.1 and fraction < 1):
            return
        self.last = now
        width = 30
        filled = int(round(width * max(0.0, min(1.0, fraction))))
        bar = "#" * filled + "-" * (width - filled)
        self.stream.write(
            f"\r{self.label} [{bar}] {fraction * 100:5.1f}% {now - self.start:6.1f}s {message[:40]:<40}"
        )
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
