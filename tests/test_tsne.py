"""Attention-head t-SNE engines (docs/analyses.md#attention-head-t-sne): determinism, restarts, engine agreement on real heads."""

from __future__ import annotations

import numpy as np
import pytest

from workers import (
    TSNEOptions,
    embed_affinities,
    head_affinities,
    head_tsne,
    kl_divergence,
)
from workers.analyses.tsne.initialization import spectral_init
from workers.core.errors import HeadscopeError, OutOfRangeError
from workers.models import run_text

HEADS = [(0, 3), (1, 2), (2, 5), (3, 10), (4, 1), (5, 7)]


@pytest.fixture(scope="module")
def run(minilm, demo_text):
    return run_text(minilm, demo_text[:700])  # ~140 tokens: the thesis abstract's first half


def test_batched_kl_within_5_percent_of_opentsne_on_real_heads(run):
    """Same P, same start, same schedule: the exact batched engine and openTSNE (Barnes-Hut)
    reach KLs within 5 % on average over six real MiniLM heads."""
    p = np.stack([head_affinities(run.attentions[layer, h]) for layer, h in HEADS])
    batched = embed_affinities(p, options=TSNEOptions(engine="batched"))
    reference = embed_affinities(p, options=TSNEOptions(engine="opentsne"))
    ratio = batched.kl.mean() / reference.kl.mean()
    assert 0.95 <= ratio <= 1.05, (batched.kl, reference.kl)
    # the reported KL is the exact KL of the returned map, for both engines
    np.testing.assert_allclose(batched.kl, kl_divergence(p, batched.embedding), rtol=1e-10)
    np.testing.assert_allclose(reference.kl, kl_divergence(p, reference.embedding), rtol=1e-10)
    # and t-SNE did something: every head below the KL of its start, on average far below
    start = kl_divergence(p, spectral_init(p))
    assert np.all(batched.kl < start) and batched.kl.mean() < 0.7 * start.mean()


def test_same_seed_same_map_other_seed_other_map(run):
    p = head_affinities(run.attentions[2, 5])
    opts = TSNEOptions(init="random", seed=3, n_iter=200, early_exaggeration_iter=50)
    a = embed_affinities(p, options=opts)
    b = embed_affinities(p, options=opts)
    np.testing.assert_array_equal(a.embedding, b.embedding)
    c = embed_affinities(
        p, options=TSNEOptions(init="random", seed=4, n_iter=200, early_exaggeration_iter=50)
    )
    assert not np.allclose(a.embedding, c.embedding)


def test_best_of_k_keeps_the_lowest_kl_and_reports_all(run):
    p = head_affinities(run.attentions[3, 10])
    res = embed_affinities(
        p, options=TSNEOptions(restarts=3, n_iter=200, early_exaggeration_iter=100)
    )
    assert res.kl_restarts.shape == (1, 3)
    assert res.kl[0] == pytest.approx(res.kl_restarts.min())
    assert len(set(np.round(res.kl_restarts[0], 10))) == 3  # the restarts really differ
    assert res.kl[0] == pytest.approx(float(kl_divergence(p, res.embedding)))


def test_head_grid_shapes_and_special_tokens(run):
    keep = ~run.special
    res = head_tsne(
        run.attentions,
        layers=[0, 5],
        heads=[1, 2, 3],
        keep=keep,
        options=TSNEOptions(n_iter=100, early_exaggeration_iter=50),
    )
    m = int(keep.sum())
    assert res.embedding.shape == (2, 3, m, 2)
    assert res.kl.shape == (2, 3) and np.all(res.kl > 0)
    np.testing.assert_array_equal(res.kept, np.flatnonzero(keep))


def test_batched_heads_do_not_interact(run):
    p = np.stack(
        [head_affinities(run.attentions[layer, h]) for layer, h in [(1, 1), (4, 4), (5, 0)]]
    )
    # float64 and a short run: t-SNE is chaotic, so float32 rounding differences between batch
    # sizes (BLAS blocking) would grow; what matters is that no head's P or Y enters another's
    opts = TSNEOptions(engine="batched", n_iter=40, early_exaggeration_iter=20, dtype="float64")
    together = embed_affinities(p, options=opts)
    alone = embed_affinities(p[:1], options=opts)
    np.testing.assert_allclose(alone.embedding[0], together.embedding[0], atol=1e-6)
    assert alone.kl[0] == pytest.approx(together.kl[0], rel=1e-6)


def test_out_of_range_layer_and_head_name_the_limit(run):
    with pytest.raises(OutOfRangeError, match="layer 6 is out of range.*6 layers"):
        head_tsne(run.attentions, layers=6, heads=0)
    with pytest.raises(OutOfRangeError, match="head 12 is out of range.*12 heads"):
        head_tsne(run.attentions, layers=0, heads=12)
    with pytest.raises(HeadscopeError, match="unknown t-SNE engine"):
        TSNEOptions(engine="umap").validate()


def test_spectral_init_is_small_and_deterministic(run):
    p = head_affinities(run.attentions[1, 1])
    a, b = spectral_init(p[None]), spectral_init(p[None])
    np.testing.assert_array_equal(a, b)
    assert a.shape == (1, p.shape[0], 2)
    assert a[0, :, 0].std() == pytest.approx(1e-4, rel=0.05)


def test_affinities_of_states_in_threads_are_those_of_each_state_alone():
    """The hidden-state P of several states at once (threads) equals each state's own, bit for bit."""
    from workers.analyses.tsne.affinities import perplexity_affinities
    from workers.analyses.tsne.hidden import affinities_of_states

    x = (
        np.random.default_rng(3).normal(size=(5, 40, 16)) * np.arange(1, 6)[:, None, None]
    )  # [state, point, dim]
    alone = np.stack([perplexity_affinities(xl, perplexity=8.0) for xl in x])
    for threads in (1, 2, 3):
        got = affinities_of_states(x, perplexity=8.0, threads=threads)
        assert got.shape == (5, 40, 40) and np.array_equal(got, alone), threads
    np.testing.assert_allclose(alone.sum(axis=(1, 2)), 1.0)  # each state's P is a distribution
    assert not np.allclose(alone[0], alone[4])  # the states differ, so an order mix-up would show
