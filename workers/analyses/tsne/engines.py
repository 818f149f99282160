"""Which fast t-SNE engine runs: checked before a worker serves, replaced per job when it fails
(docs/gpu.md, "What a GPU worker does").

- ``self_check(device, candidates)`` runs each device round on a small fixed problem (two heads of
  different lengths, fixed iteration counts) and keeps those whose positions are finite and whose
  KL is within 1.02x the CPU engine's; ``chain.install`` makes the result this process' chain.
- ``run_chain`` runs one t-SNE with the first engine of the chain; an error that leaves the device
  usable moves on to the next engine (the result records which ran and why); an error that leaves
  it unusable (an illegal address is sticky for the whole process) raises ``DeviceLost``.
- ``run_fast`` is the fast engine's entry; ``warm_up`` compiles what the first request needs.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

import numpy as np
import torch

from workers.analyses.tsne.affinities import head_affinities, kl_divergence
from workers.analyses.tsne.chain import (
    ENGINES,
    ROUND_KINDS,
    DeviceLost,
    EngineState,
    Fault,
    attempts,
    avoided_notes,
    chain_for,
    checking,
    current,
    describe,
    device_path,
    install,
    is_fatal,
    why,
)
from workers.analyses.tsne.gpu_engine import (
    embed_device,
    entropy_device,
    head_affinities_device,
    optimize_device,
    pad,
    ran_as,
    warm_up_kernels,
)
from workers.analyses.tsne.host_engine import fast_optimize, run_fast_host
from workers.analyses.tsne.initialization import random_init
from workers.analyses.tsne.options import (
    FastSchedule,
    TSNEOptions,
    TSNEResult,
    numba_available,
)
from workers.core.errors import HeadscopeError
from workers.core.progress import Progress, no_progress
from workers.models.devices import resolve_device

logger = logging.getLogger(__name__)


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

    device = p.device
    notes = avoided_notes()
    for engine in attempts(device):
        if engine == "cpu":
            emb, kls = _cpu(p, options=options, x=x, progress=progress)
            return emb, kls, {"backend": "cpu", "fallback": notes}
        try:
            emb_t, kls_t = embed_device(p, options=options, kind=engine, x=x, progress=progress)
            ran = ran_as(engine, p.shape[0], p.shape[-1], device)
            emb, kls = (
                emb_t.cpu().numpy(),
                kls_t.cpu().numpy(),
            )  # a device error surfaces here at the latest
            if not (np.isfinite(emb).all() and np.isfinite(kls).all()):
                raise FloatingPointError("non-finite positions")
            return emb, kls, {"backend": ran, "fallback": notes}
        except HeadscopeError:
            raise
        except Exception as exc:
            if is_fatal(exc, device):
                state = current(device)
                state.lost = state.lost or f"{engine}: {why(exc)}"
                logger.error(
                    "t-SNE on %s left %s unusable (%s): this worker must be replaced",
                    engine,
                    device,
                    why(exc),
                )
                raise DeviceLost(engine, why(exc)) from exc
            logger.warning(
                "t-SNE on %s failed (%s): running it with the next engine",
                engine,
                why(exc),
                exc_info=True,
            )
            notes.append(f"{engine} failed: {why(exc)}")
    raise AssertionError("the chain always ends with cpu")  # pragma: no cover


def _cpu(p: torch.Tensor, *, options: TSNEOptions, x: np.ndarray | None, progress: Progress | None):
    from workers.analyses.tsne.host_engine import run_fast_host
    from workers.core.progress import no_progress

    host = p.detach().to("cpu", torch.float64).numpy()
    return run_fast_host(
        host, options=replace(options, device="cpu"), x=x, progress=progress or no_progress
    )


@dataclass
class CheckReport:
    """The self-check of one device: engines that passed, engines that failed and why."""

    device: str
    passed: list[str]
    failed: dict[str, str]
    seconds: float
    lost: str | None = None

    def state(self, *, fault: Fault | None = None) -> EngineState:
        return EngineState(
            torch.device(self.device), [*self.passed, "cpu"], dict(self.failed), fault, self.lost
        )

    def line(self) -> str:
        """The one log line of a worker's start."""
        return f"t-SNE engine on {self.device}: {describe(self.state())} (self-check {self.seconds:.1f} s)"


