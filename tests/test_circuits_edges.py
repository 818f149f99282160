"""Edge attribution (issue 30, SPEC 12) on tiny random decoders of every family, float64: the split forward
is the model's own, the edge-patched run with every edge is the clean run and with none the corrupted run,
a head patched through the edges is `patching`'s head, EAP is the first order of the edge-patched run (a
finite difference along one edge), EAP-IG's steps integrate the metric's change."""

from __future__ import annotations

import json

import numpy as np
import pytest
import test_circuits
import torch
from tiny_models import DECODER_FAMILIES

from workers.analyses.causal.interventions import patching
from workers.analyses.circuits.attribution_patching import capture
from workers.analyses.circuits.edges import default_sizes, edge_attribution, prune
from workers.analyses.circuits.graph import Graph, Plain, SplitModel
from workers.core.errors import HeadscopeError
from workers.models import Catalogue, load_model
from workers.models.adapters import encode

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FAMILIES = (*DECODER_FAMILIES, "gpt2")
CLEAN, CORRUPTED = test_circuits.CLEAN, test_circuits.CORRUPTED
lms = test_circuits.lms  # the tiny models of every family (one session fixture for both modules)


class Setup:
    """A model's split forward with the clean and corrupted runs (rows [K, C]) and the metric's pair."""

    def __init__(self, cat: Catalogue, fam: str):
        self.loaded = load_model(f"lm-{fam}", catalogue=cat, dtype="float64", device="cpu")
        self.c, self.k = encode(self.loaded, CLEAN), encode(self.loaded, CORRUPTED)
        self.model = SplitModel(self.loaded)
        self.g = self.model.graph
        self.x0_c, self.kwargs = self.model.capture(self.c)
        self.x0_k, _ = self.model.capture(self.k)
        with torch.no_grad():
            self.both = self.model.plain(torch.stack([self.x0_k, self.x0_c]), self.kwargs)
        self.base = Plain(
            *(t[:1] for t in (self.both.writers, self.both.resid, self.both.mid, self.both.logits))
        )
        self.target = (
            capture(self.loaded, self.c, grad=False).logits.topk(2).indices.tolist()
        )  # the clean run's two best

    def metric(self, logits: torch.Tensor) -> np.ndarray:
        a, b = self.target
        return (logits[:, a] - logits[:, b]).double().numpy()

    def patched(self, masks: np.ndarray) -> np.ndarray:
        return self.metric(
            self.model.patched(
                self.base, self.x0_c, torch.as_tensor(masks, dtype=torch.float64), self.kwargs
            )
        )


def _up_to(g: Graph, layer: int) -> np.ndarray:
    """Every edge's source, target and whether both lie below ``layer`` (writer index order)."""
    src, tgt, _ = g.edges_of(np.arange(g.n_edges))
    return src, tgt, (src < g.up_heads(layer)) & (tgt < g.up_heads(layer))


def node_mask(g: Graph, layer: int, head: int) -> np.ndarray:
    """The circuit that patches head (layer, head) alone, as `patching` does: every edge among the nodes
    below its layer and into the head (so it reads the clean run), every edge out of it, and every edge
    among the nodes it can change (so its change reaches the logits); none from below into the others."""
    src, tgt, below = _up_to(g, layer)
    h = g.head(layer, head)
    low = src < g.up_heads(layer)
    return (below | (low & (tgt == h)) | (src == h) | (~low & (src != h))).astype(np.float64)


@pytest.mark.parametrize("fam", FAMILIES)
def test_edge_patched_run_is_exact(lms, fam):
    s = Setup(lms, fam)
    hf_k = capture(s.loaded, s.k, grad=False).logits  # the model's own forward
    hf_c = capture(s.loaded, s.c, grad=False).logits
    scale = float(hf_c.abs().max())
    # the split forward is the model's forward, and its writers add up to the stream
    assert float((s.both.logits[0] - hf_k).abs().max()) < 1e-10 * scale
    assert float((s.both.logits[1] - hf_c).abs().max()) < 1e-10 * scale
    assert torch.allclose(s.both.writers.sum(1), s.both.resid[:, -1], atol=1e-12)
    ones, zeros = np.ones(s.g.n_edges), np.zeros(s.g.n_edges)
    logits = s.model.patched(s.base, s.x0_c, torch.as_tensor(np.stack([ones, zeros])), s.kwargs)
    assert float((logits[0] - hf_c).abs().max()) < 1e-10 * scale  # every edge: the clean run
    assert float((logits[1] - hf_k).abs().max()) < 1e-10 * scale  # none: the corrupted run
    # a head patched through its edges is the head patched by `patching` (z from C at every position)
    pat = patching(s.loaded, s.c, s.k, target=s.target)
    m_c, m_k = pat["metric_clean"], pat["metric_corrupted"]
    L = s.g.n_layers
    heads = [
        (0, int(np.abs(pat["heads"][0]).argmax())),
        (L - 1, int(np.abs(pat["heads"][L - 1]).argmax())),
    ]
    got = s.patched(np.stack([node_mask(s.g, layer, h) for layer, h in heads]))
    want = np.asarray([pat["heads"][layer, h] for layer, h in heads])
    assert np.abs(want).max() > 1e-6
    assert np.allclose((got - m_k) / (m_c - m_k), want, atol=1e-10, rtol=0), (got, want)


