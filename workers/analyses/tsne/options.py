"""The t-SNE engine's vocabulary, below everything else in it: the options of a run, its result, the
fast engine's schedule knobs and thresholds, and which compiled kernels this machine has.

The engine is one package whose modules import only downward (``tests/test_layering.py``)::

    cpu_kernels, gpu_kernels   compiled kernels (numba, Triton); import nothing of the package
    options                    TSNEOptions, TSNEResult, FastSchedule, KL_FLOOR, what is installed
    affinities                 P from attention or distances; the exact KL; P as the kernels read it
    start                      spectral / random / pca starts (full, Lanczos on the host or device)
    schedule                   the fast engine's adaptive schedule on the host
    chain                      the process' engine chain: faults, what failed, a lost device
    device                     the fast engine with its schedule on a torch device (torch / Triton)
    fast                       the fast engine on the host (numba), and the backend choice
    reference                  the plain-torch ``batched`` and openTSNE reference engines
    engines                    running with fallback, the self-check, a worker's start, warm-up
    __init__                   the public entry: embed_affinities, head_tsne, embed_layer

Definitions: docs/analyses.md; the engines: docs/tsne.md.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from workers.core.errors import HeadscopeError, OutOfRangeError
from workers.core.options import (
    EARLY_EXAGGERATION_ITER,
    MAX_EARLY_EXAGGERATION_ITER,
    MAX_N_ITER,
    MAX_RESTARTS,
    N_ITER,
)

logger = logging.getLogger(__name__)


Engine = Literal["fast", "batched", "opentsne"]

ENGINES = ("fast", "batched", "opentsne")

INITS = ("spectral", "random", "pca")


@dataclass(frozen=True)
class TSNEOptions:
    """Knobs of one t-SNE run; defaults are openTSNE's (250 + 750 iterations).

    The ``fast`` engine takes the iteration counts as upper bounds (see ``fast``).
    """

    engine: str = "fast"
    n_iter: int = N_ITER
    early_exaggeration_iter: int = EARLY_EXAGGERATION_ITER
    early_exaggeration: float = 12.0
    learning_rate: float | None = None  # None: "auto", n / exaggeration
    initial_momentum: float = 0.5
    final_momentum: float = 0.8
    init: str = "spectral"  # restart 0; restarts 1.. use random inits seeded seed + r
    restarts: int = 1
    seed: int = 0
    theta: float = 0.5  # Barnes-Hut accuracy (openTSNE engine)
    n_jobs: int = 1  # openTSNE threads
    device: str | None = None  # batched/fast engines: None = cuda if available else cpu
    dtype: str = "float32"  # batched engine (and fast on torch) compute dtype; KL is always float64
    max_step_norm: float | None = 5.0  # openTSNE's default: clip each point's step to this length

    def validate(self) -> TSNEOptions:
        if self.engine not in ENGINES:
            raise HeadscopeError(
                f"unknown t-SNE engine {self.engine!r}; use one of {', '.join(ENGINES)}"
            )
        if self.init not in INITS:
            raise HeadscopeError(f"unknown init {self.init!r}; use one of {', '.join(INITS)}")
        if not 1 <= self.restarts <= MAX_RESTARTS:
            raise OutOfRangeError(
                f"restarts must be between 1 and {MAX_RESTARTS}, got {self.restarts}"
            )
        if not 0 <= self.n_iter <= MAX_N_ITER:
            raise OutOfRangeError(f"n_iter must be between 0 and {MAX_N_ITER:,}, got {self.n_iter}")
        if not 0 <= self.early_exaggeration_iter <= MAX_EARLY_EXAGGERATION_ITER:
            raise OutOfRangeError(
                f"early_exaggeration_iter must be between 0 and {MAX_EARLY_EXAGGERATION_ITER:,}, "
                f"got {self.early_exaggeration_iter}"
            )
        return self


@dataclass
class TSNEResult:
    """Embeddings of a batch of P matrices, best restart each."""

    embedding: np.ndarray  # [batch, n, 2]
    kl: np.ndarray  # [batch], exact KL of the returned embedding
    kl_restarts: np.ndarray  # [batch, restarts]
    tsne_s: float  # seconds in t-SNE alone (init + optimisation + KL)
    engine: str
    extra: dict = field(default_factory=dict)


@dataclass
class HeadTSNEResult:
    """Attention-head t-SNE of a grid of (layer, head) pairs."""

    layers: list[int]
    heads: list[int]
    kept: np.ndarray  # indices of the tokens embedded
    embedding: np.ndarray  # [layer, head, token, 2]
    kl: np.ndarray  # [layer, head]
    kl_restarts: np.ndarray  # [layer, head, restart]
    tsne_s: float
    engine: str


def select_indices(value: int | str | list[int] | None, size: int, what: str) -> list[int]:
    """``all``/None -> every index; an int or list -> checked indices (a clear error out of range)."""
    if value is None or value == "all":
        return list(range(size))
    items = [value] if isinstance(value, int | str) else list(value)
    out = []
    for item in items:
        try:
            i = int(item)
        except (TypeError, ValueError):
            raise HeadscopeError(f"{what} must be an integer or 'all', got {item!r}") from None
        if not 0 <= i < size:
            raise OutOfRangeError(
                f"{what} {i} is out of range: the model has {size} {what}s (0-{size - 1})"
            )
        out.append(i)
    return out


def with_overrides(options: TSNEOptions, **changes: object) -> TSNEOptions:
    """A copy of ``options`` with the non-None ``changes`` applied."""
    return replace(options, **{k: v for k, v in changes.items() if v is not None})


BACKENDS = ("auto", "numba", "torch", "triton")

KL_FLOOR = 1e-2  # below this KL, changes are judged in absolute terms (a map that is already right)

P_FLUSH = 1e-20  # smaller P entries are zeroed for the float32 forces: denormal products are slow


@dataclass(frozen=True)
class FastSchedule:
    """Knobs of the adaptive schedule; iteration caps come from ``TSNEOptions``.

    The defaults: early exaggeration as before (it lasts at least 125 iterations, where its
    path is decided), the main and settle phases end as soon as their KL stops moving (partial windows,
    ``main_tol`` 1e-2, ``settle_tol`` 1e-3): fewer iterations than the earlier defaults, every
    head's KL within the seed-to-seed noise (measured: docs/tsne.md, "Fewer iterations").
    """

    check_every: int = 25  # iterations between KL checks
    window: int = (
        100  # a phase ends when KL improved by less than ``tol`` over this many iterations
    )
    tol: float = 5e-3
    main_tol: float | None = 1e-2  # the main phase's tolerance (None: ``tol``)
    min_early: int = 125  # early exaggeration lasts at least this long (if the cap allows)
    min_main: int = 100  # the main phase lasts at least this long (if the cap allows)
    settle_iter: int = 100  # final iterations at a lower learning rate
    settle_lr: float = 0.125  # their learning rate, as a fraction of the main phase's
    settle_tol: float | None = (
        1e-3  # None: the settle phase always runs ``settle_iter``; else it ends
    )
    # early, once past ``min_settle``, when KL improved by less than this over the window
    min_settle: int = 25
    partial_window: bool = (
        True  # before a phase has ``window`` iterations of checks, compare with its
    )
    # oldest check, the tolerance scaled by the iterations between them (False: wait for a full window)
    max_step: float = 5.0  # openTSNE's max_step_norm


def numba_available() -> bool:
    """True when the compiled CPU kernels can be used."""
    try:
        import workers.analyses.tsne.cpu_kernels  # noqa: F401
    except ImportError:
        return False
    return True


def triton_available() -> bool:
    """True when the Triton kernel can be built (Triton installed)."""
    try:
        import workers.analyses.tsne.gpu_kernels  # noqa: F401
    except ImportError:
        return False
    return True
