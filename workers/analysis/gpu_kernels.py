"""Triton kernel of the fast t-SNE engine's device path (issue 11): one launch per round.

One program per head runs that head's ``steps`` iterations of exact-force gradient descent
(openTSNE's update rule, as ``fast_kernels._steps``) and then estimates its KL, all without
leaving the kernel: the per-iteration tensors of a head are never materialised as ``[n, n]``;
forces are summed over ``BI x BJ`` tiles of pairs in registers. Positions, updates and gains
live axis-major in global memory (``[head, 2, N]``, L2-resident), heads of different lengths
share the launch (``lengths``; P is zero-padded to ``N``), and the per-head ``steps``,
exaggeration, momentum and learning rate are read from device tensors the schedule writes, so a
round needs no host value and can be captured in a CUDA graph.

Inside an iteration three passes are separated by block barriers: forces (and Z) for every
point from the old positions; the update of every point; the re-centring. The gradient omits
the factor 4, as openTSNE's does (see ``fast_kernels``).

Importing this module needs Triton. With ``TRITON_INTERPRET=1`` in the environment before Triton
is first imported, the same kernel runs through Triton's interpreter on CPU tensors: the tests do
that on machines without a GPU (``tests/conftest.py``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


def _round(
    P, Y, U, G, BUF, LEN, STEPS, EX, MOM, LR, ENT, KL,
    max_step, N,
    BI: tl.constexpr, BJ: tl.constexpr,
):  # fmt: skip  # pragma: no cover - compiled (or interpreted)
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
    ub = U + b * 2 * N
    gb = G + b * 2 * N
    fb = BUF + b * 4 * N
    for _ in range(steps):
        # pass 1: attraction and unnormalised repulsion of every point, and Z
        zacc = tl.zeros([BI], dtype=tl.float64)
        for i0 in range(0, n, BI):
            ri = i0 + tl.arange(0, BI)
            mi = ri < n
            yi0 = tl.load(yb + ri, mask=mi, other=0.0)
            yi1 = tl.load(yb + N + ri, mask=mi, other=0.0)
            ax = tl.zeros([BI], dtype=tl.float32)
            ay = tl.zeros([BI], dtype=tl.float32)
            rx = tl.zeros([BI], dtype=tl.float32)
            ry = tl.zeros([BI], dtype=tl.float32)
            zi = tl.zeros([BI], dtype=tl.float32)
            for j0 in range(0, n, BJ):
                rj = j0 + tl.arange(0, BJ)
                mj = rj < n
                yj0 = tl.load(yb + rj, mask=mj, other=0.0)
                yj1 = tl.load(yb + N + rj, mask=mj, other=0.0)
                dx = yi0[:, None] - yj0[None, :]
                dy = yi1[:, None] - yj1[None, :]
                pair = mi[:, None] & mj[None, :] & (ri[:, None] != rj[None, :])
                w = tl.where(pair, 1.0 / (1.0 + dx * dx + dy * dy), 0.0)
                pij = tl.load(pb + ri[:, None].to(tl.int64) * N + rj[None, :], mask=pair, other=0.0)
                pw = pij * w
                ax += tl.sum(pw * dx, axis=1)
                ay += tl.sum(pw * dy, axis=1)
                w2 = w * w
                rx += tl.sum(w2 * dx, axis=1)
                ry += tl.sum(w2 * dy, axis=1)
                zi += tl.sum(w, axis=1)
            tl.store(fb + ri, ax, mask=mi)
            tl.store(fb + N + ri, ay, mask=mi)
            tl.store(fb + 2 * N + ri, rx, mask=mi)
            tl.store(fb + 3 * N + ri, ry, mask=mi)
            zacc += zi.to(tl.float64)
        iz = (1.0 / tl.maximum(tl.sum(zacc, axis=0), 1e-30)).to(tl.float32)
        tl.debug_barrier()
        # pass 2: momentum step with delta-bar-delta gains, clipped to max_step
        m0 = tl.zeros([BI], dtype=tl.float32)
        m1 = tl.zeros([BI], dtype=tl.float32)
        for i0 in range(0, n, BI):
            ri = i0 + tl.arange(0, BI)
            mi = ri < n
            gc0 = ex * tl.load(fb + ri, mask=mi, other=0.0) - tl.load(fb + 2 * N + ri, mask=mi, other=0.0) * iz
            gc1 = ex * tl.load(fb + N + ri, mask=mi, other=0.0) - tl.load(fb + 3 * N + ri, mask=mi, other=0.0) * iz
            u0 = tl.load(ub + ri, mask=mi, other=0.0)
            u1 = tl.load(ub + N + ri, mask=mi, other=0.0)
            g0 = tl.load(gb + ri, mask=mi, other=1.0)
            g1 = tl.load(gb + N + ri, mask=mi, other=1.0)
            flip0 = ((u0 > 0).to(tl.int32) - (u0 < 0).to(tl.int32)) != ((gc0 > 0).to(tl.int32) - (gc0 < 0).to(tl.int32))
            flip1 = ((u1 > 0).to(tl.int32) - (u1 < 0).to(tl.int32)) != ((gc1 > 0).to(tl.int32) - (gc1 < 0).to(tl.int32))
            g0 = tl.where(flip0, g0 + 0.2, g0 * 0.8 + 0.01)
            g1 = tl.where(flip1, g1 + 0.2, g1 * 0.8 + 0.01)
            u0 = mom * u0 - lr * g0 * gc0
            u1 = mom * u1 - lr * g1 * gc1
            norm = tl.sqrt(u0 * u0 + u1 * u1)
            scale = tl.where(norm > max_step, max_step / tl.maximum(norm, 1e-30), 1.0)
            u0 = u0 * scale
            u1 = u1 * scale
            y0 = tl.load(yb + ri, mask=mi, other=0.0) + u0
            y1 = tl.load(yb + N + ri, mask=mi, other=0.0) + u1
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
        # pass 3: re-centre
        for i0 in range(0, n, BI):
            ri = i0 + tl.arange(0, BI)
            mi = ri < n
            tl.store(yb + ri, tl.load(yb + ri, mask=mi, other=0.0) - c0, mask=mi)
            tl.store(yb + N + ri, tl.load(yb + N + ri, mask=mi, other=0.0) - c1, mask=mi)
        tl.debug_barrier()
    if steps > 0:
        # KL(P || Q) = sum p log p + sum p log(1 + d2) + log Z, float32 terms and float64 sums
        zacc = tl.zeros([BI], dtype=tl.float64)
        sacc = tl.zeros([BI], dtype=tl.float64)
        for i0 in range(0, n, BI):
            ri = i0 + tl.arange(0, BI)
            mi = ri < n
            yi0 = tl.load(yb + ri, mask=mi, other=0.0)
            yi1 = tl.load(yb + N + ri, mask=mi, other=0.0)
            zi = tl.zeros([BI], dtype=tl.float32)
            si = tl.zeros([BI], dtype=tl.float32)
            for j0 in range(0, n, BJ):
                rj = j0 + tl.arange(0, BJ)
                mj = rj < n
                yj0 = tl.load(yb + rj, mask=mj, other=0.0)
                yj1 = tl.load(yb + N + rj, mask=mj, other=0.0)
                dx = yi0[:, None] - yj0[None, :]
                dy = yi1[:, None] - yj1[None, :]
                pair = mi[:, None] & mj[None, :] & (ri[:, None] != rj[None, :])
                d = 1.0 + dx * dx + dy * dy
                pij = tl.load(pb + ri[:, None].to(tl.int64) * N + rj[None, :], mask=pair, other=0.0)
                zi += tl.sum(tl.where(pair, 1.0 / d, 0.0), axis=1)
                si += tl.sum(pij * tl.log(d), axis=1)
            zacc += zi.to(tl.float64)
            sacc += si.to(tl.float64)
        z = tl.maximum(tl.sum(zacc, axis=0), 1e-30)
        tl.store(KL + b, tl.load(ENT + b) + tl.sum(sacc, axis=0) + tl.log(z))


_kernel = triton.jit(_round)


def interpreted() -> bool:
    """True when Triton runs kernels by its interpreter (``TRITON_INTERPRET=1`` set before Triton
    was first imported): the only way to run this kernel on CPU tensors."""
    return bool(triton.knobs.runtime.interpret)


def blocks(n_max: int) -> int:
    """Tile edge for heads of up to ``n_max`` points: a power of two in [16, 64]."""
    return max(16, min(64, triton.next_power_of_2(max(1, n_max))))


SIGNATURE = {
    "P": "*fp32", "Y": "*fp32", "U": "*fp32", "G": "*fp32", "BUF": "*fp32", "LEN": "*i32", "STEPS": "*i32",
    "EX": "*fp32", "MOM": "*fp32", "LR": "*fp32", "ENT": "*fp64", "KL": "*fp64", "max_step": "fp32", "N": "i32",
    "BI": "constexpr", "BJ": "constexpr",
}  # fmt: skip


def warps(block: int) -> int:
    return 4 if block <= 32 else 8


def compile_for(capability: int = 90, block: int = 64):
    """Compile the kernel ahead of time for a CUDA compute capability (90: H100) without a GPU:
    Triton's compiler and its bundled ptxas are enough. Returns the compiled kernel (``.asm``)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    src = ASTSource(fn=_kernel, signature=SIGNATURE, constexprs={"BI": block, "BJ": block})
    return triton.compile(src, target=GPUTarget("cuda", capability, 32), options={"num_warps": warps(block)})


def launch(state, steps: torch.Tensor, ex: torch.Tensor, mom: torch.Tensor, lr: torch.Tensor,
           max_step: float) -> None:  # fmt: skip
    """One round for every head of ``state`` (a ``gpu_tsne.DeviceState``): writes ``state.kl``."""
    if state.device.type != "cuda" and not interpreted():
        raise RuntimeError(
            "the triton t-SNE backend runs on CUDA devices; on CPU it needs TRITON_INTERPRET=1 in the "
            "environment before start (Triton's interpreter, for tests), or use the numba or torch backend"
        )
    bs = blocks(state.n_max)
    _kernel[(state.batch,)](
        state.p, state.y, state.u, state.g, state.buf, state.lengths, steps, ex, mom, lr,
        state.entropy, state.kl, float(max_step), state.n_max,
        BI=bs, BJ=bs, num_warps=warps(bs),
    )  # fmt: skip
