"""The fast t-SNE engine: the same update rule as openTSNE, both backends agree, honest KL,
quality equal to openTSNE on real MiniLM heads, adaptive stopping, the service default."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workers.analyses.tsne import TSNEOptions, embed_affinities
from workers.analyses.tsne import host_engine as fast_tsne
from workers.analyses.tsne import initialization as start
from workers.analyses.tsne.affinities import head_affinities, kl_divergence, perplexity_affinities
from workers.analyses.tsne.host_engine import fast_optimize
from workers.analyses.tsne.initialization import fast_spectral_init, spectral_init
from workers.analyses.tsne.options import FastSchedule
from workers.core.errors import HeadscopeError


def random_p(batch: int, n: int, *, seed: int = 0, sharp: float = 4.0) -> np.ndarray:
    """P of random softmax 'attention' matrices: [batch, n, n]."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(batch, n, n)) * sharp
    a = np.exp(logits - logits.max(-1, keepdims=True))
    return head_affinities(a / a.sum(-1, keepdims=True))


def reference_steps(p, y, *, steps, ex, mom, lr, max_step=5.0):
    """openTSNE's gradient descent (gradient without the factor 4), float64 numpy, one head."""
    y = y.copy()
    u = np.zeros_like(y)
    g = np.ones_like(y)
    for _ in range(steps):
        diff = y[:, None, :] - y[None, :, :]  # [i, j, 2]
        w = 1.0 / (1.0 + (diff**2).sum(-1))
        np.fill_diagonal(w, 0.0)
        z = w.sum()
        grad = (((ex * p - w / z) * w)[:, :, None] * diff).sum(1)
        flipped = np.sign(u) != np.sign(grad)
        g = np.where(flipped, g + 0.2, g * 0.8 + 0.01)
        u = mom * u - lr * g * grad
        norm = np.linalg.norm(u, axis=1, keepdims=True)
        u = np.where(norm > max_step, u / norm * max_step, u)
        y = y + u
        y = y - y.mean(0)
    return y


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_steps_follow_opentsne_update_rule(backend):
    p = random_p(2, 24, seed=1)
    y0 = np.random.default_rng(2).normal(size=(2, 24, 2))
    options = TSNEOptions(early_exaggeration_iter=5, n_iter=0, learning_rate=2.0)
    got, used = fast_optimize(
        p, y0, options=options, schedule=FastSchedule(check_every=5), backend=backend
    )
    assert used.tolist() == [5, 5]
    for b in range(2):
        want = reference_steps(p[b], y0[b], steps=5, ex=12.0, mom=0.5, lr=2.0)
        np.testing.assert_allclose(got[b], want, rtol=0, atol=1e-4 * np.abs(want).max())


def test_backends_agree_on_the_first_iterations():
    p = random_p(3, 40, seed=3)
    y0 = spectral_init(p, seed=0)
    options = TSNEOptions(early_exaggeration_iter=10, n_iter=0)
    a, _ = fast_optimize(p, y0, options=options, backend="numba")
    b, _ = fast_optimize(p, y0, options=options, backend="torch")
    assert np.abs(a - b).max() < 1e-4 * np.abs(a).max()


def test_fast_spectral_init_equals_spectral_init():
    p = random_p(4, 60, seed=4, sharp=2.0)
    want = spectral_init(p, seed=7)
    got = fast_spectral_init(p, seed=7)
    # both are scaled to std 1e-4; Lanczos converges to the same eigenvectors and signs
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-8)


def test_fast_spectral_init_of_a_uniform_p():
    """Uniform P: Lanczos stops after one step for every head; the start falls back to the full
    decomposition (it used to raise from the Ritz solver)."""
    n = 12
    p = np.full((2, n, n), 1.0 / (n * (n - 1)))
    p[:, np.arange(n), np.arange(n)] = 0.0
    got = fast_spectral_init(p, seed=2)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, spectral_init(p, seed=2), rtol=0, atol=1e-12)


def test_kl_divergence_equals_the_definition():
    p = random_p(6, 30, seed=5).reshape(2, 3, 30, 30)
    y = np.random.default_rng(6).normal(size=(2, 3, 30, 2)) * 3
    got = kl_divergence(p, y)
    assert got.shape == (2, 3)
    for idx in np.ndindex(2, 3):
        d2 = ((y[idx][:, None] - y[idx][None]) ** 2).sum(-1)
        w = 1 / (1 + d2)
        np.fill_diagonal(w, 0)
        q = w / w.sum()
        pp = p[idx]
        mask = pp > 0
        want = np.sum(pp[mask] * np.log(pp[mask] / q[mask]))
        assert got[idx] == pytest.approx(want, rel=1e-12)