def check_problem() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fixed problem: two attention-like heads of 20 and 13 points padded into one batch:
    (P [2, 20, 20] float64, lengths [2], starts [2, 20, 2] float64)."""

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
    from workers.analyses.tsne.options import TSNEOptions

    device = torch.device(device)
    start = time.perf_counter()
    p, lengths, y0 = check_problem()
    schedule = FastSchedule(
        check_every=20, window=20, tol=-1.0, min_early=0, min_main=0, settle_iter=20
    )
    ref = []
    for b, n in enumerate(lengths.tolist()):
        pb, yb = p[b : b + 1, :n, :n].numpy(), y0[b : b + 1, :n].numpy()
        got, _ = fast_optimize(
            pb, yb, options=TSNEOptions(device="cpu", **CHECK_OPTIONS), schedule=schedule
        )
        ref.append(float(kl_divergence(pb, got)[0]))
    passed: list[str] = []
    failed: dict[str, str] = {}
    lost_why: str | None = None
    probe = EngineState(device, [*candidates, "cpu"], fault=fault)
    with checking(probe):
        for kind in candidates:
            if lost_why:
                failed[kind] = "not checked: the device was lost"
                continue
            if kind.startswith("triton"):
                from workers.analyses.tsne.options import triton_available

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
            kls = [
                float(kl_divergence(p[b, :n, :n].numpy(), emb[b, :n]))
                for b, n in enumerate(lengths.tolist())
            ]
            if not np.isfinite(emb).all():
                failed[kind] = "non-finite positions"
            elif any(k > 1.02 * r + 1e-9 for k, r in zip(kls, ref, strict=True)):
                failed[kind] = (
                    f"KL {max(kls):.4g} against the CPU engine's {max(ref):.4g} (over 1.02x)"
                )
            else:
                passed.append(kind)
    return CheckReport(str(device), passed, failed, time.perf_counter() - start, lost_why)


def parse_candidates(text: str | None, device: torch.device) -> tuple[str, ...]:
    """HEADSCOPE_TSNE_ENGINES as round kinds (``cpu`` dropped: always last); unset: every round
    kind on CUDA, none on CPU."""
    if not text:
        return ROUND_KINDS if device.type == "cuda" else ()
    names = tuple(e.strip() for e in text.split(",") if e.strip())
    bad = [e for e in names if e not in ENGINES]
    if bad:
        raise ValueError(
            f"HEADSCOPE_TSNE_ENGINES: unknown engine {bad[0]!r}; use {', '.join(ENGINES)}"
        )
    return tuple(e for e in names if e != "cpu")


def check_in_subprocess(device: torch.device, candidates: tuple[str, ...], *, fault: str | None,
                        timeout_s: float = 600.0) -> CheckReport:  # fmt: skip
    """``self_check`` in a child process, so a sticky device error there leaves this process'
    device usable; a child that dies or hangs fails every candidate with the reason."""
    import json
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "workers.analyses.tsne.engines", "--device", str(device),
           "--candidates", ",".join(candidates), "--fault", fault or ""]  # fmt: skip
    start = time.perf_counter()
    try:
        out = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL
        )
        if out.returncode == 0:
            return CheckReport(**json.loads(out.stdout.strip().splitlines()[-1]))
        tail = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
        reason = f"self-check process failed: {tail[:160]}"
    except subprocess.TimeoutExpired:
        reason = f"self-check process hung for {timeout_s:.0f} s"
    return CheckReport(
        str(device), [], dict.fromkeys(candidates, reason), time.perf_counter() - start
    )


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
    device (``workers.models.devices.resolve_device``), its name and memory, and the fast t-SNE engine as it really is
    (``engines.describe``: ``triton``, ``torch: triton failed: no C compiler``, ...; what failed
    the start's self-check is in ``tsne_failed``)."""
    from workers.models.devices import resolve_device

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
    """``python -m workers.analyses.tsne.engines --device D --candidates a,b --fault F``: one JSON line."""
    import argparse
    import json
    from dataclasses import asdict

    parser = argparse.ArgumentParser(prog="python -m workers.analyses.tsne.engines")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--candidates", default=",".join(ROUND_KINDS))
    parser.add_argument("--fault", default="")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    report = self_check(
        device, parse_candidates(args.candidates, device) or (), fault=Fault.parse(args.fault)
    )
    print(json.dumps(asdict(report)))
    return 0


