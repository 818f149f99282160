"""Maximum attention, head affinities and KL (docs/analyses.md#attention-head-t-sne, §3)."""

from __future__ import annotations

import numpy as np
import pytest

from workers import head_affinities, kl_divergence, max_attention, mean_attention
from workers.analyses.tsne.affinities import conditional_probabilities, perplexity_affinities
from workers.core.errors import HeadscopeError
from workers.models import run_text


@pytest.fixture(scope="module")
def run(minilm, demo_text):
    return run_text(minilm, demo_text)


def test_max_attention_equals_direct_recomputation(run):
    ma = max_attention(run.attentions)
    L, H, n, _ = run.attentions.shape
    assert ma.shape == (L, H, n)
    rng = np.random.default_rng(0)
    for _ in range(20):
        ly, h, j = rng.integers(L), rng.integers(H), rng.integers(n)
        assert ma[ly, h, j] == max(run.attentions[ly, h, i, j] for i in range(n))
    mean = mean_attention(run.attentions)
    np.testing.assert_allclose(
        mean.sum(axis=-1), 1.0, atol=1e-4
    )  # rows sum to 1 -> column means sum to 1


def test_max_attention_drops_special_tokens(run):
    keep = ~run.special
    ma = max_attention(run.attentions, keep=keep)
    idx = np.flatnonzero(keep)
    assert ma.shape[-1] == idx.size
    expected = run.attentions[2, 3][np.ix_(idx, idx)].max(axis=0)
    np.testing.assert_array_equal(ma[2, 3], expected)


def test_head_affinities_are_a_joint_distribution(run):
    p = head_affinities(run.attentions[1, 2])
    assert np.allclose(p, p.T)
    assert np.all(np.diag(p) == 0)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(p >= 0)
    # formula check on one entry
    a = run.attentions[1, 2].astype(np.float64)
    denom = (a + a.T).sum() - 2 * np.trace(a)
    assert p[3, 7] == pytest.approx((a[3, 7] + a[7, 3]) / denom, rel=1e-12)


def test_head_affinities_restrict_before_normalising(run):
    keep = ~run.special
    p = head_affinities(run.attentions[0, 0], keep=keep)
    idx = np.flatnonzero(keep)
    a = run.attentions[0, 0][np.ix_(idx, idx)].astype(np.float64)
    q = a + a.T
    np.fill_diagonal(q, 0)
    np.testing.assert_allclose(p, q / q.sum(), rtol=1e-12)


def test_head_affinities_batched_match_single(run):
    batch = head_affinities(run.attentions[:2, :3])
    assert batch.shape[:2] == (2, 3)
    np.testing.assert_allclose(batch[1, 2], head_affinities(run.attentions[1, 2]))
    np.testing.assert_allclose(batch.sum(axis=(-1, -2)), 1.0)


def test_head_affinities_reject_bad_shapes():
    with pytest.raises(HeadscopeError, match="square"):
        head_affinities(np.ones((3, 4)))


@pytest.mark.parametrize("perplexity", [5.0, 20.0])
def test_perplexity_affinities_hit_the_perplexity(perplexity):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(80, 8))
    pc = conditional_probabilities(x, perplexity=perplexity)
    np.testing.assert_allclose(pc.sum(axis=1), 1.0)
    ent = -np.sum(np.where(pc > 0, pc * np.log2(np.where(pc > 0, pc, 1)), 0), axis=1)
    np.testing.assert_allclose(2**ent, perplexity, rtol=1e-3)
    p = perplexity_affinities(x, perplexity=perplexity)
    assert np.allclose(p, p.T) and np.all(np.diag(p) == 0) and p.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(p, (pc + pc.T) / (2 * 80), rtol=1e-9)


def test_perplexity_is_capped_for_short_texts():
    x = np.random.default_rng(2).normal(size=(10, 4))
    pc = conditional_probabilities(x, perplexity=20)
    ent = -np.sum(np.where(pc > 0, pc * np.log2(np.where(pc > 0, pc, 1)), 0), axis=1)
    np.testing.assert_allclose(2**ent, 3.0, rtol=1e-3)  # (n - 1) / 3


def test_kl_is_zero_only_for_a_perfect_fit_and_positive_otherwise():
    rng = np.random.default_rng(0)
    y = rng.normal(size=(20, 2))
    d2 = ((y[:, None] - y[None]) ** 2).sum(-1)
    w = 1 / (1 + d2)
    np.fill_diagonal(w, 0)
    q = w / w.sum()
    assert kl_divergence(q, y) == pytest.approx(0.0, abs=1e-12)
    p = np.ones((20, 20))
    np.fill_diagonal(p, 0)
    p /= p.sum()
    kl = kl_divergence(p, y)
    assert kl > 0
    manual = np.sum(p[p > 0] * np.log(p[p > 0] / q[p > 0]))
    assert kl == pytest.approx(manual, rel=1e-12)


@pytest.mark.parametrize("scale", [1e-4, 1.0, 1e4])
def test_every_row_hits_the_perplexity_at_any_scale_as_bisection_does(scale):
    """Newton's steps on log β (affinities.conditional_from_distances) reach each row's perplexity
    whatever the data's scale, and give bisection's P (a plain reference here) within its tolerance."""
    rng = np.random.default_rng(3)
    x = (
        scale * rng.normal(size=(120, 16)) * rng.uniform(0.2, 3.0, size=(120, 1))
    )  # rows of unlike spread
    pc = conditional_probabilities(x, perplexity=20)
    ent = -np.sum(np.where(pc > 0, pc * np.log(np.where(pc > 0, pc, 1)), 0), axis=1)
    np.testing.assert_allclose(ent, np.log(20), atol=1e-5)
    assert np.all(np.diag(pc) == 0)
    d2 = ((x[:, None] - x[None]) ** 2).sum(-1)
    np.fill_diagonal(d2, np.inf)
    lo, hi = np.full(120, 1e-30), np.full(120, 1e30)
    for _ in range(400):  # bisection on log β, to the end
        beta = np.sqrt(lo * hi)
        w = np.exp(-(d2 - d2.min(axis=1, keepdims=True)) * beta[:, None])
        p = w / w.sum(axis=1, keepdims=True)
        h = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0), axis=1)
        lo, hi = np.where(h > np.log(20), beta, lo), np.where(h > np.log(20), hi, beta)
    np.testing.assert_allclose(pc, p, atol=1e-4 * p.max())


def test_a_row_with_more_duplicates_than_the_perplexity_is_uniform_over_them():
    """A repeated token's states coincide: with k >= perplexity copies its entropy cannot come down
    to log(perplexity); its P is the limit, uniform over the copies (and other rows are unaffected)."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(60, 8))
    x[:25] = x[0]  # 25 copies of one point: each has 24 others at distance 0
    pc = conditional_probabilities(x, perplexity=10)
    np.testing.assert_allclose(pc[:25, :25], (1 - np.eye(25)) / 24, atol=1e-12)
    assert np.all(pc[:25, 25:] == 0)
    ent = -np.sum(np.where(pc > 0, pc * np.log(np.where(pc > 0, pc, 1)), 0), axis=1)
    np.testing.assert_allclose(ent[25:], np.log(10), atol=1e-5)
