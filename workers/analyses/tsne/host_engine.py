"""The ``fast`` t-SNE engine on the host: all attention heads at once, exact forces, adaptive schedule.

What makes it fast, keeping KL honest (docs/tsne.md, "The fast engine"):

- **Exact forces, compiled.** On CPU a numba kernel (``cpu_kernels``) gives each head to one
  thread and sums the Student-t forces over all pairs in float32 SIMD loops; P, positions and
  forces of a head stay in cache. At n <= 512 this beats Barnes-Hut per iteration and has no
  approximation error. On CUDA (or without numba) the same schedule runs on the device
  (``device``).
- **Fewer iterations.** Each head leaves a phase when its KL stops moving (``schedule``), so
  openTSNE's ``early_exaggeration_iter`` and ``n_iter`` are upper bounds here. A short settling
  phase at a lower learning rate ends every run.
- **Best seen.** The KL is estimated (float32 terms, float64 sums) every ``check_every``
  iterations; the best positions seen are returned.
- **Spectral start by Lanczos** (``start.fast_spectral_init``).

The reported KL is always the exact float64 ``kl_divergence`` of the returned embedding.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

from workers.analyses.tsne.affinities import entropies, kernel_p, kl_divergence
from workers.analyses.tsne.gpu_engine import optimize_device
from workers.analyses.tsne.initialization import initial_embedding
from workers.analyses.tsne.options import (
    BACKENDS,
    FastSchedule,
    TSNEOptions,
    numba_available,
)
from workers.analyses.tsne.schedule import PhasePlan
from workers.core.progress import Progress, no_progress, scaled
from workers.models.devices import resolve_device

logger = logging.getLogger(__name__)


def pick_backend(backend: str, device: torch.device) -> str:
    """``auto``: on CPU ``numba`` when installed, else ``torch``; on CUDA ``triton`` when installed,
    else ``torch``. ``torch`` and ``triton`` run the schedule on the device (``device``); ``triton``
    on a CPU device runs the same kernel through Triton's interpreter (slow: for tests)."""
    if backend not in BACKENDS:
        raise ValueError(
            f"unknown fast t-SNE backend {backend!r}; use one of {', '.join(BACKENDS)}"
        )
    if backend == "auto":
        if device.type == "cpu":
            return "numba" if numba_available() else "torch"
        from workers.analyses.tsne.options import triton_available

        return "triton" if triton_available() else "torch"
    return backend


class _NumbaState:
    """Head states for the compiled kernels: axis-major float32 arrays on the host."""

    def __init__(self, p: np.ndarray, y0: np.ndarray, entropy: np.ndarray):
        from workers.analyses.tsne import cpu_kernels as fast_kernels

        self.kernels = fast_kernels
        self.p = np.ascontiguousarray(p, dtype=np.float32)  # [B, n, n], no copy of kernel_p's
        self.y = np.ascontiguousarray(np.swapaxes(y0, 1, 2), dtype=np.float32)  # [B, 2, n]
        self.u = np.zeros_like(self.y)
        self.g = np.ones_like(self.y)
        self.entropy = entropy
        self.kl = np.zeros(p.shape[0])
        self.sym = all(np.array_equal(h, h.T) for h in self.p)  # as every P of the engine is

    def run(self, heads: np.ndarray, steps: int, ex, mom, lr, max_step: float) -> np.ndarray:
        f32 = np.float32
        kernel = self.kernels.run_round if len(heads) > 1 else self.kernels.run_round_serial
        kernel(
            self.p, self.y, self.u, self.g, heads.astype(np.int64), int(steps),
            ex.astype(f32), mom.astype(f32), lr.astype(f32), f32(max_step), self.entropy, self.kl, self.sym,
        )  # fmt: skip
        return self.kl[heads].copy()

    def positions(self, heads: np.ndarray) -> np.ndarray:
        return np.swapaxes(self.y[heads], 1, 2).astype(np.float64)  # [h, n, 2]


def _optimize_on_device(kind: str, device: torch.device, p: np.ndarray, y0: np.ndarray, ent: np.ndarray, *,
                        options: TSNEOptions, schedule: FastSchedule, progress: Progress) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The device-side schedule (``device``) behind ``fast_optimize``'s numpy interface."""

    lengths = torch.full((p.shape[0],), p.shape[-1], device=device)
    best, used = optimize_device(
        torch.as_tensor(p, device=device), torch.as_tensor(y0, device=device), lengths,
        torch.as_tensor(ent, device=device), options=options, schedule=schedule, kind=kind, progress=progress,
    )  # fmt: skip
    return best.cpu().numpy(), used.cpu().numpy()


