"""Triton kernels of the fast t-SNE engine's device path (docs/tsne.md, "On a GPU").

Exact-force gradient descent with openTSNE's update rule (as ``cpu_kernels._steps``; the gradient
omits the factor 4), in two layouts that share their tile code:

- **fused**: one launch per round. One program per head runs that head's ``steps`` iterations and
  then estimates its KL without leaving the kernel; inside an iteration three passes (forces and
  Z from the old positions; the update of every point; the re-centring) are separated by block
  barriers. Few launches; one SM per head.
- **wide**: a head's rows are split over ``ceil(n / BI)`` programs, so a few heads (one head on
  demand) still fill the GPU: per iteration one launch of the forces (partial Z per row block)
  and one of the update (one program per head); per round one launch of the KL's partial sums.
  More launches (a CUDA graph replays them), many more SMs busy.

Either way the per-iteration tensors of a head are never materialised as ``[n, n]``: forces are
summed over ``BI x BJ`` tiles of pairs in registers. Positions, updates and gains live axis-major
(``[head, 2, N]``, L2-resident); heads of different lengths share launches (``lengths``; P is
zero-padded to ``N``); the per-head ``steps``, exaggeration, momentum and learning rate are read
from device tensors the schedule writes, so a round needs no host value and can be captured in a
CUDA graph.

Importing this module needs Triton. With ``TRITON_INTERPRET=1`` in the environment before Triton
is first imported, the same kernels run through Triton's interpreter on CPU tensors: the tests do
that on machines without a GPU (``tests/conftest.py``); ``compile_for`` compiles them for a GPU
that is not there (sm_90), as a test too.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# ---------------------------------------------------------------------------- shared tile code


@triton.jit
def _rows(yb, i0, n, N, BI: tl.constexpr):  # pragma: no cover - compiled
    """Indices, mask and positions of rows ``i0 .. i0 + BI`` of a head."""
    ri = i0 + tl.arange(0, BI)
    mi = ri < n
    return ri, mi, tl.load(yb + ri, mask=mi, other=0.0), tl.load(yb + N + ri, mask=mi, other=0.0)


@triton.jit
def _tile(pb, yb, ri, mi, yi0, yi1, j0, n, N, BJ: tl.constexpr):  # pragma: no cover - compiled
    """One tile of pairs: differences, ``1 + d2``, the pair mask (no padding, no diagonal) and P."""
    rj = j0 + tl.arange(0, BJ)
    mj = rj < n
    dx = yi0[:, None] - tl.load(yb + rj, mask=mj, other=0.0)[None, :]
    dy = yi1[:, None] - tl.load(yb + N + rj, mask=mj, other=0.0)[None, :]
    pair = mi[:, None] & mj[None, :] & (ri[:, None] != rj[None, :])
    pij = tl.load(pb + ri[:, None].to(tl.int64) * N + rj[None, :], mask=pair, other=0.0)
    return dx, dy, 1.0 + dx * dx + dy * dy, pair, pij


@triton.jit
def _row_forces(
    pb, yb, i0, n, N, BI: tl.constexpr, BJ: tl.constexpr
):  # pragma: no cover - compiled
    """Attraction, unnormalised repulsion and row sums of w for rows ``i0 .. i0 + BI`` of a head."""
    ri, mi, yi0, yi1 = _rows(yb, i0, n, N, BI)
    ax = tl.zeros([BI], dtype=tl.float32)
    ay = tl.zeros([BI], dtype=tl.float32)
    rx = tl.zeros([BI], dtype=tl.float32)
    ry = tl.zeros([BI], dtype=tl.float32)
    zi = tl.zeros([BI], dtype=tl.float32)
    for j0 in range(0, n, BJ):
        dx, dy, d, pair, pij = _tile(pb, yb, ri, mi, yi0, yi1, j0, n, N, BJ)
        w = tl.where(pair, 1.0 / d, 0.0)
        pw = pij * w
        ax += tl.sum(pw * dx, axis=1)
        ay += tl.sum(pw * dy, axis=1)
        w2 = w * w
        rx += tl.sum(w2 * dx, axis=1)
        ry += tl.sum(w2 * dy, axis=1)
        zi += tl.sum(w, axis=1)
    return ri, mi, ax, ay, rx, ry, zi


@triton.jit
def _row_kl(pb, yb, i0, n, N, BI: tl.constexpr, BJ: tl.constexpr):  # pragma: no cover - compiled
    """Row sums of ``p log(1 + d2)`` and of w (float32 terms) for rows ``i0 .. i0 + BI``."""
    ri, mi, yi0, yi1 = _rows(yb, i0, n, N, BI)
    zi = tl.zeros([BI], dtype=tl.float32)
    si = tl.zeros([BI], dtype=tl.float32)
    for j0 in range(0, n, BJ):
        _, _, d, pair, pij = _tile(pb, yb, ri, mi, yi0, yi1, j0, n, N, BJ)
        zi += tl.sum(tl.where(pair, 1.0 / d, 0.0), axis=1)
        si += tl.sum(pij * tl.log(d), axis=1)
    return si, zi


@triton.jit
def _sign(x):  # pragma: no cover - compiled
    return (x > 0).to(tl.int32) - (x < 0).to(tl.int32)


@triton.jit
def _move(
    yb, ub, gb, fb, n, N, iz, ex, mom, lr, max_step, BI: tl.constexpr
):  # pragma: no cover - compiled
    """The update of every point of a head from its forces in ``fb``, then the re-centring.

    A block of ``BI`` points is held by more threads than it has points (replicas). Each block is
    read in full before a barrier and written after it, so a replica never reads a value its owner
    has already overwritten: every thread computes the same values, and the centre (a reduction
    over the block) is the same on every run (bit-reproducible)."""
    m0 = tl.zeros([BI], dtype=tl.float32)
    m1 = tl.zeros([BI], dtype=tl.float32)
    for i0 in range(0, n, BI):
        ri = i0 + tl.arange(0, BI)
        mi = ri < n
        gc0 = (
            ex * tl.load(fb + ri, mask=mi, other=0.0)
            - tl.load(fb + 2 * N + ri, mask=mi, other=0.0) * iz
        )
        gc1 = (
            ex * tl.load(fb + N + ri, mask=mi, other=0.0)
            - tl.load(fb + 3 * N + ri, mask=mi, other=0.0) * iz
        )
        u0 = tl.load(ub + ri, mask=mi, other=0.0)
        u1 = tl.load(ub + N + ri, mask=mi, other=0.0)
        g0 = tl.load(gb + ri, mask=mi, other=1.0)
        g1 = tl.load(gb + N + ri, mask=mi, other=1.0)
        y0 = tl.load(yb + ri, mask=mi, other=0.0)
        y1 = tl.load(yb + N + ri, mask=mi, other=0.0)
        tl.debug_barrier()  # every replica has read the block before anyone writes it
        g0 = tl.where(_sign(u0) != _sign(gc0), g0 + 0.2, g0 * 0.8 + 0.01)  # delta-bar-delta gains
        g1 = tl.where(_sign(u1) != _sign(gc1), g1 + 0.2, g1 * 0.8 + 0.01)
        u0 = mom * u0 - lr * g0 * gc0
        u1 = mom * u1 - lr * g1 * gc1
        norm = tl.sqrt(u0 * u0 + u1 * u1)
        scale = tl.where(norm > max_step, max_step / tl.maximum(norm, 1e-30), 1.0)
        u0 = u0 * scale
        u1 = u1 * scale
        y0 = y0 + u0
        y1 = y1 + u1
        tl.store(ub + ri, u0, mask=mi)
        tl.store(ub + N + ri, u1, mask=mi)
        tl.store(gb + ri, g0, mask=mi)
        tl.store(gb + N + ri, g1, mask=mi)
        tl.store(yb + ri, y0, mask=mi)
        tl.store(yb + N + ri, y1, mask=mi)
        m0 += tl.where(mi, y0, 0.0)
        m1 += tl.where(mi, y1, 0.0)
    c0 = tl.sum(m0, axis=0) / n
    c1 = tl.sum(m1, axis=0) / n
    tl.debug_barrier()
    for i0 in range(0, n, BI):
        ri = i0 + tl.arange(0, BI)
        mi = ri < n
        y0 = tl.load(yb + ri, mask=mi, other=0.0)
        y1 = tl.load(yb + N + ri, mask=mi, other=0.0)
        tl.debug_barrier()  # as above: read the block in full, then write it
        tl.store(yb + ri, y0 - c0, mask=mi)
        tl.store(yb + N + ri, y1 - c1, mask=mi)
    tl.debug_barrier()


# ---------------------------------------------------------------------------- fused: a program per head


@triton.jit
def _fused_round(
    P, Y, U, G, BUF, LEN, STEPS, EX, MOM, LR, ENT, KL, max_step, N,
    BI: tl.constexpr, BJ: tl.constexpr,
):  # fmt: skip  # pragma: no cover - compiled
    """Advance head ``program_id`` by ``STEPS[b]`` iterations, then write ``KL[b]`` (float64).

    P [B, N, N] float32; Y, U, G [B, 2, N] float32 (changed in place); BUF [B, 4, N] float32
    scratch; LEN, STEPS [B] int32; EX, MOM, LR [B] float32; ENT [B] float64 (sum p log p);
    KL [B] float64 (written only when STEPS[b] > 0).
    """
    b = tl.program_id(0).to(tl.int64)
    n = tl.load(LEN + b)
    steps = tl.load(STEPS + b)
    ex = tl.load(EX + b)
    mom = tl.load(MOM + b)
    lr = tl.load(LR + b)
    pb = P + b * N * N
    yb = Y + b * 2 * N
    fb = BUF + b * 4 * N
    for _ in range(steps):
        zacc = tl.zeros([BI], dtype=tl.float64)
        for i0 in range(0, n, BI):
            ri, mi, ax, ay, rx, ry, zi = _row_forces(pb, yb, i0, n, N, BI, BJ)
            tl.store(fb + ri, ax, mask=mi)
            tl.store(fb + N + ri, ay, mask=mi)
            tl.store(fb + 2 * N + ri, rx, mask=mi)
            tl.store(fb + 3 * N + ri, ry, mask=mi)
            zacc += zi.to(tl.float64)
        iz = (1.0 / tl.maximum(tl.sum(zacc, axis=0), 1e-30)).to(tl.float32)
        tl.debug_barrier()
        _move(yb, U + b * 2 * N, G + b * 2 * N, fb, n, N, iz, ex, mom, lr, max_step, BI)
    if steps > 0:  # KL(P || Q) = sum p log p + sum p log(1 + d2) + log Z, float64 sums
        zacc = tl.zeros([BI], dtype=tl.float64)
        sacc = tl.zeros([BI], dtype=tl.float64)
        for i0 in range(0, n, BI):
            si, zi = _row_kl(pb, yb, i0, n, N, BI, BJ)
            zacc += zi.to(tl.float64)
            sacc += si.to(tl.float64)
        z = tl.maximum(tl.sum(zacc, axis=0), 1e-30)
        tl.store(KL + b, tl.load(ENT + b) + tl.sum(sacc, axis=0) + tl.log(z))


# ---------------------------------------------------------------------------- wide: row blocks


@triton.jit(do_not_specialize=["it"])
def _wide_forces(
    P, Y, BUF, ZPART, LEN, STEPS, it, N, NB, BI: tl.constexpr, BJ: tl.constexpr
):  # pragma: no cover
    """Iteration ``it``: forces of row block ``program_id(1)`` of head ``program_id(0)`` into BUF,
    its partial Z into ZPART [B, NB] (float64); heads past their steps do nothing."""
    b = tl.program_id(0).to(tl.int64)
    i0 = tl.program_id(1) * BI
    n = tl.load(LEN + b)
    if (it < tl.load(STEPS + b)) & (i0 < n):
        fb = BUF + b * 4 * N
        ri, mi, ax, ay, rx, ry, zi = _row_forces(P + b * N * N, Y + b * 2 * N, i0, n, N, BI, BJ)
        tl.store(fb + ri, ax, mask=mi)
        tl.store(fb + N + ri, ay, mask=mi)
        tl.store(fb + 2 * N + ri, rx, mask=mi)
        tl.store(fb + 3 * N + ri, ry, mask=mi)
        tl.store(ZPART + b * NB + tl.program_id(1), tl.sum(zi.to(tl.float64), axis=0))


@triton.jit(do_not_specialize=["it"])
def _wide_move(Y, U, G, BUF, ZPART, LEN, STEPS, EX, MOM, LR, it, max_step, N, NB,
               BI: tl.constexpr, RB: tl.constexpr, NBP: tl.constexpr):  # fmt: skip  # pragma: no cover
    """Iteration ``it``: the update and re-centring of head ``program_id(0)`` (one program per head,
    ``BI`` points at a time); Z is the sum of the force programs' partials (``RB`` rows each)."""
    b = tl.program_id(0).to(tl.int64)
    n = tl.load(LEN + b)
    if it < tl.load(STEPS + b):
        rb = tl.arange(0, NBP)
        parts = tl.load(ZPART + b * NB + rb, mask=rb * RB < n, other=0.0)
        iz = (1.0 / tl.maximum(tl.sum(parts, axis=0), 1e-30)).to(tl.float32)
        _move(Y + b * 2 * N, U + b * 2 * N, G + b * 2 * N, BUF + b * 4 * N, n, N, iz,
              tl.load(EX + b), tl.load(MOM + b), tl.load(LR + b), max_step, BI)  # fmt: skip


