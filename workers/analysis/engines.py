"""Which fast t-SNE engine runs: checked before a worker serves, replaced per job when it fails (issue 20).

Engines, fastest first: ``triton-fused`` and ``triton-wide`` (``gpu_kernels``' two layouts),
``torch`` (``gpu_tsne.torch_round``), ``cpu`` (the numba engine on the host, always last).

- ``self_check(device, candidates)`` runs each device round on a small fixed problem (two heads of
  different lengths, fixed iteration counts) and keeps those whose positions are finite and whose
  KL is within 1.02x the CPU engine's. ``install`` makes the result this process' chain.
- ``run_chain`` runs one t-SNE with the first engine of the chain; an error that leaves the device
  usable moves on to the next engine (the result records which ran and why); an error that leaves
  it unusable (an illegal address is sticky for the whole process) raises ``DeviceLost``.
- ``Fault`` injects failures for tests and for the first run on a new machine (docs/gpu.md):
  ``compile`` (every round of the engine raises Triton's "no C compiler" error, the self-check
  included), ``launch`` (a job's round raises, the device stays usable), ``fatal`` (a job's round
  raises a sticky CUDA error and the device counts as unusable from then on).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import torch

from workers.errors import HeadscopeError

if TYPE_CHECKING:
    from workers.analysis.progress import Progress
    from workers.analysis.tsne import TSNEOptions

logger = logging.getLogger(__name__)

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


# ---------------------------------------------------------------------------- faults


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
            raise RuntimeError(f"{kind} launch failed: out of resources (injected by HEADSCOPE_TSNE_FAULT)")
        state = _state()
        state.lost = f"{kind}: CUDA error: an illegal memory access was encountered (injected)"
        raise RuntimeError("CUDA error: an illegal memory access was encountered (injected by HEADSCOPE_TSNE_FAULT)")


# ---------------------------------------------------------------------------- process state


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
_avoid: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("tsne_avoid", default=frozenset())
_avoid_notes: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("tsne_avoid_notes", default=())


def default_chain(device: torch.device, candidates: tuple[str, ...] | None = None) -> list[str]:
    """Engines a process may use on ``device`` before any check: every round kind on CUDA (Triton's
    only when it imports), none on CPU; ``candidates`` replaces the round kinds. "cpu" ends it."""
    from workers.analysis.gpu_tsne import triton_available

    if candidates is None:
        candidates = ROUND_KINDS if device.type == "cuda" else ()
    kinds = [k for k in candidates if k != "cpu" and (not k.startswith("triton") or triton_available())]
    return [*kinds, "cpu"]


def _same(a: torch.device, b: torch.device) -> bool:
    """``cuda`` and ``cuda:0`` are one device when 0 is the current one."""
    if a.type != b.type:
        return False
    if a.type != "cuda" or a.index == b.index:
        return True
    current = torch.cuda.current_device()
    return (a.index if a.index is not None else current) == (b.index if b.index is not None else current)


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


def lost() -> str | None:
    """Why the device became unusable in this process, or None."""
    return _STATE.lost if _STATE is not None else None


@contextlib.contextmanager
def avoiding(engines: list[str] | tuple[str, ...] | frozenset[str], *, notes: tuple[str, ...] = ()) -> Iterator[None]:
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
    return [e for e in state.chain if e == "cpu" or not (e in avoid or ("triton" in avoid and e.startswith("triton")))]


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
        name = "triton" if sorted(engines) == ["triton-fused", "triton-wide"] else ", ".join(engines)
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


# ---------------------------------------------------------------------------- running with fallback


def run_chain(
    p: torch.Tensor,
    *,
    options: TSNEOptions,
    x: np.ndarray | None = None,
    progress: Progress | None = None,
) -> tuple[np.ndarray, np.ndarray, dict[str, object]]:
    """The fast engine on P's device with fallback: p [B, N, N] (one length) ->
    (embeddings [restart, B, N, 2], exact KL [restart, B], {"backend": engine that ran, "fallback": [...]}).

    Raises:
        DeviceLost: an engine's error left the device unusable (the caller retries elsewhere).
        HeadscopeError: the input is unusable (every engine would refuse it).
    """
    from workers.analysis.gpu_tsne import embed_device, ran_as

    device = p.device
    notes = avoided_notes()
    for engine in attempts(device):
        if engine == "cpu":
            emb, kls = _cpu(p, options=options, x=x, progress=progress)
            return emb, kls, {"backend": "cpu", "fallback": notes}
        try:
            emb_t, kls_t = embed_device(p, options=options, kind=engine, x=x, progress=progress)
            ran = ran_as(engine, p.shape[0], p.shape[-1], device)
            emb, kls = emb_t.cpu().numpy(), kls_t.cpu().numpy()  # a device error surfaces here at the latest
            if not (np.isfinite(emb).all() and np.isfinite(kls).all()):
                raise FloatingPointError("non-finite positions")
            return emb, kls, {"backend": ran, "fallback": notes}
        except HeadscopeError:
            raise
        except Exception as exc:
            if is_fatal(exc, device):
                state = _state(device)
                state.lost = state.lost or f"{engine}: {why(exc)}"
                logger.error("t-SNE on %s left %s unusable (%s): this worker must be replaced", engine, device, why(exc))
                raise DeviceLost(engine, why(exc)) from exc
            logger.warning("t-SNE on %s failed (%s): running it with the next engine", engine, why(exc), exc_info=True)
            notes.append(f"{engine} failed: {why(exc)}")
    raise AssertionError("the chain always ends with cpu")  # pragma: no cover


def _cpu(p: torch.Tensor, *, options: TSNEOptions, x: np.ndarray | None, progress: Progress | None):
    from workers.analysis.fast_tsne import run_fast_host
    from workers.analysis.progress import no_progress

    host = p.detach().to("cpu", torch.float64).numpy()
    return run_fast_host(host, options=replace(options, device="cpu"), x=x, progress=progress or no_progress)


# ---------------------------------------------------------------------------- the self-check


@dataclass
class CheckReport:
    """The self-check of one device: engines that passed, engines that failed and why."""

    device: str
    passed: list[str]
    failed: dict[str, str]
    seconds: float
    lost: str | None = None

    def state(self, *, fault: Fault | None = None) -> EngineState:
        return EngineState(torch.device(self.device), [*self.passed, "cpu"], dict(self.failed), fault, self.lost)

    def line(self) -> str:
        """The one log line of a worker's start."""
        return f"t-SNE engine on {self.device}: {describe(self.state())} (self-check {self.seconds:.1f} s)"


