"""The ``fast`` t-SNE engine: all attention heads at once, exact forces, adaptive schedule.

What makes it fast (issue 7), keeping KL honest:

- **Exact forces, compiled.** On CPU a numba kernel (``fast_kernels``) gives each head to one
  thread and sums the Student-t forces over all pairs in float32 SIMD loops; P, positions and
  forces of a head stay in cache. At n <= 512 this beats Barnes-Hut per iteration and has no
  approximation error. On CUDA (or without numba) the same schedule runs as batched torch ops
  on ``options.device``.
- **Fewer iterations.** Each head leaves a phase when its KL stops moving (relative change below
  ``tol`` over ``window`` iterations), so openTSNE's ``early_exaggeration_iter`` and
  ``n_iter`` are upper bounds here. A short settling phase at a lower learning rate ends every
  run, so heads that would bounce around a minimum land in it instead.
- **Best seen.** The KL is estimated (float32 terms, float64 sums) every ``check_every``
  iterations; the best positions seen are returned.
- **Spectral start by Lanczos** (``fast_start``): the same start as ``spectral_init`` without a
  full eigendecomposition.

The reported KL is always the exact float64 ``kl_divergence`` of the returned embedding, computed
by ``embed_affinities`` the same way for every engine.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import torch

from workers.analysis.progress import Progress, no_progress, scaled

if TYPE_CHECKING:
    from workers.analysis.tsne import TSNEOptions

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "numba", "torch", "triton")
KL_FLOOR = 1e-2  # below this KL, changes are judged in absolute terms (a map that is already right)
P_FLUSH = 1e-20  # smaller P entries are zeroed for the float32 forces: denormal products cost ~100x


@dataclass(frozen=True)
class FastSchedule:
    """Knobs of the adaptive schedule; iteration caps come from ``TSNEOptions``."""

    check_every: int = 25  # iterations between KL checks
    window: int = 100  # a phase ends when KL improved by less than ``tol`` over this many iterations
    tol: float = 5e-3
    min_early: int = 50  # early exaggeration lasts at least this long (if the cap allows)
    min_main: int = 100  # the main phase lasts at least this long (if the cap allows)
    settle_iter: int = 100  # final iterations at a lower learning rate
    settle_lr: float = 0.125  # their learning rate, as a fraction of the main phase's
    max_step: float = 5.0  # openTSNE's max_step_norm


def numba_available() -> bool:
    """True when the compiled CPU kernels can be used."""
    try:
        import workers.analysis.fast_kernels  # noqa: F401
    except ImportError:
        return False
    return True


def pick_backend(backend: str, device: torch.device) -> str:
    """``auto``: on CPU ``numba`` when installed, else ``torch``; on CUDA ``triton`` when installed,
    else ``torch``. ``torch`` and ``triton`` run the schedule on the device (``gpu_tsne``); ``triton``
    on a CPU device runs the same kernel through Triton's interpreter (slow: for tests)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown fast t-SNE backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if backend == "auto":
        if device.type == "cpu":
            return "numba" if numba_available() else "torch"
        from workers.analysis.gpu_tsne import triton_available

        return "triton" if triton_available() else "torch"
    return backend


# ---------------------------------------------------------------------------- the schedule