@triton.jit
def _wide_kl(
    P, Y, SPART, ZPART, LEN, STEPS, N, NB, BI: tl.constexpr, BJ: tl.constexpr
):  # pragma: no cover
    """Partial sums of the KL estimate of row block ``program_id(1)`` into SPART, ZPART [B, NB]."""
    b = tl.program_id(0).to(tl.int64)
    i0 = tl.program_id(1) * BI
    n = tl.load(LEN + b)
    if (tl.load(STEPS + b) > 0) & (i0 < n):
        si, zi = _row_kl(P + b * N * N, Y + b * 2 * N, i0, n, N, BI, BJ)
        tl.store(SPART + b * NB + tl.program_id(1), tl.sum(si.to(tl.float64), axis=0))
        tl.store(ZPART + b * NB + tl.program_id(1), tl.sum(zi.to(tl.float64), axis=0))


# ---------------------------------------------------------------------------- launching


def interpreted() -> bool:
    """True when Triton runs kernels by its interpreter (``TRITON_INTERPRET=1`` set before Triton
    was first imported): the only way to run these kernels on CPU tensors."""
    return bool(triton.knobs.runtime.interpret)


def blocks(n_max: int) -> int:
    """Tile edge of the fused layout for heads of up to ``n_max`` points: a power of two in [16, 64]."""
    return max(16, min(64, triton.next_power_of_2(max(1, n_max))))


