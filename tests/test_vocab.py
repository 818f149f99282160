"""Reading the vocabulary in blocks (``workers.analyses.causal.vocab``) gives what the full ``[R, vocabulary]``
logits give: top-k, log-sum-exp, a token's logit and rank; with biases, Gemma 2's soft-cap, rows
without a token, block sizes that do not divide the vocabulary, float32 and float64."""

from __future__ import annotations

import pytest
import torch

from workers.analyses.causal.vocab import read_vocab
from workers.models.lm_head import Unembedding


def _full(u: Unembedding, h: torch.Tensor, ids: torch.Tensor, k: int):
    logits = u.logits(h)  # [R, V]
    lse = torch.logsumexp(logits.double(), -1)
    top_l, top_i = logits.topk(k, -1)
    has = ids >= 0
    own = logits[torch.arange(len(ids))[has], ids[has]]
    rank = (logits[has] > own[:, None]).sum(-1) + 1
    return logits, lse, top_l, top_i, own, rank, has


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("cap,bias", [(None, False), (None, True), (3.0, True)])
@pytest.mark.parametrize("k", [1, 6])
def test_blocks_give_what_the_full_logits_give(dtype, cap, bias, k):
    gen = torch.Generator().manual_seed(7)
    V, d, R = 1003, 24, 41
    w = torch.randn(V, d, generator=gen, dtype=dtype)
    u = Unembedding(w, torch.randn(V, generator=gen, dtype=dtype) if bias else None, "file", cap)
    h = torch.randn(R, d, generator=gen, dtype=dtype) * 1.5
    ids = torch.randint(0, V, (R,), generator=gen)
    ids[::5] = -1  # rows with no token
    ids[1] = int(u.logits(h[1]).argmax())  # a row whose token is the top one: rank 1
    logits, lse, top_l, top_i, own, rank, has = _full(u, h, ids, k)
    seen = []
    for exact in (False, True):
        r = read_vocab(
            u, h, k=k, ids=ids, chunk=251, rows=16, exact_sum=exact, progress=seen.append
        )
        # a block product may sum in another order than the full one (and MKL's code paths do it
        # differently, docs/models.md "Precision"): each logit carries a few units in the last place
        # of its size, and so do the log-sum-exp and the log-probabilities (3.4e-6 apart in float32
        # under MKL_CBWR=COMPATIBLE, where 1e-6 failed): 16 of them of the largest logit
        tol = 16 * torch.finfo(dtype).eps * float(logits.abs().max())
        assert torch.allclose(r.lse, lse, rtol=0, atol=tol), (r.lse - lse).abs().max()
        # a block product may sum in another order than the full one: the same logits to its rounding
        same = (
            {"rtol": 1e-6, "atol": 1e-6}
            if dtype == torch.float32
            else {"rtol": 1e-13, "atol": 1e-13}
        )
        assert torch.allclose(r.top_logits, top_l, **same)
        # the ids agree but where equal logits tie (the soft-cap saturates): then the logits agree
        assert torch.allclose(logits.gather(1, r.top_ids), top_l, **same)
        if cap is None:
            assert torch.equal(r.top_ids, top_i)
        assert torch.allclose(r.own[has], own, **same) and r.own[~has].isnan().all()
        assert torch.equal(r.rank[has], rank) and (r.rank[~has] == 0).all()
        assert r.rank[1] == 1
        lp = r.logprob_own()[has]
        assert torch.allclose(
            lp, torch.log_softmax(logits.double(), -1)[torch.arange(R)[has], ids[has]], atol=tol
        )
    assert seen[-1] == 1.0 and len(seen) == 2 * 4  # 4 blocks of 251 rows each time


def test_ranks_count_other_tokens_only():
    """Equal logits: a token ranks 1 + the number of strictly larger *other* logits; its own column is
    never counted against it."""
    w = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [2.0, 0.0]])  # tokens 0 and 1 tie
    u = Unembedding(w, None, "tied")
    h = torch.tensor([[1.0, 0.5], [1.0, 0.5]])
    r = read_vocab(u, h, ids=torch.tensor([0, 3]), chunk=1)
    assert r.rank.tolist() == [
        2,
        1,
    ]  # token 3 (2.0) beats both; token 1 ties with 0 and does not count
    assert r.top_ids[:, 0].tolist() == [3, 3]


def test_exact_sum_is_a_float64_log_sum_exp():
    """Integer weights and states: every logit is exact in float32, whatever the order of the sums, so
    the blocks' logits are the full product's to the bit; then ``exact_sum`` is a float64 log-sum-exp
    of them (1e-13), and the float32 sums within blocks are off by float32 rounding only."""
    gen = torch.Generator().manual_seed(3)
    w = torch.randint(-3, 4, (2000, 16), generator=gen).float()
    h = torch.randint(-2, 3, (9, 16), generator=gen).float() / 4
    u = Unembedding(w, None, "tied")
    want = torch.logsumexp(u.logits(h).double(), -1)
    exact = read_vocab(u, h, chunk=300, exact_sum=True).lse
    fast = read_vocab(u, h, chunk=300).lse
    assert (exact - want).abs().max() < 1e-13
    assert 0 < (fast - want).abs().max() < 1e-5