@dataclass
class _Plan:
    """Per-head phase bookkeeping shared by both backends (numpy, on the host)."""

    caps: tuple[int, int, int]  # early, main, settle iteration caps
    mins: tuple[int, int]  # early and main phases last at least this long
    params: tuple[tuple[float, float, float], ...]  # (exaggeration, momentum, lr) per phase
    lag: int  # checks between the two KL values compared
    phase: np.ndarray  # [head] 0 early, 1 main, 2 settle, 3 done
    in_phase: np.ndarray  # [head] iterations done in the current phase
    history: np.ndarray  # [head, lag] the last KL checks of the current phase, oldest first
    used: np.ndarray  # [head] iterations done in all

    @classmethod
    def make(cls, batch: int, n: int, *, options: TSNEOptions, schedule: FastSchedule) -> _Plan:
        early = max(0, options.early_exaggeration_iter)
        settle = min(schedule.settle_iter, max(0, options.n_iter))
        main = max(0, options.n_iter) - settle
        ex = options.early_exaggeration
        lr_early = options.learning_rate if options.learning_rate is not None else n / ex
        lr_main = options.learning_rate if options.learning_rate is not None else float(n)
        params = (
            (ex, options.initial_momentum, lr_early),
            (1.0, options.final_momentum, lr_main),
            (1.0, options.final_momentum, lr_main * schedule.settle_lr),
        )
        lag = max(1, schedule.window // schedule.check_every)
        plan = cls(
            caps=(early, main, settle),
            mins=(min(schedule.min_early, early), min(schedule.min_main, main)),
            params=params,
            lag=lag,
            phase=np.zeros(batch, dtype=np.int64),
            in_phase=np.zeros(batch, dtype=np.int64),
            history=np.full((batch, lag), np.inf),
            used=np.zeros(batch, dtype=np.int64),
        )
        plan.skip_empty()
        return plan

    def skip_empty(self) -> None:
        """Move heads past phases with a zero cap."""
        for ph in range(3):
            at = (self.phase == ph) & (self.caps[ph] == 0)
            self.phase[at] = ph + 1

    def steps(self, check_every: int) -> np.ndarray:
        """Iterations each head does before its next check (capped by its phase)."""
        cap = np.array([*self.caps, 0])[self.phase]
        return np.minimum(check_every, cap - self.in_phase)

    def per_head(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        table = np.array([*self.params, (1.0, 0.0, 0.0)], dtype=np.float64)[self.phase]
        return table[:, 0], table[:, 1], table[:, 2]

    def advance(self, heads: np.ndarray, steps: int, kl: np.ndarray, tol: float) -> None:
        """Book ``steps`` iterations for ``heads`` whose KL is now ``kl``; end finished phases.

        The early and main phases end at their cap, or once past their minimum when the KL
        improved by less than ``tol`` (relative) over the last ``lag`` checks.
        """
        self.in_phase[heads] += steps
        self.used[heads] += steps
        ph = self.phase[heads]
        cap = np.array([*self.caps, 0])[ph]
        low = np.array([*self.mins, 0, 0])[ph]
        then = self.history[heads, 0]
        moved = (then - kl) / np.maximum(np.abs(kl), KL_FLOOR)
        still = (ph < 2) & (self.in_phase[heads] >= low) & (moved < tol)
        done = (self.in_phase[heads] >= cap) | still
        self.history[heads] = np.concatenate([self.history[heads, 1:], kl[:, None]], axis=1)
        nxt = heads[done]
        self.phase[nxt] += 1
        self.in_phase[nxt] = 0
        self.history[nxt] = np.inf
        self.skip_empty()

    @property
    def active(self) -> np.ndarray:
        return np.flatnonzero(self.phase < 3)

    @property
    def total(self) -> int:
        return sum(self.caps)


# ---------------------------------------------------------------------------- backends


class _NumbaState:
    """Head states for the compiled kernels: axis-major float32 arrays on the host."""

    def __init__(self, p: np.ndarray, y0: np.ndarray, entropy: np.ndarray):
        from workers.analysis import fast_kernels

        self.kernels = fast_kernels
        self.p = np.ascontiguousarray(p, dtype=np.float32)  # [B, n, n], no copy of kernel_p's
        self.y = np.ascontiguousarray(np.swapaxes(y0, 1, 2), dtype=np.float32)  # [B, 2, n]
        self.u = np.zeros_like(self.y)
        self.g = np.ones_like(self.y)
        self.entropy = entropy
        self.kl = np.zeros(p.shape[0])

    def run(self, heads: np.ndarray, steps: int, ex, mom, lr, max_step: float) -> np.ndarray:
        f32 = np.float32
        kernel = self.kernels.run_round if len(heads) > 1 else self.kernels.run_round_serial
        kernel(
            self.p, self.y, self.u, self.g, heads.astype(np.int64), int(steps),
            ex.astype(f32), mom.astype(f32), lr.astype(f32), f32(max_step), self.entropy, self.kl,
        )  # fmt: skip
        return self.kl[heads].copy()

    def positions(self, heads: np.ndarray) -> np.ndarray:
        return np.swapaxes(self.y[heads], 1, 2).astype(np.float64)  # [h, n, 2]


def _optimize_on_device(kind: str, device: torch.device, p: np.ndarray, y0: np.ndarray, ent: np.ndarray, *,
                        options: TSNEOptions, schedule: FastSchedule, progress: Progress) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The device-side schedule (``gpu_tsne``) behind ``fast_optimize``'s numpy interface."""
    from workers.analysis.gpu_tsne import optimize_device

    lengths = torch.full((p.shape[0],), p.shape[-1], device=device)
    best, used = optimize_device(
        torch.as_tensor(p, device=device), torch.as_tensor(y0, device=device), lengths,
        torch.as_tensor(ent, device=device), options=options, schedule=schedule, kind=kind, progress=progress,
    )  # fmt: skip
    return best.cpu().numpy(), used.cpu().numpy()


# ---------------------------------------------------------------------------- the engine


def entropies(p: np.ndarray) -> np.ndarray:
    """``sum_ij p_ij log p_ij`` per matrix, float64, one matrix at a time: [B, n, n] -> [B]."""
    from scipy.special import xlogy

    out = np.zeros(p.shape[0])
    for b in range(p.shape[0]):
        pb = np.asarray(p[b], dtype=np.float64)
        out[b] = xlogy(pb, pb).sum()
    return out


def kernel_p(p: np.ndarray) -> np.ndarray:
    """The float32 copy of P the kernels read, entries below ``P_FLUSH`` zeroed (their forces are
    < 1e-14 of a typical entry's; denormal products cost ~100x): [B, n, n], no float64 temporaries."""
    out = np.empty(p.shape, dtype=np.float32)
    for b in range(p.shape[0]):
        out[b] = p[b]
        out[b][out[b] < P_FLUSH] = 0.0
    return out


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
    from workers.analysis.tsne import _device

    schedule = schedule or FastSchedule()
    progress = progress or no_progress
    batch, n = p.shape[0], p.shape[-1]
    device = _device(options.device)
    chosen = pick_backend(backend, device)
    ent = entropies(p)
    if chosen != "numba":
        best, used = _optimize_on_device(chosen, device, p, y0, ent, options=options, schedule=schedule,
                                         progress=progress)  # fmt: skip
        logger.debug("fast t-SNE (%s on %s): iterations per head %s", chosen, device, used.tolist())
        return best, used
    state = _NumbaState(kernel_p(p), y0, ent)
    plan = _Plan.make(batch, n, options=options, schedule=schedule)
    best = np.array(y0, dtype=np.float64, copy=True)
    best_kl = np.full(batch, np.inf)
    total = max(1, plan.total)
    while len(plan.active):
        heads = plan.active
        steps = plan.steps(schedule.check_every)[heads]
        # heads that need the same number of steps go together (usually all of them)
        for k in np.unique(steps):
            group = heads[steps == k]
            ex, mom, lr = (a[group] for a in plan.per_head())
            kl = state.run(group, int(k), ex, mom, lr, schedule.max_step)
            better = kl < best_kl[group]
            if better.any():
                best[group[better]] = state.positions(group[better])
                best_kl[group[better]] = kl[better]
            plan.advance(group, int(k), kl, schedule.tol)
        progress(min(1.0, float(plan.used.mean()) / total), f"fast t-SNE: {len(plan.active)} of {batch} heads still moving")
    logger.debug("fast t-SNE (%s): iterations per head %s", chosen, plan.used.tolist())
    return best, plan.used


def run_fast(
    p: np.ndarray, *, options: TSNEOptions, x: np.ndarray | None, progress: Progress
) -> tuple[np.ndarray, np.ndarray, dict[str, object]]:
    """The engine entry ``embed_affinities`` calls: ([restart, B, n, 2], [restart, B] exact KL,
    {"backend": the engine that ran, "fallback": why others did not}).

    Where the process' chain starts with a device round (``engines``: a CUDA worker, or one told to
    by HEADSCOPE_TSNE_ENGINES), P goes up once and the chain runs there, falling back engine by
    engine; else the numba engine runs here."""
    from workers.analysis import engines
    from workers.analysis.tsne import _device

    device = _device(options.device)
    if engines.device_path(device):
        return engines.run_chain(torch.as_tensor(p, device=device), options=options, x=x, progress=progress)
    emb, kls = run_fast_host(p, options=replace(options, device="cpu"), x=x, progress=progress)
    return emb, kls, {"backend": "cpu", "fallback": engines.avoided_notes()}


def run_fast_host(
    p: np.ndarray, *, options: TSNEOptions, x: np.ndarray | None, progress: Progress
) -> tuple[np.ndarray, np.ndarray]:
    """The CPU engine (numba, or torch on CPU without it): ([restart, B, n, 2], [restart, B] exact KL)."""
    from workers.analysis.affinities import kl_divergence
    from workers.analysis.tsne import initial_embedding

    batch, n = p.shape[0], p.shape[-1]
    emb = np.zeros((options.restarts, batch, n, 2))
    kls = np.zeros((options.restarts, batch))
    for r in range(options.restarts):
        if r == 0 and options.init == "spectral":  # the same start as spectral_init, sooner
            from workers.analysis.fast_start import fast_spectral_init

            y0 = fast_spectral_init(p, seed=options.seed)
        else:
            y0 = initial_embedding(p, init=options.init, seed=options.seed, restart=r, x=x)
        emb[r], _ = fast_optimize(
            p, y0, options=options, progress=scaled(progress, r / options.restarts, (r + 1) / options.restarts)
        )
        kls[r] = kl_divergence(p, emb[r])
    if not math.isfinite(float(kls.sum())):
        logger.warning("fast t-SNE produced a non-finite KL")
    return emb, kls


def warm_up() -> float:
    """Compile (or load from numba's on-disk cache) the CPU kernels, and on a CUDA worker the
    Triton layouts its chain uses (``gpu_tsne.warm_up_kernels``); seconds taken.

    A worker calls this at start so the first request does not pay for compilation.
    """
    import time

    from workers.analysis import engines
    from workers.analysis.tsne import TSNEOptions, _device

    start = time.perf_counter()
    rng = np.random.default_rng(0)
    a = rng.random((2, 16, 16))
    p = a + a.transpose(0, 2, 1)
    p[:, np.arange(16), np.arange(16)] = 0.0
    p /= p.sum(axis=(1, 2), keepdims=True)
    options = TSNEOptions(n_iter=2, early_exaggeration_iter=2, device="cpu")
    if numba_available():
        run_fast_host(p, options=options, x=None, progress=no_progress)
    device = _device(None)
    if device.type == "cuda":
        from workers.analysis.gpu_tsne import warm_up_kernels

        chain = engines.chain_for(device)
        layouts = tuple(e.partition("-")[2] for e in chain if e.startswith("triton-"))
        try:
            run_fast(p, options=replace(options, device=str(device)), x=None, progress=no_progress)
            warm_up_kernels(device, layouts=layouts)
        except engines.DeviceLost:
            raise
        except Exception:  # a size the self-check did not cover: the job's chain will fall back
            logger.warning("warming up the Triton kernels failed", exc_info=True)
    return time.perf_counter() - start
