"""Circuits on a task data set (SPEC 14) on tiny random decoders, float64: the edge-patched run of every
example with every edge is its clean run and with none its corrupted run, so the full circuit's
faithfulness is 1 and the empty one's 0; one example's set scores are the single-pair scores; batched
scores are the per-example ones; CPR and CMD of known curves; a seeded random baseline and bootstrap
are reproducible."""

from __future__ import annotations

import numpy as np
import pytest
import test_circuits
import torch
from test_circuit_tasks import TINY_NAMES
from tiny_models import DECODER_FAMILIES, _decoder_tokenizer

from workers.analyses.circuits import patch_plan as pp
from workers.analyses.circuits import set_scores as ss
from workers.analyses.circuits.edges import eap_scores
from workers.analyses.circuits.patch_plan import plan
from workers.analyses.circuits.set_circuits import circuits_on_set, split
from workers.analyses.circuits.tasks import ioi
from workers.models import load_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")
lms = test_circuits.lms  # the tiny models of every family (one session fixture)


def _examples(n: int, seed: int = 0):
    return ioi(_decoder_tokenizer(64), n, seed, names=TINY_NAMES)


def _close(a, b, tol=1e-10):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.abs(a - b).max()) <= tol * float(np.abs(b).max())


def _load(cat, fam):
    return load_model(f"lm-{fam}", catalogue=cat, dtype="float64", device="cpu")


@pytest.mark.parametrize("fam", (*DECODER_FAMILIES, "gpt2"))
def test_every_edge_is_the_clean_run_and_none_the_corrupted(lms, fam):
    loaded = _load(lms, fam)
    exs = _examples(5)
    p = ss.prepare(loaded, exs)
    assert len(p.groups) > 1  # examples of several lengths
    E = p.model.graph.n_edges
    index = list(range(len(exs)))
    got, m_c, m_k = ss.patched_metrics(p, index, np.stack([np.ones(E), np.zeros(E)]).astype(bool))
    scale = float(np.abs(np.concatenate([m_c, m_k])).max())
    assert np.abs(m_c - m_k).max() > 1e-6 * scale
    assert np.abs(got[0] - m_c).max() < 1e-10 * scale
    assert np.abs(got[1] - m_k).max() < 1e-10 * scale
    f = ss.faithfulness(got, m_c, m_k)
    assert abs(f[0] - 1) < 1e-9 and abs(f[1]) < 1e-9
    # the batched plain runs give each example's own metric
    mc2, mk2 = ss.metrics(p, index[::-1], rows=2)
    assert np.allclose(mc2[::-1], m_c, rtol=0, atol=1e-10 * scale)


@pytest.mark.parametrize("fam", ("llama", "gpt_neox", "gemma3_text", "gpt2"))
def test_set_scores_are_the_single_pair_scores_summed(lms, fam):
    loaded = _load(lms, fam)
    exs = _examples(6, seed=3)
    p = ss.prepare(loaded, exs)
    g = p.model.graph
    index = list(range(len(exs)))
    raw, m_c, m_k = ss.example_scores(p, index, steps=3)  # batched: rows example x step
    assert raw.shape == (len(exs), g.n_edges) and raw.abs().max() > 0
    scale = float(raw.abs().max())
    for i in index:  # each example alone, through today's single-pair code
        n = p.x0_c[i].shape[0]
        k, c = ss.plain_runs(p, [i])
        a, b = p.answer[i], p.wrong[i]
        one = eap_scores(
            p.model, p.x0_k[i], p.x0_c[i], p.kwargs[n], c.writers[0] - k.writers[0],
            lambda logits, a=a, b=b: logits[:, a] - logits[:, b],
            steps=3, rows=2, progress=lambda *_: None,
        )  # fmt: skip
        assert float((one - raw[i]).abs().max()) < 1e-10 * scale
        single = ss.set_scores(raw[i : i + 1], m_c[i : i + 1], m_k[i : i + 1])
        assert _close(single, (one / (m_c[i] - m_k[i])).numpy())
    # the set's score: the summed scores over the summed differences
    want = raw.sum(0).numpy() / (m_c - m_k).sum()
    assert _close(ss.set_scores(raw, m_c, m_k), want)
    # a weight of 2 is the example listed twice
    w = np.ones(len(exs))
    w[1] = 2
    twice = torch.cat([raw, raw[1:2]])
    assert _close(
        ss.set_scores(raw, m_c, m_k, w),
        ss.set_scores(twice, np.append(m_c, m_c[1]), np.append(m_k, m_k[1])),
    )


