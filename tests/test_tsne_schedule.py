"""The fast t-SNE's adaptive schedule (``tsne.schedule.PhasePlan``) fed synthetic KL sequences: when
each phase may end, the optional rules (partial windows, the main and settle phases' own
tolerances), and the defaults unchanged by them; then one small real run with the settle rule on."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from workers.analyses.tsne.affinities import head_affinities, kl_divergence
from workers.analyses.tsne.host_engine import fast_optimize
from workers.analyses.tsne.initialization import fast_spectral_init
from workers.analyses.tsne.options import FastSchedule, TSNEOptions
from workers.analyses.tsne.schedule import PhasePlan

OPTIONS = TSNEOptions()  # caps 250 / 650 / 100
# the full-window rule (the defaults before issue 34): a phase ends only after a whole window of checks
FULL = FastSchedule(partial_window=False, min_early=50, main_tol=None, settle_tol=None)


def phase_ends(schedule: FastSchedule, rates: list[tuple[float, float, float]]) -> list[list[int]]:
    """Drive a plan with KL = 1, multiplied each check by the head's rate for its phase; the
    iterations at which each head left each phase."""
    batch = len(rates)
    plan = PhasePlan.make(batch, 50, options=OPTIONS, schedule=schedule)
    kl = np.ones(batch)
    ends: list[list[int]] = [[] for _ in range(batch)]
    while len(plan.active):
        heads = plan.active
        kl[heads] *= np.array([rates[h][plan.phase[h]] for h in heads])
        steps = plan.steps(schedule.check_every)[heads]
        before = plan.phase.copy()
        for k in np.unique(steps):
            group = heads[steps == k]
            plan.advance(group, int(k), kl[group])
        for h in np.flatnonzero(plan.phase != before):
            ends[h] += [int(plan.used[h])] * int(plan.phase[h] - before[h])
    return ends


STOPPED, MOVING = (1.0, 1.0, 1.0), (0.97, 0.97, 0.97)  # KL flat, KL down 3 % every check


def test_full_window_phases_need_a_full_window():
    """The full-window rule: a flat head still needs 4 checks of history, so 125 + 125 + the whole
    settle phase (the 350-iteration minimum seen on SmolLM2); a moving head runs to every cap."""
    stopped, moving = phase_ends(FULL, [STOPPED, MOVING])
    assert stopped == [125, 250, 350]
    assert moving == [250, 900, 1000]


def test_default_schedule_keeps_early_exaggeration_and_ends_main_and_settle_when_flat():
    """The defaults: early exaggeration as under the full-window rule (125 at least: where the map's
    path is decided), the main phase at its minimum of 100 and the settle phase after two checks when
    the KL is flat; a moving head still runs to every cap."""
    stopped, moving = phase_ends(FastSchedule(), [STOPPED, MOVING])
    assert stopped == [125, 225, 275]
    assert moving == [250, 900, 1000]


def test_settle_phase_ends_once_its_kl_stops_moving():
    """With ``settle_tol`` a head whose KL has stopped leaves the settle phase early; one still
    improving runs the phase to its cap; the early and main phases are untouched."""
    knobs = FastSchedule(partial_window=True, min_early=125, settle_tol=1e-3, min_settle=25)
    flat_settle, moving_settle = phase_ends(knobs, [STOPPED, (1.0, 1.0, 0.99)])
    # main may end at its minimum (100) with partial windows; settle after two checks (one to compare with)
    assert flat_settle == [125, 225, 275]
    assert moving_settle == [125, 225, 325]  # 1 % a check is above the tolerance: the full 100
    default = phase_ends(FULL, [STOPPED, (1.0, 1.0, 0.99)])
    assert default[0][2] - default[0][1] == 100 and default[1][2] - default[1][1] == 100


def test_partial_window_scales_the_tolerance():
    """With ``partial_window`` a phase may end at its minimum, comparing with its oldest check at the
    tolerance scaled to the checks between: 0.1 % a check is flat (below 0.5 % / 4 per check), 0.2 %
    a check is not (above it), and the full-window rule treats both the same after 4 checks."""
    knobs = replace(FULL, partial_window=True, min_main=50)
    slow, faster = phase_ends(knobs, [(0.999, 0.999, 1.0), (0.998, 0.998, 1.0)])
    assert slow[:2] == [50, 100]
    assert faster[:2] == [250, 900]  # 0.8 % per window: never below 0.5 %
    slow_full, _ = phase_ends(replace(FULL, min_main=50), [(0.999, 0.999, 1.0), MOVING])
    assert slow_full[:2] == [125, 250]


def test_main_phase_has_its_own_tolerance():
    """``main_tol`` ends the main phase at a looser (or tighter) bar than the early phase's ``tol``."""
    head = [(0.999, 0.997, 1.0)]  # main phase: 1.2 % per window of 4 checks
    assert phase_ends(FULL, head)[0][1] == 125 + 650  # above 0.5 %: runs to the main cap
    assert (
        phase_ends(replace(FULL, main_tol=2e-2), head)[0][1] == 250
    )  # below 2 %: ends at 125 in phase


def test_settle_rule_saves_iterations_on_real_runs_and_keeps_kl():
    """Small random P, the same starts: the settle rule never adds iterations, saves some, and the exact
    KL of the returned maps stays within 1 % of the full settle phase's (the best map seen is returned)."""
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(4, 60, 60)) * 4
    a = np.exp(logits - logits.max(-1, keepdims=True))
    p = head_affinities(a / a.sum(-1, keepdims=True))
    y0 = fast_spectral_init(p, seed=0)
    full, used_full = fast_optimize(p, y0, options=OPTIONS, schedule=FULL)
    short, used_short = fast_optimize(p, y0, options=OPTIONS, schedule=replace(FULL, settle_tol=1e-3, partial_window=True,
                                                                                         min_early=125))  # fmt: skip
    assert (used_short <= used_full).all() and (used_short < used_full).any()
    np.testing.assert_array_less(kl_divergence(p, short), kl_divergence(p, full) * 1.01)
