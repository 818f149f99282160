"""The fast t-SNE engine with its schedule on the device: the GPU path (docs/tsne.md, "On a GPU").

``fast`` runs the adaptive schedule on the host: every ``check_every`` iterations it reads each
head's KL back and decides. Here the same schedule (``schedule.PhasePlan``'s rules, as tensors) runs
on the torch device, so a round -- ``check_every`` iterations of every head, their KL estimates, the
phase bookkeeping and the best-so-far positions -- needs no host value:

- **one kernel per round**: ``gpu_kernels`` (Triton) gives each head one program that iterates
  in registers and L2, with per-head steps, exaggeration, momentum and learning rate read from
  device tensors; ``torch_round`` is the same round as batched torch ops (CPU, or CUDA without
  Triton);
- **CUDA graphs**: on CUDA, ``rounds_per_sync`` rounds are captured once and replayed; the host
  reads one flag (any head still moving?) per replay, which is also when progress is reported;
- **heads of different lengths share launches**: P is zero-padded to the longest head and each
  head carries its length (texts of different lengths in one batch).

Same start, same schedule and the same exact float64 KL of the returned embedding as the CPU
engine (``kl_masked`` is ``affinities.kl_divergence`` restricted to each head's length).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from workers.analyses.tsne.affinities import kl_divergence
from workers.analyses.tsne.chain import round_hook
from workers.analyses.tsne.initialization import initial_embedding
from workers.analyses.tsne.options import (
    KL_FLOOR,
    P_FLUSH,
    FastSchedule,
    TSNEOptions,
    triton_available,
)
from workers.analyses.tsne.schedule import phase_tols
from workers.core.errors import HeadscopeError
from workers.core.progress import Progress, no_progress

logger = logging.getLogger(__name__)


def graphs_enabled(device: torch.device) -> bool:
    """CUDA graphs on CUDA unless ``HEADSCOPE_CUDA_GRAPHS=0``."""
    from workers.core.settings import get_settings

    return device.type == "cuda" and get_settings().cuda_graphs


class DeviceState:
    """Every head's P, positions, updates, gains and KL as tensors on one device.

    p [B, N, N] float32 zero-padded; y, u, g [B, 2, N] float32 axis-major; lengths [B] int32.
    """

    def __init__(
        self, p: torch.Tensor, y0: torch.Tensor, lengths: torch.Tensor, entropy: torch.Tensor
    ):
        self.device = p.device
        self.batch, self.n_max = p.shape[0], p.shape[-1]
        self.p = (
            torch.where(p < P_FLUSH, 0.0, p).to(torch.float32).contiguous()
        )  # a copy: P is the caller's
        self.lengths = lengths.to(device=self.device, dtype=torch.int32).contiguous()
        self.y = y0.to(device=self.device, dtype=torch.float32).transpose(1, 2).contiguous()
        self.y *= self.valid[:, None, :]
        self.u = torch.zeros_like(self.y)
        self.g = torch.ones_like(self.y)
        self.buf = torch.zeros(self.batch, 4, self.n_max, dtype=torch.float32, device=self.device)
        self.entropy = entropy.to(device=self.device, dtype=torch.float64).contiguous()
        self.kl = torch.zeros(self.batch, dtype=torch.float64, device=self.device)

    @property
    def valid(self) -> torch.Tensor:
        """[B, N] bool: the points of each head."""
        return torch.arange(self.n_max, device=self.device)[None, :] < self.lengths[:, None]


def torch_round(state: DeviceState, steps: torch.Tensor, ex: torch.Tensor, mom: torch.Tensor,
                lr: torch.Tensor, max_step: float, *, check_every: int) -> None:  # fmt: skip
    """``gpu_kernels``' round as batched torch ops: ``check_every`` masked iterations of every head
    (a head stops moving after its own ``steps``), then every stepped head's KL into ``state.kl``.

    On CPU only the stepped heads are computed, in chunks of about 128 MiB of pairs.
    """
    heads = torch.arange(state.batch, device=state.device)
    loops = check_every
    if state.device.type == "cpu":  # host values are free here: skip finished heads
        heads = heads[steps > 0]
        loops = int(steps.max()) if len(heads) else 0
    n = state.n_max
    chunk = (
        max(1, (1 << 25) // (n * n)) if state.device.type == "cpu" else max(1, (1 << 28) // (n * n))
    )
    eye = torch.eye(n, dtype=torch.bool, device=state.device)
    for s in range(0, len(heads), chunk):
        idx = heads[s : s + chunk]
        valid = state.valid[idx]
        pair = (valid[:, :, None] & valid[:, None, :]) & ~eye
        p = state.p[idx]
        y, u, g = state.y[idx], state.u[idx], state.g[idx]  # [h, 2, N]
        st, e, m, r = (
            steps[idx][:, None, None],
            ex[idx][:, None, None],
            mom[idx][:, None, None],
            lr[idx][:, None, None],
        )
        count = valid.sum(-1, keepdim=True)[:, None, :].to(y.dtype)  # [h, 1, 1]
        for it in range(loops):
            w = _student(y, pair)
            z = w.sum(dim=(-2, -1), keepdim=True).clamp_min(1e-30)
            pq = (e * p - w / z) * w  # [h, N, N]
            grad = y * pq.sum(-1)[:, None, :] - (pq @ y.transpose(1, 2)).transpose(1, 2)
            flipped = torch.sign(u) != torch.sign(grad)
            g_new = torch.where(flipped, g + 0.2, g * 0.8 + 0.01)
            u_new = m * u - r * g_new * grad
            norm = u_new.norm(dim=1, keepdim=True)
            u_new = torch.where(norm > max_step, u_new * (max_step / norm.clamp_min(1e-30)), u_new)
            y_new = (y + u_new) * valid[:, None, :]
            y_new = (y_new - y_new.sum(-1, keepdim=True) / count) * valid[:, None, :]
            moving = (it < st) & valid[:, None, :]  # padded points never move
            y, u, g = (
                torch.where(moving, y_new, y),
                torch.where(moving, u_new, u),
                torch.where(moving, g_new, g),
            )
        state.y[idx], state.u[idx], state.g[idx] = y, u, g
        w = _student(y, pair)
        logd = -torch.log(torch.where(pair, w, 1.0))
        cross = (p * logd).sum(dim=(-2, -1), dtype=torch.float64)
        z = w.sum(dim=(-2, -1), dtype=torch.float64).clamp_min(1e-30)
        kl = state.entropy[idx] + cross + torch.log(z)
        state.kl[idx] = torch.where(steps[idx] > 0, kl, state.kl[idx])


def _student(y: torch.Tensor, pair: torch.Tensor) -> torch.Tensor:
    """``w_ij = 1 / (1 + |y_i - y_j|^2)`` of axis-major ``y`` [h, 2, N], zero off ``pair``."""
    dx = y[:, 0, :, None] - y[:, 0, None, :]
    dy = y[:, 1, :, None] - y[:, 1, None, :]
    return torch.where(pair, 1.0 / (1.0 + dx * dx + dy * dy), 0.0)


Round = Callable[..., None]

ROUNDS = ("triton", "triton-fused", "triton-wide", "torch")


def round_function(kind: str, device: torch.device) -> Round:
    """``triton`` (the kernel, its layout picked per batch; interpreted on CPU), ``triton-fused`` /
    ``triton-wide`` (one layout) or ``torch`` (batched ops). Each round first gives an injected
    fault its chance (``chain.round_hook``)."""

    if kind not in ROUNDS:
        raise ValueError(f"unknown device round {kind!r}; use one of {', '.join(ROUNDS)}")
    if kind.startswith("triton"):
        from workers.analyses.tsne import gpu_kernels

        which = kind.partition("-")[2] or None

        def run(state, steps, ex, mom, lr, max_step, *, check_every):
            round_hook(kind)
            gpu_kernels.launch(
                state, steps, ex, mom, lr, max_step, check_every=check_every, which=which
            )

        return run

    def run_torch(state, steps, ex, mom, lr, max_step, *, check_every):
        round_hook(kind)
        torch_round(state, steps, ex, mom, lr, max_step, check_every=check_every)

    return run_torch


def ran_as(kind: str, batch: int, n_max: int, device: torch.device) -> str:
    """The engine name a round ``kind`` runs as for this batch (``triton`` -> its layout)."""
    if kind != "triton":
        return kind
    from workers.analyses.tsne import gpu_kernels

    return f"triton-{gpu_kernels.layout(batch, n_max, device)}"


def on_device(device: torch.device):
    """``torch.cuda.device(device)`` on CUDA (Triton launches and graph capture use the current
    device: ``HEADSCOPE_DEVICE=cuda:1`` must run there), else nothing."""
    import contextlib

    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


@dataclass
class DevicePlan:
    """``schedule.PhasePlan`` as device tensors: the same phases, caps, minimums, stopping rule."""

    caps: tuple[int, int, int]
    cap: torch.Tensor  # [4] long: caps of phases 0-2, 0 for done
    low: torch.Tensor  # [4] long: minimum iterations of phases 0-2
    tols: torch.Tensor  # [4] float64: each phase's tolerance (-inf: never early)
    partial: bool  # as schedule.PhasePlan.partial
    params: torch.Tensor  # [B, 4, 3] float32: (exaggeration, momentum, lr) per head and phase
    phase: torch.Tensor  # [B] long
    in_phase: torch.Tensor  # [B] long
    history: torch.Tensor  # [B, lag] float64
    used: torch.Tensor  # [B] long
    best_kl: torch.Tensor  # [B] float64
    best_y: torch.Tensor  # [B, 2, N] float32
    check_every: int

    @classmethod
    def make(
        cls, state: DeviceState, *, options: TSNEOptions, schedule: FastSchedule
    ) -> DevicePlan:
        dev, batch = state.device, state.batch
        early = max(0, options.early_exaggeration_iter)
        settle = min(schedule.settle_iter, max(0, options.n_iter))
        main = max(0, options.n_iter) - settle
        ex = options.early_exaggeration
        n = state.lengths.to(torch.float32)
        auto = options.learning_rate is None
        lr_early = n / ex if auto else torch.full_like(n, float(options.learning_rate))
        lr_main = n if auto else torch.full_like(n, float(options.learning_rate))
        params = torch.zeros(batch, 4, 3, dtype=torch.float32, device=dev)
        params[:, 0, 0], params[:, 0, 1], params[:, 0, 2] = ex, options.initial_momentum, lr_early
        params[:, 1, 0], params[:, 1, 1], params[:, 1, 2] = 1.0, options.final_momentum, lr_main
        params[:, 2, 0], params[:, 2, 1], params[:, 2, 2] = (
            1.0,
            options.final_momentum,
            lr_main * schedule.settle_lr,
        )
        params[:, 3, 0] = 1.0
        lag = max(1, schedule.window // schedule.check_every)
        mins = (
            min(schedule.min_early, early),
            min(schedule.min_main, main),
            min(schedule.min_settle, settle),
        )
        plan = cls(
            caps=(early, main, settle),
            cap=torch.tensor([early, main, settle, 0], device=dev),
            low=torch.tensor([*mins, 0], device=dev),
            tols=torch.tensor([*phase_tols(schedule), -torch.inf], dtype=torch.float64, device=dev),
            params=params,
            phase=torch.zeros(batch, dtype=torch.long, device=dev),
            in_phase=torch.zeros(batch, dtype=torch.long, device=dev),
            history=torch.full((batch, lag), torch.inf, dtype=torch.float64, device=dev),
            used=torch.zeros(batch, dtype=torch.long, device=dev),
            best_kl=torch.full((batch,), torch.inf, dtype=torch.float64, device=dev),
            best_y=state.y.clone(),
            check_every=schedule.check_every,
            partial=schedule.partial_window,
        )
        plan.skip_empty()
        return plan

    def skip_empty(self) -> None:
        for ph in range(3):
            if self.caps[ph] == 0:
                self.phase.copy_(torch.where(self.phase == ph, ph + 1, self.phase))

    def steps(self) -> torch.Tensor:
        """[B] int32: iterations each head does this round (0 once done)."""
        left = self.cap[self.phase] - self.in_phase
        return torch.where(self.phase < 3, left.clamp_max(self.check_every), 0).to(torch.int32)

    def knobs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        row = self.params[torch.arange(self.phase.shape[0], device=self.phase.device), self.phase]
        return row[:, 0].contiguous(), row[:, 1].contiguous(), row[:, 2].contiguous()

    def advance(self, steps: torch.Tensor, kl: torch.Tensor, y: torch.Tensor) -> None:
        """Book a round's ``steps`` and KL estimates; end finished phases; keep the best positions.
        Every update is in place (the tensors are a CUDA graph's static buffers)."""
        stepped = steps > 0
        kl = torch.where(stepped, kl, torch.inf)
        better = kl < self.best_kl
        self.best_kl.copy_(torch.where(better, kl, self.best_kl))
        self.best_y.copy_(torch.where(better[:, None, None], y, self.best_y))
        self.in_phase.add_(steps.long())
        self.used.add_(steps.long())
        cap, low = self.cap[self.phase], self.low[self.phase]
        then, tol = self.history[:, 0], self.tols[self.phase]
        if self.partial:
            lag = self.history.shape[1]
            have = torch.isfinite(self.history).sum(dim=1)
            then = self.history.gather(1, ((lag - have).clamp_min(0) % lag)[:, None])[:, 0]
            tol = tol * have.clamp_min(1) / lag
        moved = (then - kl) / kl.abs().clamp_min(KL_FLOOR)
        still = (self.in_phase >= low) & (moved < tol)
        done = stepped & ((self.in_phase >= cap) | still)
        shifted = torch.cat([self.history[:, 1:], kl[:, None]], dim=1)
        self.history.copy_(torch.where(stepped[:, None], shifted, self.history))
        self.history.copy_(torch.where(done[:, None], torch.inf, self.history))
        self.phase.add_(done.long())
        self.in_phase.copy_(torch.where(done, 0, self.in_phase))
        self.skip_empty()

    def rounds_bound(self) -> int:
        """No head needs more rounds than this (each round advances an active head >= 1 step)."""
        return sum(-(-c // self.check_every) for c in self.caps) + 1


def optimize_device(
    p: torch.Tensor,
    y0: torch.Tensor,
    lengths: torch.Tensor,
    entropy: torch.Tensor,
    *,
    options: TSNEOptions,
    schedule: FastSchedule | None = None,
    kind: str = "triton",
    rounds_per_sync: int = 8,
    progress: Progress | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Optimise a batch of heads with the device-side schedule.

    Args:
        p: [B, N, N] P on the device (zero-padded past each head's length).
        y0: [B, N, 2] starts; lengths: [B] points per head; entropy: [B] float64 ``sum p log p``.
        kind: the round: ``triton`` or ``torch`` (``round_function``).
        rounds_per_sync: rounds between the host's reads of the done flag (one CUDA graph).

    Returns:
        ([B, N, 2] float64 best positions seen, on the device; [B] iterations used per head).
    """
    with on_device(p.device):
        return _optimize(p, y0, lengths, entropy, options=options, schedule=schedule, kind=kind,
                         rounds_per_sync=rounds_per_sync, progress=progress)  # fmt: skip


def _optimize(p, y0, lengths, entropy, *, options, schedule, kind, rounds_per_sync, progress):
    from workers.analyses.tsne.options import FastSchedule

    schedule = schedule or FastSchedule()
    progress = progress or no_progress
    state = DeviceState(p, y0, lengths, entropy)
    plan = DevicePlan.make(state, options=options, schedule=schedule)
    run = round_function(kind, state.device)
    max_step = schedule.max_step

    def one_round() -> None:
        steps = plan.steps()
        ex, mom, lr = plan.knobs()
        run(state, steps, ex, mom, lr, max_step, check_every=schedule.check_every)
        plan.advance(steps, state.kl, state.y)

    bound = plan.rounds_bound()
    total = max(1, sum(plan.caps))
    replay = _graphed(one_round, rounds_per_sync) if graphs_enabled(state.device) else None
    done_rounds = 0
    while done_rounds < bound:
        if replay is not None:
            replay()
        else:
            for _ in range(rounds_per_sync):
                one_round()
        done_rounds += rounds_per_sync
        active = int((plan.phase < 3).sum())  # the one host read per rounds_per_sync rounds
        progress(
            min(1.0, float(plan.used.double().mean()) / total),
            f"fast t-SNE: {active} of {state.batch} heads still moving",
        )
        if not active:
            break
    best = plan.best_y.transpose(1, 2).double()
    return best, plan.used


def _graphed(one_round: Callable[[], None], rounds: int) -> Callable[[], None]:
    """``rounds`` rounds as one CUDA graph. The first round runs eagerly (it compiles the kernel
    and warms the allocator: it is a real round, counted by the plan), then ``rounds`` are
    captured; each call replays them. Falls back to eager rounds if capture fails."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        one_round()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(rounds):
                one_round()
    except Exception:  # pragma: no cover - CUDA only
        logger.warning("CUDA graph capture failed; running rounds eagerly", exc_info=True)

        def eager() -> None:
            for _ in range(rounds):
                one_round()

        return eager
    return graph.replay


def head_affinities_device(
    attention: torch.Tensor, keep: torch.Tensor | None = None
) -> torch.Tensor:
    """``affinities.head_affinities`` on the attention's device, float64: [..., n, n] -> [..., m, m]."""

    a = attention.to(torch.float64)
    if keep is not None:
        idx = torch.as_tensor(keep, device=a.device).nonzero().flatten()
        if idx.numel() < 3:
            raise HeadscopeError("t-SNE needs at least 3 tokens after removing special tokens")
        a = a.index_select(-2, idx).index_select(-1, idx)
    p = a + a.transpose(-1, -2)
    p.diagonal(dim1=-2, dim2=-1).zero_()
    total = p.sum(dim=(-2, -1), keepdim=True)
    if bool((total <= 0).any()):  # one host read: the CPU path's check (else 0 / 0 = NaN P)
        raise HeadscopeError(
            "the attention matrix puts all its weight on the diagonal; P is undefined"
        )
    return p / total


def entropy_device(p: torch.Tensor) -> torch.Tensor:
    """``sum p log p`` per head in float64: [B, N, N] -> [B] (float32 P a head at a time, so no
    float64 copy of the whole batch exists)."""
    if p.dtype == torch.float64:
        return torch.special.xlogy(p, p).sum(dim=(-2, -1))
    return torch.stack([torch.special.xlogy(h.double(), h.double()).sum() for h in p])


def kl_masked(p: torch.Tensor, y: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``affinities.kl_divergence`` of each head over its own points (heads grouped by length):
    p [B, N, N], y [B, N, 2] -> [B] float64 on P's device."""

    out = torch.empty(p.shape[0], dtype=torch.float64, device=p.device)
    for n in torch.unique(lengths).tolist():
        heads = (lengths == n).nonzero().flatten()
        out[heads] = torch.as_tensor(kl_divergence(p[heads, :n, :n], y[heads, :n]), device=p.device)
    return out


def pad(ps: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Heads of different lengths into one zero-padded batch: ([B, N, N], lengths [B])."""
    n_max = max(int(q.shape[-1]) for q in ps)
    out = torch.zeros(len(ps), n_max, n_max, dtype=ps[0].dtype, device=ps[0].device)
    for b, q in enumerate(ps):
        out[b, : q.shape[-1], : q.shape[-1]] = q
    return out, torch.tensor([q.shape[-1] for q in ps], device=ps[0].device)


def starts(p: torch.Tensor, lengths: torch.Tensor, *, options: TSNEOptions, restart: int,
           x: np.ndarray | None = None) -> torch.Tensor:  # fmt: skip
    """Restart ``restart``'s start of every head [B, N, 2] float64 on P's device: the spectral start
    on the device for restart 0, else the CPU engine's start of each head's length (random, or the
    ``pca`` start of the data points ``x`` [N, d], which needs every head to have all N points)."""

    if restart == 0 and options.init == "spectral":
        from workers.analyses.tsne.initialization import device_spectral_init

        return device_spectral_init(p, seed=options.seed, lengths=lengths)
    out = torch.zeros(p.shape[0], p.shape[-1], 2, dtype=torch.float64, device=p.device)
    for n in torch.unique(lengths).tolist():
        heads = (lengths == n).nonzero().flatten()
        ref = np.zeros((len(heads), n, n))  # random/pca starts read only the shape of P
        y0 = initial_embedding(ref, init="random" if options.init == "spectral" else options.init,
                               seed=options.seed, restart=restart, x=x if n == p.shape[-1] else None)  # fmt: skip
        out[heads, :n] = torch.as_tensor(y0, device=p.device)
    return out


def embed_device(
    p: torch.Tensor,
    lengths: torch.Tensor | None = None,
    *,
    options: TSNEOptions,
    kind: str | None = None,
    x: np.ndarray | None = None,
    progress: Progress | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fast engine with P on the device: p [B, N, N] (zero-padded; ``lengths`` [B], default all N).

    ``x`` [N, d]: the data points, for ``init="pca"``. Returns (embeddings [restart, B, N, 2]
    float64, exact KL [restart, B] float64), on P's device; nothing of size N^2 leaves it.
    ``best_restart`` picks each head's best. No fallback here: ``engines.run_chain`` has it.

    Raises:
        HeadscopeError: a head with fewer than 3 points or an all-zero P (as the CPU path).
    """
    from workers.core.progress import scaled

    progress = progress or no_progress
    batch, n = p.shape[0], p.shape[-1]
    lengths = torch.full((batch,), n, device=p.device) if lengths is None else lengths.to(p.device)
    if batch and int(lengths.min()) < 3:
        raise HeadscopeError(f"t-SNE needs at least 3 points, got {int(lengths.min())}")
    if batch and bool((p.sum(dim=(-2, -1)) <= 0).any()):
        raise HeadscopeError(
            "P is all zero (the attention puts all its weight on the diagonal); P is undefined"
        )
    kind = kind or ("triton" if p.device.type == "cuda" and triton_available() else "torch")
    ent = entropy_device(p)
    emb = torch.zeros(options.restarts, batch, n, 2, dtype=torch.float64, device=p.device)
    kls = torch.zeros(options.restarts, batch, dtype=torch.float64, device=p.device)
    for r in range(options.restarts):
        y0 = starts(p, lengths, options=options, restart=r, x=x)
        emb[r], _ = optimize_device(p, y0, lengths, ent, options=options, kind=kind,
                                    progress=scaled(progress, r / options.restarts, (r + 1) / options.restarts))  # fmt: skip
        kls[r] = kl_masked(p, emb[r], lengths)
    return emb, kls


def best_restart(emb: torch.Tensor, kls: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each head's best restart: ([B, N, 2], [B])."""
    best = kls.argmin(dim=0)
    heads = torch.arange(kls.shape[1], device=kls.device)
    return emb[best, heads], kls[best, heads]


# n where a Triton specialisation changes: the fused tile (16 / 32 / 64), the wide layout's column
# tile and row-block count (powers of two), N's alignment to 16
WARM_SIZES = (15, 16, 17, 32, 33, 64, 65, 128, 129, 256, 257, 512, 513)


def warm_up_kernels(device: torch.device, *, layouts: tuple[str, ...] = ("fused", "wide"),
                    sizes: tuple[int, ...] = WARM_SIZES) -> int:  # fmt: skip
    """Compile the Triton layouts for ``device`` at every size in ``sizes`` (one 1-iteration round
    each), so no request of those sizes waits for a compile; returns the rounds run. Other sizes
    share these variants except for the wide layout past 513 points (compiled at first use)."""
    if device.type != "cuda" or not triton_available() or not layouts:
        return 0
    from workers.analyses.tsne import gpu_kernels

    done = 0
    with on_device(device):
        for n in sizes:
            p = torch.full((2, n, n), 1.0 / (n * (n - 1)), device=device)
            p.diagonal(dim1=-2, dim2=-1).zero_()
            y0 = (
                torch.randn(
                    2, n, 2, device=device, generator=torch.Generator(device=device).manual_seed(0)
                )
                * 1e-4
            )
            state = DeviceState(p, y0, torch.full((2,), n, device=device), entropy_device(p))
            one = torch.ones(2, dtype=torch.int32, device=device)
            knob = torch.ones(2, dtype=torch.float32, device=device)
            for which in layouts:
                gpu_kernels.launch(state, one, knob, knob, knob, 5.0, check_every=1, which=which)
                done += 1
        torch.cuda.synchronize(device)
    return done
