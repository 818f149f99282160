"""This process' fast t-SNE engines: the chain to try, what failed the start's self-check, an
injected fault, a device that was lost (docs/gpu.md, "What a GPU worker does").

Engines, fastest first: ``triton-fused`` and ``triton-wide`` (``gpu_kernels``' two layouts),
``torch`` (``device.torch_round``), ``cpu`` (the numba engine on the host, always last). ``Fault``
injects failures for tests and a first run on a new machine: ``compile`` (every round of the engine
raises Triton's "no C compiler" error, the self-check included), ``launch`` (a job's round raises,
the device stays usable), ``fatal`` (a sticky CUDA error: the device counts as unusable from then on).
Running with fallback and the self-check are in ``engines``.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from workers.analyses.tsne.options import triton_available

ROUND_KINDS = ("triton-fused", "triton-wide", "torch")

ENGINES = (*ROUND_KINDS, "cpu")

FAULTS = ("compile", "launch", "fatal")

# CUDA errors that poison the process' context: every later call fails the same way
STICKY = ("illegal memory access", "illegal address", "unspecified launch failure", "device-side assert",
          "misaligned address", "illegal instruction", "CUDA_ERROR_ILLEGAL")  # fmt: skip


class DeviceLost(RuntimeError):
    """The device is unusable in this process: the job must be retried by a fresh worker."""

    def __init__(self, engine: str, why: str):
        self.engine, self.why = engine, why
        super().__init__(f"t-SNE on {engine} left the device unusable: {why}")


@dataclass(frozen=True)
class Fault:
    """An injected failure of ``engine``'s rounds (``triton`` = both layouts); see the module doc."""

    kind: str
    engine: str = "triton"

    @classmethod
    def parse(cls, text: str | None) -> Fault | None:
        """``compile``, ``launch`` or ``fatal``, optionally ``@engine`` (default triton); empty: None."""
        if not text:
            return None
        kind, _, engine = text.strip().partition("@")
        engine = engine or "triton"
        if kind not in FAULTS or engine not in ("triton", *ENGINES):
            raise ValueError(f"HEADSCOPE_TSNE_FAULT must be one of {', '.join(FAULTS)}, optionally @engine "
                             f"({', '.join(('triton', *ROUND_KINDS))}); got {text!r}")  # fmt: skip
        return cls(kind, engine)

    def hits(self, kind: str) -> bool:
        return kind == self.engine or (self.engine == "triton" and kind.startswith("triton"))

    def before_round(self, kind: str) -> None:
        """Raise the injected error if it applies to a round of ``kind`` now."""
        if not self.hits(kind):
            return
        if self.kind == "compile":
            raise RuntimeError("Failed to find C compiler. Please specify via CC environment variable "
                               "(injected by HEADSCOPE_TSNE_FAULT)")  # fmt: skip
        if _checking.get():  # launch and fatal faults hit jobs only
            return
        if self.kind == "launch":
            raise RuntimeError(
                f"{kind} launch failed: out of resources (injected by HEADSCOPE_TSNE_FAULT)"
            )
        state = _state()
        state.lost = f"{kind}: CUDA error: an illegal memory access was encountered (injected)"
        raise RuntimeError(
            "CUDA error: an illegal memory access was encountered (injected by HEADSCOPE_TSNE_FAULT)"
        )


@dataclass
class EngineState:
    """This process' engines: the chain to try, what failed its self-check, the injected fault."""

    device: torch.device
    chain: list[str]  # usable engines in order, "cpu" last
    failed: dict[str, str] = field(default_factory=dict)  # engine -> why, from the self-check
    fault: Fault | None = None
    lost: str | None = None  # why the device became unusable, once it has


_STATE: EngineState | None = None

_checking: contextvars.ContextVar[bool] = contextvars.ContextVar("tsne_self_check", default=False)

_avoid: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "tsne_avoid", default=frozenset()
)

_avoid_notes: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "tsne_avoid_notes", default=()
)


def default_chain(device: torch.device, candidates: tuple[str, ...] | None = None) -> list[str]:
    """Engines a process may use on ``device`` before any check: every round kind on CUDA (Triton's
    only when it imports), none on CPU; ``candidates`` replaces the round kinds. "cpu" ends it."""

    if candidates is None:
        candidates = ROUND_KINDS if device.type == "cuda" else ()
    kinds = [
        k for k in candidates if k != "cpu" and (not k.startswith("triton") or triton_available())
    ]
    return [*kinds, "cpu"]


def _same(a: torch.device, b: torch.device) -> bool:
    """``cuda`` and ``cuda:0`` are one device when 0 is the current one."""
    if a.type != b.type:
        return False
    if a.type != "cuda" or a.index == b.index:
        return True
    current = torch.cuda.current_device()
    return (a.index if a.index is not None else current) == (
        b.index if b.index is not None else current
    )