def warps(block: int) -> int:
    return 4 if block <= 32 else 8


WIDE_BI, WIDE_BJ = 16, 128  # wide layout: 16 rows per program, 128-column tiles


def layout(batch: int, n_max: int, device: torch.device) -> str:
    """``HEADSCOPE_TSNE_LAYOUT`` (fused / wide) if set, else wide unless there are at least two
    heads per SM for the fused layout to fill the GPU. (A first choice, to be settled by
    ``tests/bench/bench_gpu.py --layouts both`` on the GPU.)"""
    from workers.core.settings import get_settings

    wanted = get_settings().tsne_layout  # validated by the settings (fused / wide / auto)
    if wanted != "auto":
        return wanted
    sms = (
        torch.cuda.get_device_properties(device).multi_processor_count
        if device.type == "cuda"
        else 132
    )
    return "fused" if batch >= 2 * sms else "wide"


def _check(state) -> None:
    if state.device.type != "cuda" and not interpreted():
        raise RuntimeError(
            "the triton t-SNE backend runs on CUDA devices; on CPU it needs TRITON_INTERPRET=1 in the "
            "environment before start (Triton's interpreter, for tests), or use the numba or torch backend"
        )


def launch(state, steps: torch.Tensor, ex: torch.Tensor, mom: torch.Tensor, lr: torch.Tensor,
           max_step: float, *, check_every: int, which: str | None = None) -> None:  # fmt: skip
    """One round for every head of ``state`` (a ``device.DeviceState``): up to ``check_every``
    iterations (each head its own ``steps``), then ``state.kl`` of every stepped head."""
    _check(state)
    which = which or layout(state.batch, state.n_max, state.device)
    if state.device.type == "cuda":  # Triton launches on the current device: make it the tensors'
        with torch.cuda.device(state.device):
            _launch(state, steps, ex, mom, lr, max_step, check_every=check_every, which=which)
    else:
        _launch(state, steps, ex, mom, lr, max_step, check_every=check_every, which=which)


