"""Workers that give memory back after each job and are replaced after a bound.

After every job the worker collects garbage and returns freed heap pages to the system
(``malloc_trim``, glibc). It stops (warm: between jobs, exit status 0) after ``worker_max_jobs``
jobs, or when its resident memory passes ``worker_max_rss_mb``, or (exit status 3) when a job left
its GPU unusable (``workers.analysis.tsne.chain.DeviceLost``); ``headscope serve`` and the compose
file's ``restart: unless-stopped`` start a fresh one. tests/bench/bench_worker_memory.py
reports the resident memory over 500 jobs.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
from typing import Any

from rq.worker import SimpleWorker

logger = logging.getLogger(__name__)

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_mb(pid: int | str = "self") -> float:
    """Resident memory of a process in MiB (Linux ``/proc``; 0.0 where unavailable)."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * _PAGE / 2**20
    except (OSError, IndexError, ValueError):
        return 0.0


def give_back() -> None:
    """Collect garbage and hand freed heap memory back to the system."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class RecyclingWorker(SimpleWorker):
    """``SimpleWorker`` (models stay loaded between jobs) that trims memory after each job and
    stops once its resident memory passes ``max_rss_mb`` (0: no bound)."""

    max_rss_mb: float = 0.0
    on_device_lost: Any = None  # called with the reason when a job left the device unusable

    def execute_job(self, job: Any, queue: Any) -> Any:
        try:
            return super().execute_job(job, queue)
        finally:
            from workers.analysis.tsne.chain import lost

            why = lost()
            if why:  # a sticky GPU error: this process can never use its device again
                logger.error("worker %s: device lost (%s): stopping so a fresh worker takes over", self.name, why)
                self._stop_requested = True
                if self.on_device_lost is not None:
                    self.on_device_lost(why)
            give_back()
            rss = rss_mb()
            if self.max_rss_mb and rss > self.max_rss_mb:
                logger.warning("worker %s: %.0f MiB resident after a job (bound %.0f): stopping to be replaced",
                               self.name, rss, self.max_rss_mb)
                self._stop_requested = True
