"""Workers that give memory back after each job and are replaced after a bound.

After every job the worker collects garbage and returns freed heap pages to the system
(``malloc_trim``, glibc). The collection skips what the worker holds for good: once it is ready (its
modules imported, its models preloaded) the worker settles (``settle``): one full collection, then
``gc.freeze`` moves every survivor (~420,000 objects with torch, transformers and MiniLM) out of the
collector's sight. Without it each job's full collection walked all of them, ~0.3 s a job: with a
corpus split into parts of 500 texts, 6 % of the work (docs/scaling.md); the collector's own automatic
full collections inside a job walked them too. The worker settles again (unfreeze, full collection,
freeze) when a job changed the model cache (a model loaded or released: ``loader.cache_version``),
when more than ``SETTLE_OBJECTS`` objects survived a job's collection (lazy imports), and every
``SETTLE_EVERY_JOBS`` jobs, so cyclic garbage among frozen objects waits at most that long
(tests/test_recycle.py). It stops (warm: between jobs, exit status 0) after ``worker_max_jobs`` jobs, or when its resident memory passes ``worker_max_rss_mb``, or (exit status 3) when a job left
its GPU unusable (``workers.analyses.tsne.chain.DeviceLost``); ``headscope serve`` and the compose
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


SETTLE_EVERY_JOBS = 100
SETTLE_OBJECTS = 50_000  # survivors of a job's collection that are worth freezing


def _trim() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def give_back() -> None:
    """Collect garbage (all but the frozen objects, see ``settle``) and hand freed heap memory back
    to the system."""
    gc.collect()
    _trim()


def settle() -> None:
    """Collect every object's garbage, then freeze the survivors (``gc.freeze``): later collections,
    ``give_back``'s and the interpreter's own, skip them. For long-lived objects (modules, loaded
    models); an object frozen here that becomes cyclic garbage later waits for the next ``settle``."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    _trim()


class RecyclingWorker(SimpleWorker):
    """``SimpleWorker`` (models stay loaded between jobs) that trims memory after each job and
    stops once its resident memory passes ``max_rss_mb`` (0: no bound)."""

    max_rss_mb: float = 0.0
    on_device_lost: Any = None  # called with the reason when a job left the device unusable
    _since_settle: int = 0
    _models_seen: int = -1  # the model cache's version at the last settle

    def settle(self) -> None:
        """Freeze what the worker holds now (``settle``), remembering the model cache's version."""
        from workers.models.loader import cache_version

        settle()
        self._models_seen, self._since_settle = cache_version(), 0

    def _after_job(self) -> None:
        from workers.models.loader import cache_version

        self._since_settle += 1
        if cache_version() != self._models_seen or self._since_settle >= SETTLE_EVERY_JOBS:
            self.settle()
            return
        give_back()
        if len(gc.get_objects()) > SETTLE_OBJECTS:  # only the unfrozen ones: cheap when few
            self.settle()

    def execute_job(self, job: Any, queue: Any) -> Any:
        try:
            return super().execute_job(job, queue)
        finally:
            from workers.analyses.tsne.chain import lost

            why = lost()
            if why:  # a sticky GPU error: this process can never use its device again
                logger.error(
                    "worker %s: device lost (%s): stopping so a fresh worker takes over",
                    self.name,
                    why,
                )
                self._stop_requested = True
                if self.on_device_lost is not None:
                    self.on_device_lost(why)
            self._after_job()
            rss = rss_mb()
            if self.max_rss_mb and rss > self.max_rss_mb:
                logger.warning(
                    "worker %s: %.0f MiB resident after a job (bound %.0f): stopping to be replaced",
                    self.name,
                    rss,
                    self.max_rss_mb,
                )
                self._stop_requested = True