def _launch(state, steps, ex, mom, lr, max_step, *, check_every: int, which: str) -> None:
    if which == "fused":
        bs = blocks(state.n_max)
        _fused_round[(state.batch,)](
            state.p, state.y, state.u, state.g, state.buf, state.lengths, steps, ex, mom, lr,
            state.entropy, state.kl, float(max_step), state.n_max, BI=bs, BJ=bs, num_warps=warps(bs),
        )  # fmt: skip
        return
    nb = triton.cdiv(state.n_max, WIDE_BI)
    bj = min(WIDE_BJ, max(16, triton.next_power_of_2(state.n_max)))
    zpart = torch.zeros(state.batch, nb, dtype=torch.float64, device=state.device)
    grid = (state.batch, nb)
    for it in range(check_every):
        _wide_forces[grid](state.p, state.y, state.buf, zpart, state.lengths, steps, it, state.n_max, nb,
                           BI=WIDE_BI, BJ=bj, num_warps=4)  # fmt: skip
        _wide_move[(state.batch,)](state.y, state.u, state.g, state.buf, zpart, state.lengths, steps, ex, mom, lr,
                                   it, float(max_step), state.n_max, nb, BI=64, RB=WIDE_BI, NBP=triton.next_power_of_2(nb),
                                   num_warps=4)  # fmt: skip
    spart = torch.zeros_like(zpart)
    zpart.zero_()
    _wide_kl[grid](state.p, state.y, spart, zpart, state.lengths, steps, state.n_max, nb,
                   BI=WIDE_BI, BJ=bj, num_warps=4)  # fmt: skip
    kl = state.entropy + spart.sum(1) + torch.log(zpart.sum(1).clamp_min(1e-30))
    state.kl.copy_(torch.where(steps > 0, kl, state.kl))