def _one_edge(g: Graph, edge: int, eps: float) -> np.ndarray:
    """A circuit in which only edge ``edge`` (u -> v) carries a change, ``eps`` of ``u_C - u_K``, to all of v's
    consequences: every edge into u, its layer's heads and the writers before (u reads the clean run,
    ``u* = u_C``, even where a post-norm couples a layer's heads), and every edge out of v's layer on."""
    src, tgt, _ = g.edges_of(np.arange(g.n_edges))
    u, v = int(src[edge]), int(tgt[edge])
    layer_u, slot_u = divmod(u - 1, g.n_heads + 1)
    clean_end = g.ff(layer_u) - 1 if u > 0 and slot_u < g.n_heads else u
    layer_v, slot_v = divmod(v - 1, g.n_heads + 1)
    if v == g.n_writers:
        after = v
    else:
        after = g.ff(layer_v) if slot_v == g.n_heads else g.up_heads(layer_v)
    mask = ((tgt <= clean_end) | (src >= after)).astype(np.float64)
    mask[edge] = eps
    return mask


@pytest.mark.parametrize("fam", FAMILIES)
def test_eap_is_the_first_order_of_the_edge_patched_run(lms, fam):
    s = Setup(lms, fam)
    eap = edge_attribution(
        s.loaded,
        s.c,
        s.k,
        target=s.target,
        ig_steps=1,
        top_edges=s.g.n_edges,
        all_edges=True,
        curve_sizes=[1],
    )
    assert eap["method"] == "EAP" and len(eap["edges"]) == s.g.n_edges == eap["n_edges"]
    m_c, m_k = eap["metric_clean"], eap["metric_corrupted"]
    index = {(e["source"], e["target"], e["input"]): i for i, e in enumerate(eap["edges"])}
    flat_src, flat_tgt, flat_inp = s.g.edges_of(np.arange(s.g.n_edges))
    ids = [s.g.writer_id(w) for w in range(s.g.n_writers)] + ["logits"]
    inputs = {0: "q", 1: "k", 2: "v", -1: None}
    # the largest edge of each kind of input, from the input and from a head
    picks = {}
    for e in range(s.g.n_edges):
        key = (
            flat_src[e] == 0,
            inputs[int(flat_inp[e])] if flat_tgt[e] != s.g.n_writers else "logits",
        )
        score = eap["edges"][index[(ids[flat_src[e]], ids[flat_tgt[e]], inputs[int(flat_inp[e])])]][
            "score"
        ]
        if key not in picks or abs(score) > abs(picks[key][1]):
            picks[key] = (e, score)
    picks = {
        key: pick for key, pick in picks.items() if abs(pick[1]) > 1e-9
    }  # input -> logits: 0 (same last token)
    assert len(picks) >= 8  # q, k, v, feed-forward and logits edges, from the input and from heads
    for key, (e, score) in picks.items():
        errors = []
        for eps in (1e-1, 1e-2, 1e-3):  # central differences: the error falls as eps^2
            up, down = s.patched(np.stack([_one_edge(s.g, e, eps), _one_edge(s.g, e, -eps)]))
            errors.append(abs((up - down) / (2 * eps) / (m_c - m_k) / score - 1))
        # the value, at the step where truncation (eps^2) and rounding (the metric's float64 rounding,
        # ~1e-16, over 2·eps·|score|·|m_C - m_K|) are both small: 1e-1 for the weakest edges (from a
        # head into a query: rounding dominates below), 1e-3 for the most curved
        assert min(errors) < 1e-4, (key, errors)
        # shrink the step, the ratio goes to 1: from 1e-1 to 1e-2, where the rounding is at most ~1e-6
        # (docs/models.md, "Precision")
        assert errors[1] < errors[0] or errors[0] < 1e-4, (key, errors)


@pytest.mark.parametrize("fam", ["llama", "gpt_neox"])
def test_eap_ig_steps_integrate_the_metric(lms, fam):
    """EAP-IG with k = 1 is EAP (its gradient at K, checked above); with k steps the input's edges sum to the
    left Riemann sum of dm/dα along the path from K to C, which tends to the whole change m_C - m_K."""
    s = Setup(lms, fam)
    sums, first = [], {}
    for k in (1, 4, 16):
        out = edge_attribution(
            s.loaded,
            s.c,
            s.k,
            target=s.target,
            ig_steps=k,
            top_edges=s.g.n_edges,
            all_edges=True,
            curve_sizes=[1],
        )
        assert out["method"] == ("EAP" if k == 1 else "EAP-IG") and out["ig_steps"] == k
        sums.append(sum(e["score"] for e in out["edges"] if e["source"] == "input"))
        first[k] = {(e["source"], e["target"], e["input"]): e["score"] for e in out["edges"]}
    errors = [abs(x - 1) for x in sums]
    assert errors[2] < errors[0] and errors[2] < 0.1, sums
    assert first[1] != first[4]  # the steps change the scores


