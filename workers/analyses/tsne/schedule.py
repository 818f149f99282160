"""The fast engine's adaptive schedule on the host: per-head phases (early exaggeration, main,
settle), each ended at its cap or when the head's KL stops moving (docs/tsne.md)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workers.analyses.tsne.options import KL_FLOOR, FastSchedule, TSNEOptions


def phase_tols(schedule: FastSchedule) -> tuple[float, float, float]:
    """Each phase's tolerance: ``tol`` for early, ``main_tol`` (None: ``tol``) for main, ``settle_tol``
    (None: never early) for settle."""
    main = schedule.tol if schedule.main_tol is None else schedule.main_tol
    settle = -np.inf if schedule.settle_tol is None else schedule.settle_tol
    return (schedule.tol, main, settle)


@dataclass
class PhasePlan:
    """Each head's place in the adaptive schedule (phase, iterations done, its last KL checks) and
    the rule that ends a phase: the host engine's plan for both its backends (numba, torch), kept
    in numpy; ``gpu_engine.DevicePlan`` runs the same rules as device tensors."""

    caps: tuple[int, int, int]  # early, main, settle iteration caps
    mins: tuple[int, int, int]  # each phase lasts at least this long before it may end early
    tols: tuple[float, float, float]  # a phase ends early when KL improved by less than this
    params: tuple[tuple[float, float, float], ...]  # (exaggeration, momentum, lr) per phase
    lag: int  # checks between the two KL values compared
    partial: bool  # compare with the oldest check before the window has filled (tolerance scaled)
    phase: np.ndarray  # [head] 0 early, 1 main, 2 settle, 3 done
    in_phase: np.ndarray  # [head] iterations done in the current phase
    history: np.ndarray  # [head, lag] the last KL checks of the current phase, oldest first
    used: np.ndarray  # [head] iterations done in all

    @classmethod
    def make(cls, batch: int, n: int, *, options: TSNEOptions, schedule: FastSchedule) -> PhasePlan:
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
            mins=(
                min(schedule.min_early, early),
                min(schedule.min_main, main),
                min(schedule.min_settle, settle),
            ),
            tols=phase_tols(schedule),
            params=params,
            lag=lag,
            partial=schedule.partial_window,
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

    def advance(self, heads: np.ndarray, steps: int, kl: np.ndarray) -> None:
        """Book ``steps`` iterations for ``heads`` whose KL is now ``kl``; end finished phases.

        A phase ends at its cap, or once past its minimum when the KL improved by less than its
        tolerance (relative) over the last ``lag`` checks (the settle phase only with ``settle_tol``).
        """
        self.in_phase[heads] += steps
        self.used[heads] += steps
        ph = self.phase[heads]
        cap = np.array([*self.caps, 0])[ph]
        low = np.array([*self.mins, 0])[ph]
        tol = np.array([*self.tols, -np.inf])[ph]
        then = self.history[heads, 0]
        if (
            self.partial
        ):  # the oldest check of the phase so far, and the tolerance for that many checks
            have = np.isfinite(self.history[heads]).sum(axis=1)
            then = self.history[heads, np.maximum(self.lag - have, 0) % self.lag]
            tol = tol * np.maximum(have, 1) / self.lag
        moved = (then - kl) / np.maximum(np.abs(kl), KL_FLOOR)
        still = (self.in_phase[heads] >= low) & (moved < tol)
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