SIGNATURE = {
    "P": "*fp32", "Y": "*fp32", "U": "*fp32", "G": "*fp32", "BUF": "*fp32", "LEN": "*i32", "STEPS": "*i32",
    "EX": "*fp32", "MOM": "*fp32", "LR": "*fp32", "ENT": "*fp64", "KL": "*fp64", "max_step": "fp32", "N": "i32",
    "BI": "constexpr", "BJ": "constexpr",
}  # fmt: skip
WIDE_SIGNATURES = {
    "forces": {"P": "*fp32", "Y": "*fp32", "BUF": "*fp32", "ZPART": "*fp64", "LEN": "*i32", "STEPS": "*i32",
               "it": "i32", "N": "i32", "NB": "i32", "BI": "constexpr", "BJ": "constexpr"},
    "move": {"Y": "*fp32", "U": "*fp32", "G": "*fp32", "BUF": "*fp32", "ZPART": "*fp64", "LEN": "*i32",
             "STEPS": "*i32", "EX": "*fp32", "MOM": "*fp32", "LR": "*fp32", "it": "i32", "max_step": "fp32",
             "N": "i32", "NB": "i32", "BI": "constexpr", "RB": "constexpr", "NBP": "constexpr"},
    "kl": {"P": "*fp32", "Y": "*fp32", "SPART": "*fp64", "ZPART": "*fp64", "LEN": "*i32", "STEPS": "*i32",
           "N": "i32", "NB": "i32", "BI": "constexpr", "BJ": "constexpr"},
}  # fmt: skip


def compile_for(capability: int = 90, block: int = 64) -> dict[str, object]:
    """Compile every kernel ahead of time for a CUDA compute capability (90: H100) without a GPU:
    Triton's compiler and its bundled ptxas are enough. Returns name -> compiled kernel (``.asm``)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget("cuda", capability, 32)

    def build(fn, signature, constexprs, num_warps):
        return triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs), target=target,
                              options={"num_warps": num_warps})  # fmt: skip

    return {
        "fused": build(_fused_round, SIGNATURE, {"BI": block, "BJ": block}, warps(block)),
        "wide_forces": build(
            _wide_forces, WIDE_SIGNATURES["forces"], {"BI": WIDE_BI, "BJ": WIDE_BJ}, 4
        ),
        "wide_move": build(
            _wide_move, WIDE_SIGNATURES["move"], {"BI": 64, "RB": WIDE_BI, "NBP": 128}, 4
        ),
        "wide_kl": build(_wide_kl, WIDE_SIGNATURES["kl"], {"BI": WIDE_BI, "BJ": WIDE_BJ}, 4),
    }