def test_prune_keeps_paths_from_input_to_logits():
    g = Graph(2, 1, False)  # writers: 0 input, 1 L0H0, 2 FF0, 3 L1H0, 4 FF1; node 5 the logits
    src = np.asarray([0, 1, 3, 0, 2])
    tgt = np.asarray([1, 5, 5, 4, 3])
    # input->L0H0->logits is a path; FF0->L1H0->logits has no way in; input->FF1 leads nowhere
    assert prune(g, src, tgt).tolist() == [True, True, False, False, False]
    src2, tgt2 = np.append(src, 1), np.append(tgt, 2)  # L0H0->FF0 opens FF0->L1H0->logits
    assert prune(g, src2, tgt2).tolist() == [True, True, True, False, True, True]


def test_graph_layout():
    for parallel in (False, True):
        g = Graph(3, 2, parallel)
        src, tgt, inp = g.edges_of(np.arange(g.n_edges))
        assert (
            len(set(zip(src.tolist(), tgt.tolist(), inp.tolist(), strict=True))) == g.n_edges
        )  # one index per edge
        assert (src < tgt).all()  # forward order
        for layer in range(3):
            into_ff = src[tgt == g.ff(layer)]
            assert set(into_ff.tolist()) == set(range(g.up_ff(layer)))
            assert g.head(layer, 1) in into_ff.tolist() or parallel
        assert set(src[tgt == g.n_writers].tolist()) == set(range(g.n_writers))
        assert sum(g.counts().values()) == g.n_edges
    smol = Graph(30, 9, False)  # SmolLM2-135M: ~10^5 edges with q/k/v apart
    assert (
        smol.n_edges
        == 3 * 9 * sum(1 + 10 * i for i in range(30)) + sum(10 + 10 * i for i in range(30)) + 301
    )
    assert 1e5 < smol.n_edges < 1.5e5
    assert (
        default_sizes(smol.n_edges)[0] == round(0.001 * smol.n_edges)
        and len(default_sizes(smol.n_edges)) == 12
    )


def test_result_shape_and_refusals(lms):
    s = Setup(lms, "qwen2")
    flags = [p.requires_grad for p in s.loaded.model.parameters()]
    out = edge_attribution(
        s.loaded, s.c, s.k, target=s.target, top_edges=30, curve_sizes=[5, 10, s.g.n_edges]
    )
    json.dumps(out)
    params = list(s.loaded.model.parameters())  # weights as they were, and no gradient left on them
    assert [p.requires_grad for p in params] == flags and all(p.grad is None for p in params)
    assert [n["id"] for n in out["nodes"]][:2] == ["input", "L0H0"] and out["nodes"][-1][
        "id"
    ] == "logits"
    assert len(out["edges"]) == 30 and not out["all_edges"]
    mags = [abs(e["score"]) for e in out["edges"]]
    assert mags == sorted(mags, reverse=True)
    ids = {n["id"] for n in out["nodes"]}
    assert all(e["source"] in ids and e["target"] in ids for e in out["edges"])
    assert all((e["input"] in ("q", "k", "v")) == e["target"].startswith("L") for e in out["edges"])
    circ = out["circuit"]
    assert circ["n_top"] == 30 and circ["n_edges"] == len(circ["edges"]) <= 30
    assert {out["edges"][i]["source"] for i in circ["edges"]} <= set(circ["nodes"])
    assert [n for n, _ in out["curve"]] == [5, 10, s.g.n_edges] == out["curve_sizes"]
    assert abs(out["curve"][-1][1] - 1) < 1e-10  # every edge: the clean run
    # the one curve circuit past the 30 listed edges comes with its strongest edges
    from workers.analyses.circuits.spec import CURVE_EDGES

    (big,) = out["curve_edges"]
    assert big["n_top"] == s.g.n_edges
    assert len(big["edges"]) == min(CURVE_EDGES, out["curve_kept"][-1])
    mags = [abs(e["score"]) for e in big["edges"]]
    assert mags == sorted(mags, reverse=True) and mags[0] == abs(out["edges"][0]["score"])
    assert out["scores_bytes"] == 8 * s.g.n_edges and out["scores_dtype"] == "float64"
    with pytest.raises(HeadscopeError, match="same length"):
        edge_attribution(s.loaded, s.c, encode(s.loaded, CLEAN + " of the"))
    with pytest.raises(HeadscopeError, match="top_edges"):
        edge_attribution(s.loaded, s.c, s.k, target=s.target, top_edges=0)
    with pytest.raises(HeadscopeError, match="curve sizes"):
        edge_attribution(s.loaded, s.c, s.k, target=s.target, curve_sizes=[s.g.n_edges + 1])
    cut = edge_attribution(
        s.loaded, s.c, s.k, target=s.target, top_edges=s.g.n_edges + 5, curve_sizes=[3]
    )
    assert (
        cut["top_edges"] == s.g.n_edges == len(cut["edges"])
    )  # N beyond the model's edges: all of them
