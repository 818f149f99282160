"""The C heap of a process that runs models: keep freed blocks for reuse while a job runs.

A forward pass allocates and frees tensors of a few to a few tens of MiB per layer. glibc serves
blocks above its mmap threshold (128 KiB at first, rising only to the largest block freed) with a
fresh ``mmap`` and gives them back with ``munmap`` when freed, and it trims the heap's top when more
than twice that is free: the next layer's tensors then start on pages the kernel must fault in and
zero again: the causal views' batched runs spent much of their time in the kernel (measured:
docs/causal.md, "Cost", the heap). ``keep_freed_memory`` raises both thresholds so freed blocks
are reused; the worker still hands memory back between jobs (``workers.queue.recycle.give_back`` calls
``malloc_trim``), so what a job used is not held after it.

``HEADSCOPE_KEEP_FREED_MEMORY=0`` (``keep_freed_memory`` in workers/core/settings.py) leaves glibc's defaults (for comparisons: tests/bench/bench_causal.py
``--glibc-defaults``). Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import logging

from workers.core.settings import get_settings

logger = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # glibc's mallopt parameters
MMAP_THRESHOLD = 32 * 2**20  # glibc's largest: blocks up to 32 MiB come from the heap
TRIM_THRESHOLD = 1 << 30  # free memory at the heap's top kept up to 1 GiB (until malloc_trim)
TOP_PAD = 64 * 2**20

_done: bool | None = None


def keep_freed_memory() -> bool:
    """Make glibc reuse freed blocks instead of unmapping them (once per process); True if it did."""
    global _done
    if _done is not None:
        return _done
    _done = False
    if not get_settings().keep_freed_memory:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        ok = all(
            libc.mallopt(param, value) == 1
            for param, value in (
                (M_MMAP_THRESHOLD, MMAP_THRESHOLD),
                (M_TRIM_THRESHOLD, TRIM_THRESHOLD),
                (M_TOP_PAD, TOP_PAD),
            )
        )
    except (OSError, AttributeError):  # not glibc
        return False
    _done = ok
    if not ok:
        logger.info("mallopt refused the heap settings; glibc's defaults stay")
    return ok