def test_cpr_and_cmd_of_known_curves():
    ks = ss.MIB_SIZES
    assert ss.cpr([0, 0.5, 1], [0, 1, 1]) == pytest.approx(0.75)
    assert ss.cmd([0, 0.5, 1], [0, 1, 1]) == pytest.approx(0.25)
    assert ss.cpr(ks, ks) == pytest.approx((1 - 0.001**2) / 2)  # f = k
    assert ss.cmd(ks, np.ones(len(ks))) == 0 and ss.cpr(ks, np.ones(len(ks))) == pytest.approx(
        0.999
    )
    assert ss.cmd([0.1, 0.2], [1.5, 0.5]) == pytest.approx(0.05)  # |1 - f| both sides of 1
    assert [ss.size_of(k, 1000) for k in ks] == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
    assert ss.size_of(0.001, 123211) == 124 and ss.size_of(0.001, 10) == 1


def test_stability_of_identical_examples_is_one_and_seeded():
    rng = np.random.default_rng(0)
    one = torch.as_tensor(rng.normal(size=300))
    raw = one.repeat(8, 1)
    m_c, m_k = np.full(8, 2.0), np.zeros(8)
    sizes = [1, 3, 30, 300]
    assert ss.stability(raw, m_c, m_k, sizes, resamples=5, seed=0) == [(1.0, 0.0)] * 4
    noisy = torch.as_tensor(rng.normal(size=(8, 300)))
    a = ss.stability(noisy, m_c, m_k, sizes, resamples=6, seed=1)
    assert a == ss.stability(noisy, m_c, m_k, sizes, resamples=6, seed=1)
    assert all(0 <= m <= 1 for m, _ in a) and a[-1] == (1.0, 0.0) and a[1][0] < 1


def test_circuits_on_a_set_end_to_end(lms):
    loaded = _load(lms, "llama")
    exs = _examples(8, seed=5)
    assert split(8, 0.5, 0) == split(8, 0.5, 0) and len(split(8, 0.5, 0)[0]) == 4
    res = circuits_on_set(loaded, exs, ig_steps=2, bootstrap=3, random=3, top_edges=20, seed=0)
    again = circuits_on_set(loaded, exs, ig_steps=2, bootstrap=3, random=3, top_edges=20, seed=0)
    assert res["random"] == again["random"] and res["curve"] == again["curve"]
    assert res["stability"] == again["stability"]
    other = circuits_on_set(loaded, exs, ig_steps=2, bootstrap=0, random=3, top_edges=20, seed=1)
    assert other["random"]["cpr"] != res["random"]["cpr"]
    assert res["n_examples"] == {"discovery": 4, "evaluation": 4}
    assert [k for k, _ in res["curve"]] == list(ss.MIB_SIZES) and res["curve"][-1][1] == 1.0
    assert res["cpr"] == pytest.approx(ss.cpr(ss.MIB_SIZES, [f for _, f in res["curve"]]))
    assert res["cmd"] == pytest.approx(ss.cmd(ss.MIB_SIZES, [f for _, f in res["curve_abs"]]))
    assert len(res["edges"]) == 20 and res["n_edges_total"] == res["size_edges"][-1]
    scores = [abs(e["score"]) for e in res["edges"]]
    assert scores == sorted(scores, reverse=True)
    assert 0 <= res["accuracy"] <= 1 and (res["warning"] is None) == (res["accuracy"] >= 0.75)
    assert len(res["stability"]) == 10 and res["stability"][-1][1:] == [1.0, 0.0]


def test_a_cancel_stops_the_run(lms):
    """The worker cancels through the progress callback (it raises once DELETE asked): the run stops
    within the stage, and ``should_stop`` stops it between batches."""
    from workers.core.errors import CancelledError

    loaded = _load(lms, "llama")
    exs = _examples(6, seed=2)
    seen: list[str] = []

    def progress(fraction: float, message: str) -> None:
        seen.append(message)
        if message.startswith("evaluation: 1/"):
            raise CancelledError("the analysis")

    with pytest.raises(CancelledError):
        circuits_on_set(loaded, exs, ig_steps=2, bootstrap=2, random=1, progress=progress)
    assert not any(m.startswith("evaluation: 2/") for m in seen)
    assert any("gradient rows" in m for m in seen)
    with pytest.raises(CancelledError):
        circuits_on_set(loaded, exs, ig_steps=2, should_stop=lambda: True)


def _plain_patched(p, index, masks):
    """The straightforward evaluation: every node of every circuit recomputed (``SplitModel.patched``)."""
    out = np.zeros((masks.shape[0], len(index)))
    mask_t = torch.as_tensor(masks, dtype=p.x0_c[0].dtype)
    for col, i in enumerate(index):
        n = p.x0_c[i].shape[0]
        k, _ = ss.plain_runs(p, [i])
        logits = p.model.patched(k, p.x0_c[i], mask_t, p.kwargs[n])
        out[:, col] = (logits[:, p.answer[i]] - logits[:, p.wrong[i]]).numpy()
    return out