def run_fast(
    p: np.ndarray, *, options: TSNEOptions, x: np.ndarray | None, progress: Progress
) -> tuple[np.ndarray, np.ndarray, dict[str, object]]:
    """The engine entry ``embed_affinities`` calls: ([restart, B, n, 2], [restart, B] exact KL,
    {"backend": the engine that ran, "fallback": why others did not}).

    Where the process' chain starts with a device round (``engines``: a CUDA worker, or one told to
    by HEADSCOPE_TSNE_ENGINES), P goes up once and the chain runs there, falling back engine by
    engine; else the numba engine runs here."""
    device = resolve_device(options.device)
    if device_path(device):
        return run_chain(torch.as_tensor(p, device=device), options=options, x=x, progress=progress)
    emb, kls = run_fast_host(p, options=replace(options, device="cpu"), x=x, progress=progress)
    return emb, kls, {"backend": "cpu", "fallback": avoided_notes()}


def warm_up() -> float:
    """Compile (or load from numba's on-disk cache) the CPU kernels, and on a CUDA worker the
    Triton layouts its chain uses (``device.warm_up_kernels``); seconds taken.

    A worker calls this at start so the first request does not pay for compilation.
    """
    start = time.perf_counter()
    rng = np.random.default_rng(0)
    a = rng.random((2, 16, 16))
    p = a + a.transpose(0, 2, 1)
    p[:, np.arange(16), np.arange(16)] = 0.0
    p /= p.sum(axis=(1, 2), keepdims=True)
    options = TSNEOptions(n_iter=2, early_exaggeration_iter=2, device="cpu")
    if numba_available():
        run_fast_host(p, options=options, x=None, progress=no_progress)
    device = resolve_device(None)
    if device.type == "cuda":
        chain = chain_for(device)
        layouts = tuple(e.partition("-")[2] for e in chain if e.startswith("triton-"))
        try:
            run_fast(p, options=replace(options, device=str(device)), x=None, progress=no_progress)
            warm_up_kernels(device, layouts=layouts)
        except DeviceLost:
            raise
        except Exception:  # a size the self-check did not cover: the job's chain will fall back
            logger.warning("warming up the Triton kernels failed", exc_info=True)
    return time.perf_counter() - start


def embed_layer_on_device(
    a: torch.Tensor,
    *,
    keep: np.ndarray | None,
    options: TSNEOptions,
    progress: Progress | None = None,
) -> TSNEResult:
    """``tsne.embed_layer`` for one layer's maps already on the device, ``a`` [head, n, n]: P is built
    there and only the embeddings and KLs ([head, m, 2], [head]) come back to the host. The engine
    is the process' chain (``engines.run_chain``: a failing engine gives way to the next); which
    one ran is in ``extra["backend"]``."""
    import time

    from workers.analyses.tsne.options import TSNEResult
    from workers.core.errors import HeadscopeError

    start = time.perf_counter()
    if a.shape[-1] < 3:
        raise HeadscopeError(f"t-SNE needs at least 3 points, got {a.shape[-1]}")
    keep_t = (
        None if keep is None else torch.as_tensor(np.asarray(keep, dtype=bool), device=a.device)
    )
    p = head_affinities_device(a, keep_t)
    emb, kls, ran = run_chain(p, options=options.validate(), progress=progress)
    best = kls.argmin(axis=0)
    heads = np.arange(kls.shape[1])
    return TSNEResult(emb[best, heads], kls[best, heads], kls.T.copy(), time.perf_counter() - start, options.engine,
                      extra={"device": str(a.device), **ran})  # fmt: skip


if __name__ == "__main__":  # the engine state lives in ``chain``: one copy, whichever module runs
    raise SystemExit(_main())