def _state(device: torch.device | None = None) -> EngineState:
    """The installed state when ``device`` is its device (or None); a device with nothing installed
    gets its defaults, installed only if nothing else is."""
    global _STATE
    if _STATE is not None and (device is None or _same(_STATE.device, device)):
        return _STATE
    dev = device or torch.device("cpu")
    state = EngineState(dev, default_chain(dev))
    if _STATE is None:
        _STATE = state
    return state


def current(device: torch.device | None = None) -> EngineState:
    """The engines of ``device`` in this process (the installed ones, or its defaults)."""
    return _state(device)


def install(state: EngineState | None) -> EngineState | None:
    """Make ``state`` this process' engines (None: back to the defaults); returns the previous one."""
    global _STATE
    before, _STATE = _STATE, state
    return before


@contextlib.contextmanager
def checking(state: EngineState) -> Iterator[None]:
    """Within the block ``state`` is this process' engines and rounds run as the start's
    self-check (``engines.self_check``): injected ``launch`` and ``fatal`` faults, which hit jobs
    only, stay quiet. The engines installed before come back after it."""
    previous = install(state)
    token = _checking.set(True)
    try:
        yield
    finally:
        _checking.reset(token)
        install(previous)


def lost() -> str | None:
    """Why the device became unusable in this process, or None."""
    return _STATE.lost if _STATE is not None else None


@contextlib.contextmanager
def avoiding(
    engines: list[str] | tuple[str, ...] | frozenset[str], *, notes: tuple[str, ...] = ()
) -> Iterator[None]:
    """Within the block, skip ``engines`` (a retried job skips the engine that lost the device);
    ``notes`` say why, in every result's fallback list."""
    token, token_notes = _avoid.set(frozenset(engines)), _avoid_notes.set(tuple(notes))
    try:
        yield
    finally:
        _avoid.reset(token)
        _avoid_notes.reset(token_notes)


def avoided_notes() -> list[str]:
    """Why engines are avoided in this context (a retried job's note), for its results."""
    return list(_avoid_notes.get())


def chain_for(device: torch.device) -> list[str]:
    """The engines to try on ``device``, in order: the installed chain minus the avoided ones."""
    state = _state(device)
    if state.lost:  # nothing runs on the device any more
        return ["cpu"]
    avoid = _avoid.get()
    return [
        e
        for e in state.chain
        if e == "cpu" or not (e in avoid or ("triton" in avoid and e.startswith("triton")))
    ]


def attempts(device: torch.device) -> list[str]:
    """``chain_for`` as attempts: both Triton layouts usable -> one ``triton`` attempt (the layout
    is picked per batch), then the rest."""
    return attempts_of(chain_for(device))


def device_path(device: torch.device) -> bool:
    """True when the first engine for ``device`` is a device round (P should stay on the device)."""
    return attempts(device)[0] != "cpu"


def describe(state: EngineState | None = None) -> str:
    """The engine as health shows it: ``triton``, ``triton-wide (triton-fused failed: ...)``,
    ``cpu: triton failed: no C compiler; torch failed: ...``."""
    state = state or _state()
    first = "cpu" if state.lost else attempts_of(state.chain)[0]
    reasons: dict[str, list[str]] = {}
    for engine, why in state.failed.items():
        reasons.setdefault(why, []).append(engine)
    parts = []
    for why, engines in reasons.items():
        name = (
            "triton" if sorted(engines) == ["triton-fused", "triton-wide"] else ", ".join(engines)
        )
        parts.append(f"{name} failed: {why}")
    if state.lost:
        parts.append(f"device lost: {state.lost}")
    if not parts:
        return first
    return f"{first}: {'; '.join(parts)}"


def attempts_of(chain: list[str]) -> list[str]:
    """A chain as attempts (see ``attempts``)."""
    both = "triton-fused" in chain and "triton-wide" in chain
    return list(dict.fromkeys("triton" if both and e.startswith("triton") else e for e in chain))


def why(exc: BaseException) -> str:
    """A one-line reason for health and logs."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if "Failed to find C compiler" in text:
        return "no C compiler" + (" (injected)" if "injected" in str(exc) else "")
    return text[:160]


def device_usable(device: torch.device) -> bool:
    """A tiny computation on ``device`` succeeds (False once a sticky error or an injected fatal
    fault hit this process)."""
    if lost():
        return False
    if device.type != "cuda":
        return True
    try:
        with torch.cuda.device(device):
            torch.cuda.synchronize()
            return bool((torch.ones(1, device=device) + 1).item() == 2.0)
    except Exception:
        return False


def is_fatal(exc: BaseException, device: torch.device) -> bool:
    return any(s in str(exc) for s in STICKY) or not device_usable(device)


def round_hook(kind: str) -> None:
    """Called before every device round of ``kind``: the injected fault, if any."""
    fault = _STATE.fault if _STATE is not None else None
    if fault is not None:
        fault.before_round(kind)