@pytest.mark.parametrize("fam", (*DECODER_FAMILIES, "gpt2"))
def test_the_sparse_evaluation_is_the_plain_one(lms, fam, monkeypatch):
    """Pruned circuits, active nodes only, the sparse mix, the corrupted and clean runs reused: the
    same metrics as recomputing every node, at every MIB size, ranked and random circuits. The large
    arrays are buffers reused from call to call: here each is handed out filled with NaN, so a slot
    that a call does not write would show."""
    handed, buffer = [], pp.buffer

    def nan_buffer(work, name, numel, like):
        got = buffer(work, name, numel, like)
        handed.append((name, got.data_ptr()))
        return got.fill_(float("nan"))

    monkeypatch.setattr(pp, "buffer", nan_buffer)
    kinds: dict[str, int] = {"sparse": 0, "dense": 0}  # the mix's two products both ran
    coo, baddbmm = torch.sparse_coo_tensor, torch.baddbmm

    def counted(kind, fn):
        def call(*args, **kwargs):
            kinds[kind] += 1
            return fn(*args, **kwargs)

        return call

    monkeypatch.setattr(torch, "sparse_coo_tensor", counted("sparse", coo))
    monkeypatch.setattr(torch, "baddbmm", counted("dense", baddbmm))
    loaded = _load(lms, fam)
    exs = _examples(4, seed=7)
    p = ss.prepare(loaded, exs)
    E = p.model.graph.n_edges
    rng = np.random.default_rng(0)
    scores = rng.normal(size=E)
    sizes = [ss.size_of(k, E) for k in ss.MIB_SIZES]
    orders = [np.argsort(-scores), np.argsort(-np.abs(scores))]
    orders += [rng.permutation(E) for _ in range(3)]
    masks = np.concatenate([ss.top_masks(o, sizes, E) for o in orders])
    masks = np.concatenate([masks, np.zeros((1, E), dtype=bool)])
    index = list(range(len(exs)))
    got, m_c, m_k = ss.patched_metrics(p, index, masks)
    assert kinds["sparse"] and kinds["dense"], kinds
    want = _plain_patched(p, index, masks)
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() < 1e-10 * scale
    assert np.array_equal(got[-1], m_k)  # the empty circuit: the corrupted run itself
    # some circuits were pruned to nothing (the corrupted run), some were not
    coupled = any(part.post_attn is not None for part in p.model.parts)  # Gemma 2/3
    assert coupled == (fam in ("gemma2", "gemma3_text"))
    how = plan(p.model.graph, masks, coupled)
    assert how.empty.any() and not how.empty.all() and how.full.sum() == len(orders)
    assert (how.masks <= masks).all() and how.masks.sum() < masks.sum()
    # some feed-forwards ran at the last position only (no path to the logits through a key/value)
    assert how.last.any() and (how.last <= how.active).all() and not how.last[how.active].all()
    # the changes' array was reused from example to example, not allocated anew
    deltas = [ptr for name, ptr in handed if name == "delta"]
    assert len(deltas) >= len(index) and len(set(deltas)) < len(deltas)


def test_spans_are_the_runs_of_rows_and_the_gaps_between():
    runs, gaps = pp.spans(torch.tensor([1, 2, 3, 6, 8, 9]), 12)
    assert runs == [(0, 1, 4), (3, 6, 7), (4, 8, 10)]  # (index in rows, first row, end)
    assert gaps == [(0, 1), (4, 6), (7, 8), (10, 12)]
    assert pp.spans(torch.tensor([0, 1]), 2) == ([(0, 0, 2)], [])
    assert pp.spans(torch.tensor([], dtype=torch.long), 3) == ([], [(0, 3)])
    assert pp.spans(torch.arange(0, 20, 2), 20) is None  # more than 8 runs: a gathered copy


def test_a_buffer_is_reused_and_grows():
    work: dict[str, torch.Tensor] = {}
    like = torch.zeros(1, dtype=torch.float64)
    a = pp.buffer(work, "x", 10, like)
    b = pp.buffer(work, "x", 6, like)
    assert b.numel() == 6 and b.data_ptr() == a.data_ptr()  # the same storage
    c = pp.buffer(work, "x", 20, like)
    assert c.numel() == 20 and work["x"].numel() == 20
    assert pp.buffer(work, "x", 5, like.float()).dtype == torch.float32
    assert pp.buffer(None, "x", 3, like).numel() == 3  # no dict: a new tensor


def test_the_evaluation_runs_in_bfloat16(lms):
    """Half precision has no sparse product on the CPU: every mix is dense, and the metrics follow
    the float32 ones."""
    exs = _examples(2, seed=7)
    got = {}
    for dtype in ("float32", "bfloat16"):
        loaded = load_model("lm-llama", catalogue=lms, dtype=dtype, device="cpu")
        p = ss.prepare(loaded, exs)
        E = p.model.graph.n_edges
        order = np.random.default_rng(0).permutation(E)
        masks = ss.top_masks(order, [ss.size_of(k, E) for k in ss.MIB_SIZES], E)
        got[dtype] = ss.patched_metrics(p, [0, 1], masks)[0]
    scale = float(np.abs(got["float32"]).max())
    assert np.abs(got["bfloat16"] - got["float32"]).max() < 0.1 * scale