def test_fast_engine_reports_exact_kl_of_its_embedding():
    p = random_p(5, 50, seed=8)
    res = embed_affinities(p, options=TSNEOptions(engine="fast", restarts=2))
    assert res.engine == "fast"
    assert res.embedding.shape == (5, 50, 2) and res.kl_restarts.shape == (5, 2)
    np.testing.assert_array_equal(res.kl, kl_divergence(p, res.embedding))
    np.testing.assert_array_equal(res.kl, res.kl_restarts.min(axis=1))
    single = embed_affinities(p[0], options=TSNEOptions(engine="fast"))
    assert single.embedding.shape == (50, 2) and single.kl.shape == (1,)


def test_adaptive_stop_saves_iterations_without_losing_kl():
    # diffuse random attention: the map settles long before openTSNE's 1000 iterations
    p = random_p(4, 80, seed=1, sharp=1.0)
    y0 = spectral_init(p)
    options = TSNEOptions()
    fast, used = fast_optimize(p, y0, options=options)
    never = FastSchedule(
        tol=-np.inf, main_tol=None, settle_tol=None
    )  # no phase ends before its cap
    full, used_full = fast_optimize(p, y0, options=options, schedule=never)
    assert (used_full == 1000).all() and (used < 600).all(), used
    assert (kl_divergence(p, fast) <= 1.01 * kl_divergence(p, full)).all()


def test_iteration_caps_are_upper_bounds():
    p = random_p(2, 20, seed=9)
    y0 = spectral_init(p)
    _, used = fast_optimize(p, y0, options=TSNEOptions(early_exaggeration_iter=30, n_iter=0))
    assert used.tolist() == [30, 30]
    same, used = fast_optimize(p, y0, options=TSNEOptions(early_exaggeration_iter=0, n_iter=0))
    assert used.tolist() == [0, 0]
    np.testing.assert_array_equal(same, y0)


def test_torch_fallback_without_numba(monkeypatch):
    monkeypatch.setattr(fast_tsne, "numba_available", lambda: False)  # the backend choice
    monkeypatch.setattr(start, "numba_available", lambda: False)  # the Lanczos start
    p = random_p(2, 30, seed=10)
    res = embed_affinities(
        p, options=TSNEOptions(engine="fast", n_iter=200, early_exaggeration_iter=50)
    )
    assert np.isfinite(res.kl).all() and (res.kl < kl_divergence(p, spectral_init(p))).all()


def test_unknown_backend_and_engine_are_clear_errors():
    with pytest.raises(ValueError, match="backend 'gpu'"):
        fast_tsne.pick_backend("gpu", torch.device("cpu"))
    with pytest.raises(HeadscopeError, match="fast"):
        TSNEOptions(engine="fastest").validate()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_path_matches_cpu():
    p = random_p(8, 100, seed=11)
    cpu = embed_affinities(p, options=TSNEOptions(engine="fast", device="cpu"))
    gpu = embed_affinities(p, options=TSNEOptions(engine="fast", device="cuda"))
    assert gpu.kl.mean() <= 1.02 * cpu.kl.mean()


def test_fast_matches_opentsne_on_minilm_heads(minilm):
    """The claim of issue 7 on real heads, small: equal quality to openTSNE (same start)."""
    from workers.models import run_text

    run = run_text(
        minilm,
        "We present a new technique called t-SNE that visualizes high-dimensional "
        "data by giving each datapoint a location in a two or three-dimensional map.",
    )
    p = head_affinities(run.attentions[1])  # layer 1, all 12 heads: [12, n, n]
    fast = embed_affinities(p, options=TSNEOptions(engine="fast"))
    ref = embed_affinities(p, options=TSNEOptions(engine="opentsne"))
    ratio = fast.kl / ref.kl
    assert fast.kl.mean() <= 1.02 * ref.kl.mean(), ratio
    assert ratio.max() <= 1.3, ratio