def check_problem() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fixed problem: two attention-like heads of 20 and 13 points padded into one batch:
    (P [2, 20, 20] float64, lengths [2], starts [2, 20, 2] float64)."""
    from workers.analysis.affinities import head_affinities
    from workers.analysis.gpu_tsne import pad
    from workers.analysis.tsne import random_init

    ps, ys = [], []
    for b, n in enumerate((20, 13)):
        rng = np.random.default_rng(100 + b)
        logits = rng.normal(size=(n, n)) * 3.0
        logits[np.arange(n), rng.integers(0, n, size=n)] += 6.0
        a = np.exp(logits - logits.max(-1, keepdims=True))
        ps.append(torch.as_tensor(head_affinities(a / a.sum(-1, keepdims=True))))
        ys.append(random_init(1, n, seed=b)[0])
    p, lengths = pad(ps)
    y0 = torch.zeros(2, 20, 2, dtype=torch.float64)
    for b, y in enumerate(ys):
        y0[b, : len(y)] = torch.as_tensor(y)
    return p, lengths, y0


CHECK_OPTIONS = dict(early_exaggeration_iter=40, n_iter=80)


def self_check(device: torch.device | str, candidates: tuple[str, ...] = ROUND_KINDS, *,
               fault: Fault | None = None) -> CheckReport:  # fmt: skip
    """Run each candidate round on ``check_problem`` on ``device`` (fixed iteration counts: no early
    stop) and compare with the CPU engine: finite positions and each head's KL within 1.02x."""
    from workers.analysis.affinities import kl_divergence
    from workers.analysis.fast_tsne import FastSchedule, fast_optimize
    from workers.analysis.gpu_tsne import entropy_device, optimize_device
    from workers.analysis.tsne import TSNEOptions

    device = torch.device(device)
    start = time.perf_counter()
    p, lengths, y0 = check_problem()
    schedule = FastSchedule(check_every=20, window=20, tol=-1.0, min_early=0, min_main=0, settle_iter=20)
    ref = []
    for b, n in enumerate(lengths.tolist()):
        pb, yb = p[b : b + 1, :n, :n].numpy(), y0[b : b + 1, :n].numpy()
        got, _ = fast_optimize(pb, yb, options=TSNEOptions(device="cpu", **CHECK_OPTIONS), schedule=schedule)
        ref.append(float(kl_divergence(pb, got)[0]))
    passed: list[str] = []
    failed: dict[str, str] = {}
    lost_why: str | None = None
    previous = _STATE
    probe = EngineState(device, [*candidates, "cpu"], fault=fault)
    install(probe)
    token = _checking.set(True)
    try:
        for kind in candidates:
            if lost_why:
                failed[kind] = "not checked: the device was lost"
                continue
            if kind.startswith("triton"):
                from workers.analysis.gpu_tsne import triton_available

                if not triton_available():
                    failed[kind] = "Triton is not installed"
                    continue
            try:
                pd = p.to(device, torch.float32)
                emb, _ = optimize_device(pd, y0.to(device), lengths.to(device), entropy_device(pd),
                                         options=TSNEOptions(device=str(device), **CHECK_OPTIONS),
                                         schedule=schedule, kind=kind)  # fmt: skip
                emb = emb.cpu().numpy()
            except Exception as exc:
                failed[kind] = why(exc)
                if is_fatal(exc, device):
                    lost_why = f"{kind}: {why(exc)}"
                continue
            kls = [float(kl_divergence(p[b, :n, :n].numpy(), emb[b, :n])) for b, n in enumerate(lengths.tolist())]
            if not np.isfinite(emb).all():
                failed[kind] = "non-finite positions"
            elif any(k > 1.02 * r + 1e-9 for k, r in zip(kls, ref, strict=True)):
                failed[kind] = f"KL {max(kls):.4g} against the CPU engine's {max(ref):.4g} (over 1.02x)"
            else:
                passed.append(kind)
    finally:
        _checking.reset(token)
        install(previous)
    return CheckReport(str(device), passed, failed, time.perf_counter() - start, lost_why)