def fast_optimize(
    p: np.ndarray,
    y0: np.ndarray,
    *,
    options: TSNEOptions,
    schedule: FastSchedule | None = None,
    backend: str = "auto",
    progress: Progress | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Optimise a batch of t-SNE embeddings with the adaptive schedule.

    Args:
        p: [B, n, n] joint probabilities (symmetric, zero diagonal, summing to 1).
        y0: [B, n, 2] starts.
        options: a ``TSNEOptions``: iteration caps, exaggeration, momenta, learning rate, device.
        schedule: the adaptive knobs; defaults to ``FastSchedule()``.
        backend: ``auto``, ``numba``, ``torch`` or ``triton`` (see ``pick_backend``).

    Returns:
        ([B, n, 2] float64 best embedding seen, [B] iterations used per head).
    """

    schedule = schedule or FastSchedule()
    progress = progress or no_progress
    batch, n = p.shape[0], p.shape[-1]
    device = resolve_device(options.device)
    chosen = pick_backend(backend, device)
    ent = entropies(p)
    if chosen != "numba":
        best, used = _optimize_on_device(chosen, device, p, y0, ent, options=options, schedule=schedule,
                                         progress=progress)  # fmt: skip
        logger.debug("fast t-SNE (%s on %s): iterations per head %s", chosen, device, used.tolist())
        return best, used
    state = _NumbaState(kernel_p(p), y0, ent)
    plan = PhasePlan.make(batch, n, options=options, schedule=schedule)
    best = np.array(y0, dtype=np.float64, copy=True)
    best_kl = np.full(batch, np.inf)
    total = max(1, plan.total)
    while len(plan.active):
        heads = plan.active
        steps = plan.steps(schedule.check_every)[heads]
        # heads that need the same number of steps go together (usually all of them)
        ex, mom, lr = plan.per_head()  # [batch]: the kernels read head b's values at index b
        for k in np.unique(steps):
            group = heads[steps == k]
            kl = state.run(group, int(k), ex, mom, lr, schedule.max_step)
            better = kl < best_kl[group]
            if better.any():
                best[group[better]] = state.positions(group[better])
                best_kl[group[better]] = kl[better]
            plan.advance(group, int(k), kl)
        progress(
            min(1.0, float(plan.used.mean()) / total),
            f"fast t-SNE: {len(plan.active)} of {batch} heads still moving",
        )
    logger.debug("fast t-SNE (%s): iterations per head %s", chosen, plan.used.tolist())
    return best, plan.used


@contextmanager
def torch_threads_kept() -> Iterator[int]:
    """numba at no more threads than torch has, and torch's count as it was afterwards; yields it.

    numba's OpenMP threading layer shares libgomp with torch: its first parallel run set the process's
    OpenMP thread count to numba's own (all cores), and torch's with it. A worker started with one
    thread (``OMP_NUM_THREADS=1``, as ``docker-compose`` and bench_scale run them) went on at two after
    its t-SNE warm-up, so two such workers on two cores contended (measured: docs/scaling.md, "On
    quiet cores")."""
    had = torch.get_num_threads()
    if numba_available():
        import numba

        numba.set_num_threads(max(1, min(had, numba.config.NUMBA_NUM_THREADS)))
    try:
        yield had
    finally:
        torch.set_num_threads(had)


def run_fast_host(
    p: np.ndarray, *, options: TSNEOptions, x: np.ndarray | None, progress: Progress
) -> tuple[np.ndarray, np.ndarray]:
    """The CPU engine (numba, or torch on CPU without it): ([restart, B, n, 2], [restart, B] exact KL)."""
    with torch_threads_kept():
        return _run_fast_host(p, options=options, x=x, progress=progress)


def _run_fast_host(
    p: np.ndarray, *, options: TSNEOptions, x: np.ndarray | None, progress: Progress
) -> tuple[np.ndarray, np.ndarray]:
    batch, n = p.shape[0], p.shape[-1]
    emb = np.zeros((options.restarts, batch, n, 2))
    kls = np.zeros((options.restarts, batch))
    for r in range(options.restarts):
        if r == 0 and options.init == "spectral":  # the same start as spectral_init, sooner
            from workers.analyses.tsne.initialization import fast_spectral_init

            y0 = fast_spectral_init(p, seed=options.seed)
        else:
            y0 = initial_embedding(p, init=options.init, seed=options.seed, restart=r, x=x)
        emb[r], _ = fast_optimize(
            p,
            y0,
            options=options,
            progress=scaled(progress, r / options.restarts, (r + 1) / options.restarts),
        )
        kls[r] = kl_divergence(p, emb[r])
    if not math.isfinite(float(kls.sum())):
        logger.warning("fast t-SNE produced a non-finite KL")
    return emb, kls
