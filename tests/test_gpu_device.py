"""The first run on a GPU (docs/gpu.md): both Triton layouts, CUDA graphs on and off, at the sizes
where a kernel specialisation changes and at batches of 1, 12 and 264 heads (the fused layout's
threshold on an H100: two heads per SM), each against the torch round; the same job run 20 times
gives the same bits. Without a GPU the smallest cases run through Triton's interpreter, graphs
off, so the test itself is exercised everywhere."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_fast_tsne import random_p

from workers.analyses.tsne import TSNEOptions
from workers.analyses.tsne import gpu_engine as gpu_tsne
from workers.analyses.tsne.options import FastSchedule

pytest.importorskip("triton", reason="the gpu extra (Triton) is not installed")
from workers.analyses.tsne import gpu_kernels

CUDA = torch.cuda.is_available()
if not (CUDA or gpu_kernels.interpreted()):
    pytest.skip("no CUDA and Triton's interpreter is off", allow_module_level=True)
DEVICE = torch.device("cuda" if CUDA else "cpu")
SIZES = (3, 15, 16, 17, 64, 65, 513, 2048) if CUDA else (3, 17)
BATCHES = (1, 12, 264) if CUDA else (1, 3)
GRAPHS = ("on", "off") if CUDA else ("off",)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run(kind: str, p: torch.Tensor, y0: torch.Tensor, *, iters: int = 10) -> torch.Tensor:
    """``iters`` iterations of early exaggeration (one round), positions [B, N, 2] on the host."""
    lengths = torch.full((p.shape[0],), p.shape[-1], device=DEVICE)
    best, used = gpu_tsne.optimize_device(
        p, y0, lengths, gpu_tsne.entropy_device(p), options=TSNEOptions(early_exaggeration_iter=iters, n_iter=0,
                                                                        learning_rate=2.0),
        schedule=FastSchedule(check_every=iters, tol=-1.0, min_early=0, min_main=0), kind=kind,
    )  # fmt: skip
    assert (used == iters).all()
    return best.cpu()


@pytest.mark.parametrize("graphs", GRAPHS)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("layout", ["fused", "wide"])
def test_layouts_against_the_torch_round(layout, n, batch, graphs, setting):
    setting("HEADSCOPE_CUDA_GRAPHS", "1" if graphs == "on" else "0")
    heads = min(batch, 12 if CUDA else 2)  # distinct heads, repeated up to the batch
    p = torch.as_tensor(random_p(heads, n, seed=n), dtype=torch.float32)
    p = p.repeat(-(-batch // heads), 1, 1)[:batch].to(DEVICE)
    y0 = torch.as_tensor(np.random.default_rng(n).normal(size=(heads, n, 2)))
    y0 = y0.repeat(-(-batch // heads), 1, 1)[:batch].to(DEVICE)
    got = run(f"triton-{layout}", p, y0)
    want = run("torch", p, y0)
    assert torch.isfinite(got).all()
    scale = want.abs().max().item()
    assert (got - want).abs().max().item() <= 1e-4 * scale, (layout, n, batch, graphs)
    assert (
        got[heads:] == got[:heads].repeat(-(-batch // heads), 1, 1)[: batch - heads]
    ).all()  # same head, same bits


def test_the_same_job_gives_the_same_bits():
    """A whole layer's embedding (restart 0, spectral start), run again and again: identical."""
    heads, n, times = (72, 128, 20) if CUDA else (2, 12, 2)
    p = torch.as_tensor(random_p(heads, n, seed=5), dtype=torch.float32).to(DEVICE)
    options = TSNEOptions(
        device=str(DEVICE), **({} if CUDA else {"early_exaggeration_iter": 25, "n_iter": 25})
    )
    first = None
    for _ in range(times):
        emb, kls = gpu_tsne.embed_device(p, options=options, kind="triton")
        if first is None:
            first = (emb.cpu(), kls.cpu())
        else:
            assert torch.equal(emb.cpu(), first[0]) and torch.equal(kls.cpu(), first[1])