# ---------------------------------------------------------------------------- a worker's start


def parse_candidates(text: str | None, device: torch.device) -> tuple[str, ...]:
    """HEADSCOPE_TSNE_ENGINES as round kinds (``cpu`` dropped: always last); unset: every round
    kind on CUDA, none on CPU."""
    if not text:
        return ROUND_KINDS if device.type == "cuda" else ()
    names = tuple(e.strip() for e in text.split(",") if e.strip())
    bad = [e for e in names if e not in ENGINES]
    if bad:
        raise ValueError(f"HEADSCOPE_TSNE_ENGINES: unknown engine {bad[0]!r}; use {', '.join(ENGINES)}")
    return tuple(e for e in names if e != "cpu")


def check_in_subprocess(device: torch.device, candidates: tuple[str, ...], *, fault: str | None,
                        timeout_s: float = 600.0) -> CheckReport:  # fmt: skip
    """``self_check`` in a child process, so a sticky device error there leaves this process'
    device usable; a child that dies or hangs fails every candidate with the reason."""
    import json
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "workers.analysis.engines", "--device", str(device),
           "--candidates", ",".join(candidates), "--fault", fault or ""]  # fmt: skip
    start = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
        if out.returncode == 0:
            return CheckReport(**json.loads(out.stdout.strip().splitlines()[-1]))
        tail = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
        reason = f"self-check process failed: {tail[:160]}"
    except subprocess.TimeoutExpired:
        reason = f"self-check process hung for {timeout_s:.0f} s"
    return CheckReport(str(device), [], dict.fromkeys(candidates, reason), time.perf_counter() - start)


def start_worker_engines(device: torch.device, *, engines: str | None, fault: str | None,
                         in_subprocess: bool = True) -> EngineState:  # fmt: skip
    """A worker's start: check the candidate engines on ``device``, install what passed (with the
    injected fault, if any), log one line naming what failed and why; returns the state."""
    injected = Fault.parse(fault)
    candidates = parse_candidates(engines, device)
    if candidates:
        if in_subprocess:
            report = check_in_subprocess(device, candidates, fault=fault)
        else:
            report = self_check(device, candidates, fault=injected)
        state = report.state(fault=injected)
        (logger.warning if report.failed else logger.info)("%s", report.line())
    else:
        state = EngineState(device, ["cpu"], fault=injected)
    install(state)
    return state


def device_report() -> dict[str, object]:
    """What this process computes on, for the worker's heartbeat and ``/api/health``: the models'
    device (``workers.devices.resolve_device``), its name and memory, and the fast t-SNE engine as it really is
    (``engines.describe``: ``triton``, ``torch: triton failed: no C compiler``, ...; what failed
    the start's self-check is in ``tsne_failed``)."""
    from workers.devices import resolve_device

    dev = resolve_device()
    state = current(dev)
    out: dict[str, object] = {"device": str(dev), "tsne_engine": describe(state),
                              "tsne_engines": chain_for(dev), "tsne_failed": dict(state.failed)}  # fmt: skip
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        out.update(name=props.name, memory_gb=round(props.total_memory / 2**30, 1),
                   capability=f"{props.major}.{props.minor}")  # fmt: skip
    else:
        out.update(name="cpu", threads=torch.get_num_threads())
    return out


def _main(argv: list[str] | None = None) -> int:
    """``python -m workers.analysis.engines --device D --candidates a,b --fault F``: one JSON line."""
    import argparse
    import json
    from dataclasses import asdict

    parser = argparse.ArgumentParser(prog="python -m workers.analysis.engines")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--candidates", default=",".join(ROUND_KINDS))
    parser.add_argument("--fault", default="")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    report = self_check(device, parse_candidates(args.candidates, device) or (), fault=Fault.parse(args.fault))
    print(json.dumps(asdict(report)))
    return 0


if __name__ == "__main__":  # run the imported module's copy: its state is the one the rounds consult
    from workers.analysis import engines as _engines

    raise SystemExit(_engines._main())
