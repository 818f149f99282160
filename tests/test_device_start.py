"""The spectral start on P's torch device (``device_spectral_init``): the same start as the numba
Lanczos (``fast_spectral_init``), padded heads of mixed lengths as if alone, degenerate P."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workers.analyses.tsne import initialization as start
from workers.analyses.tsne import options as fast_tsne
from workers.analyses.tsne.affinities import head_affinities
from workers.analyses.tsne.initialization import device_spectral_init, fast_spectral_init

STD = 1e-4  # every spectral start is scaled to this std

needs_numba = pytest.mark.skipif(not fast_tsne.numba_available(), reason="numba missing")


def attention_p(
    batch: int, n: int, *, seed: int = 0, sharp: float = 4.0, peaks: int = 3
) -> np.ndarray:
    """P of attention-like matrices: softmax rows of random logits, each row with a few sharp
    peaks (a strong favourite key or two, as real heads have), symmetrised: [batch, n, n]."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(batch, n, n)) * sharp
    rows = np.arange(n)[None, :, None]
    logits[np.arange(batch)[:, None, None], rows, rng.integers(0, n, size=(batch, n, peaks))] += (
        12.0
    )
    a = np.exp(logits - logits.max(-1, keepdims=True))
    return head_affinities(a / a.sum(-1, keepdims=True))


def padded(ps: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    size = max(p.shape[-1] for p in ps)
    out = np.zeros((len(ps), size, size))
    for b, p in enumerate(ps):
        out[b, : p.shape[-1], : p.shape[-1]] = p
    return torch.tensor(out), torch.tensor([p.shape[-1] for p in ps])


def alone_at(head: np.ndarray, index: int) -> np.ndarray:
    """A batch of heads of one length with ``head`` at ``index`` (copies before it)."""
    return np.stack([head] * (index + 1))


@needs_numba
@pytest.mark.parametrize("n", [20, 64, 200])
def test_device_start_equals_the_numba_start(n, monkeypatch):
    p = attention_p(6, n, seed=n)
    want = fast_spectral_init(p, seed=3)
    got = device_spectral_init(torch.tensor(p, dtype=torch.float32), seed=3)
    assert got.dtype == torch.float64 and got.shape == (6, n, 2)
    assert np.abs(got.numpy() - want).max() <= 1e-3 * STD
    # float64 P against the numba kernel run on float64 P: the same algorithm, step for step
    monkeypatch.setattr(start, "kernel_p", lambda q: np.ascontiguousarray(q, dtype=np.float64))
    want64 = fast_spectral_init(p, seed=3)
    got64 = device_spectral_init(torch.tensor(p), seed=3).numpy()
    assert np.abs(got64 - want64).max() <= 1e-8 * STD


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(
    "sizes", [(30, 50, 64), (12, 100, 12, 12, 12)]
)  # 2nd: the lone head's P gathered
def test_mixed_lengths_give_each_head_its_own_start(dtype, sizes):
    ps = [attention_p(1, n, seed=10 + n + b)[0] for b, n in enumerate(sizes)]
    p, lengths = padded(ps)
    got = device_spectral_init(p.to(dtype), seed=5, lengths=lengths).numpy()
    # float32: the products P x of a padded head are summed in another order (~1e-7 of each),
    # which Lanczos carries into the eigenvectors (measured 5e-7 to 3e-6 of the scale, depending
    # on the matmul's blocking); float64: 1e-14
    tol = 1e-8 if dtype == torch.float64 else 1e-5
    for b, head in enumerate(ps):
        n = head.shape[-1]
        # head b alone: at the same index (its start vector and jitter) of a batch of its length
        alone = device_spectral_init(torch.tensor(alone_at(head, b), dtype=dtype), seed=5).numpy()
        assert np.abs(got[b, :n] - alone[b]).max() <= tol * STD, b
        assert (got[b, n:] == 0).all()
        if fast_tsne.numba_available():  # and the CPU engine's start for it
            assert (
                np.abs(got[b, :n] - fast_spectral_init(alone_at(head, b), seed=5)[b]).max()
                <= 1e-3 * STD
            )


def test_disconnected_and_degenerate_heads_stay_finite():
    blocks = np.zeros((40, 40))  # two unequal blocks, no edge between them
    blocks[:25, :25] = attention_p(1, 25, seed=1)[0]
    blocks[25:, 25:] = attention_p(1, 15, seed=2)[0] * 0.6
    lonely = attention_p(1, 40, seed=3)[0]
    lonely[7, :] = lonely[:, 7] = 0.0  # a point without weight: d = 0, 1 / sqrt(d) = inf
    pair = np.array([[0.0, 0.5], [0.5, 0.0]])  # two points: one Lanczos step, then the fallback
    uniform = (1 - np.eye(10)) / 90  # m q = -q / 9 off v1: Lanczos stops after 1 step, fallback
    ps = [blocks / blocks.sum(), lonely / lonely.sum(), pair, uniform]
    p, lengths = padded(ps)
    for dtype in (torch.float32, torch.float64):
        got = device_spectral_init(p.to(dtype), seed=1, lengths=lengths).numpy()
        assert np.isfinite(got).all()
        assert (
            (got[2, 2:] == 0).all() and (got[3, 10:] == 0).all() and np.abs(got[2:, :2]).min() > 0
        )
        # the first diffusion coordinate (eigenvalue 1) is constant on each block, up to jitter
        first = got[0, :, 0]
        assert first[:25].std() < 1e-5 and first[25:].std() < 1e-5
        assert abs(first[:25].mean() - first[25:].mean()) > STD
        # the point without weight starts at the origin (up to jitter), not at 1e150 x rounding
        assert np.abs(got[1, 7]).max() < 1e-5 < np.abs(got[1]).max()
    if fast_tsne.numba_available():  # the fallback head as the CPU path computes it (beside
        # ordinary heads: fast_spectral_init fails when every head of its batch stops at step 1)
        want = fast_spectral_init(np.stack([*attention_p(3, 10, seed=9), uniform]), seed=1)[3]
        np.testing.assert_allclose(got[3, :10], want, rtol=0, atol=1e-12)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_start_stays_on_cuda_and_matches_cpu():
    ps = [attention_p(1, n, seed=n)[0] for n in (64, 100, 128)]
    p, lengths = padded(ps)
    p32 = p.to(torch.float32)
    want = device_spectral_init(p32, seed=2, lengths=lengths)
    got = device_spectral_init(p32.cuda(), seed=2, lengths=lengths.cuda())
    assert got.device.type == "cuda" and got.dtype == torch.float64
    assert (got.cpu() - want).abs().max().item() <= 1e-3 * STD