def test_fast_handles_perplexity_p(minilm, demo_text):
    """Hidden-state t-SNE (Gaussian P, every state) through the fast engine is as good as
    openTSNE: the mean KL over states, and no state far off."""
    from workers.models import run_text

    run = run_text(minilm, " ".join(demo_text.split()[:60]))
    p = np.stack([perplexity_affinities(state) for state in run.hidden_states])  # [7, n, n]
    fast = embed_affinities(p, options=TSNEOptions(engine="fast"))
    ref = embed_affinities(p, options=TSNEOptions(engine="opentsne"))
    assert fast.kl.mean() <= 1.02 * ref.kl.mean(), (fast.kl, ref.kl)
    assert (fast.kl <= 1.3 * ref.kl).all(), (fast.kl, ref.kl)


def test_service_uses_fast_by_default(catalogue):
    """The pipeline (CLI and queue jobs) runs the fast engine unless told otherwise, for
    attention heads and hidden states alike, and its KL is the exact KL of the returned map."""
    from workers.analyses.tsne.section import DEFAULT_ENGINE
    from workers.engine.pipeline import analyze
    from workers.models import load_model

    loaded = load_model("tiny-bert", device="cpu")
    text = "We present a new technique called t-SNE that visualizes high-dimensional data."
    res = analyze(loaded, text, ["head-tsne", "hidden-tsne"], {"layer": 1, "head": 2})
    assert DEFAULT_ENGINE == "fast" and TSNEOptions().engine == "fast"
    assert res["head-tsne"]["engine"] == "fast" and res["hidden-tsne"]["engine"] == "fast"
    from workers.models import run_text

    p = head_affinities(run_text(loaded, text).attentions[1, 2])
    emb = np.asarray(res["head-tsne"]["embedding"])  # [token, 2]
    assert res["head-tsne"]["kl"][0] == pytest.approx(float(kl_divergence(p, emb)), rel=1e-12)
    other = analyze(loaded, text, ["head-tsne"], {"layer": 1, "head": 2, "engine": "batched"})
    assert other["head-tsne"]["engine"] == "batched"


@pytest.mark.parametrize("threads", [1, 2])
def test_a_cpu_run_keeps_torch_threads_and_gives_numba_no_more(threads):
    """numba's OpenMP layer shares libgomp with torch: a parallel numba run once left torch at numba's
    thread count (a one-thread worker went on at two). The run keeps torch's count, numba at most it."""
    from workers.analyses.tsne.options import numba_available

    if not numba_available():
        pytest.skip("numba not installed: the torch path has nothing to keep")
    import numba

    had_torch, had_numba = torch.get_num_threads(), numba.get_num_threads()
    torch.set_num_threads(threads)
    try:
        rng = np.random.default_rng(0)
        a = rng.random((3, 12, 12))
        p = a + a.transpose(0, 2, 1)
        p[:, np.arange(12), np.arange(12)] = 0.0
        p /= p.sum(axis=(1, 2), keepdims=True)
        emb, kls = fast_tsne.run_fast_host(
            p,
            options=TSNEOptions(n_iter=20, early_exaggeration_iter=10),
            x=None,
            progress=lambda f, m: None,
        )
        assert emb.shape == (1, 3, 12, 2) and np.isfinite(kls).all()
        assert torch.get_num_threads() == threads
        assert numba.get_num_threads() == min(threads, numba.config.NUMBA_NUM_THREADS)
    finally:
        torch.set_num_threads(had_torch)
        numba.set_num_threads(had_numba)


def test_a_head_in_a_batch_moves_as_it_would_alone():
    """Heads that leave their phases at different times: each head's map in the batch equals its map
    run alone, bit for bit. (Until issue 34 the rounds after the first head finished read the other
    heads' exaggeration, momentum and learning rate, or memory past the end of the arrays.)"""
    p = np.concatenate([random_p(3, 60, seed=21, sharp=1.0), random_p(3, 60, seed=22, sharp=6.0)])
    y0 = fast_spectral_init(p, seed=0)
    options = TSNEOptions(early_exaggeration_iter=100, n_iter=300)
    together, used = fast_optimize(p, y0, options=options)
    assert len(set(used.tolist())) > 1  # some heads ran rounds without the others
    for b in range(len(p)):
        alone, used_alone = fast_optimize(p[b : b + 1], y0[b : b + 1], options=options)
        assert used_alone[0] == used[b]
        np.testing.assert_array_equal(together[b], alone[0])
