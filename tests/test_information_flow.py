"""Information flow routes (issue 30, SPEC 12) on tiny random models of every family, float64: the parts
of each update add up to the model's own update, importances are fractions summing to 1 (and match a
plain per-query reference computed from the dense parts), the graph hangs together from the chosen
position, a higher threshold keeps a subset of the edges, and each edge's heads add up to it."""

from __future__ import annotations

import pytest
import torch
from tiny_models import DECODER_FAMILIES, build_tiny_bert, build_tiny_decoder, build_tiny_gpt2

from workers.analyses.circuits import information_flow as flow_mod
from workers.analyses.circuits.flow_terms import layer_steps, run_layers
from workers.analyses.circuits.information_flow import information_flow, layer_flow, proximity
from workers.core.errors import HeadscopeError, OutOfRangeError
from workers.models import Catalogue, ModelSpec, load_model
from workers.models.adapters import encode
from workers.models.sublayers import locate

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FAMILIES = (*DECODER_FAMILIES, "gpt2", "bert")
TEXT = "The head of the model is in the text and the word is of the token"


@pytest.fixture(scope="module")
def cat(tmp_path_factory: pytest.TempPathFactory) -> Catalogue:
    base = tmp_path_factory.mktemp("flow")
    out = Catalogue()
    for fam in FAMILIES:
        if fam == "bert":
            path = build_tiny_bert(base / fam)
        elif fam == "gpt2":
            path = build_tiny_gpt2(base / fam)
        else:
            path = build_tiny_decoder(base / fam, fam, layers=3)
        out.register(ModelSpec(f"flow-{fam}", "local", str(path)))
    return out


def _load(cat: Catalogue, fam: str):
    return load_model(f"flow-{fam}", catalogue=cat, dtype="float64", device="cpu")


@pytest.mark.parametrize("fam", FAMILIES)
def test_parts_add_up_to_each_update(cat: Catalogue, fam: str) -> None:
    m = _load(cat, fam)
    enc = encode(m, TEXT)
    steps = layer_steps(m, enc)
    assert len(steps) == m.n_layers
    for layer, s in enumerate(steps):
        att, ffs = s["attention"], s["feedforward"]
        rebuilt = att.resid + s["tokens"].sum(1) + att.bias  # [query, d]
        scale = float(s["mid"].abs().max())
        assert float((rebuilt - s["mid"]).abs().max()) < 1e-10 * max(1.0, scale), (fam, layer)
        assert float((s["heads"].sum(2) - s["tokens"]).abs().max()) < 1e-12 * max(1.0, scale), (
            fam,
            layer,
        )
        assert float((ffs.resid + ffs.ff + ffs.bias - s["out"]).abs().max()) < 1e-10 * max(
            1.0, scale
        ), (fam, layer)
        if m.causal:  # a query reads no later key
            n = enc.n
            later = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
            assert float(s["tokens"][later].abs().max()) == 0.0
        # the parts are not trivially the whole: more than one token contributes somewhere
        assert int((s["tokens"].abs().sum(-1) > 0).sum(1).max()) > 1


def _reference(s: dict, i: int) -> tuple[torch.Tensor, float, float]:
    """Plain importances of query i's attention parts: tokens [key], residual, bias."""
    att = s["attention"]
    parts = torch.cat([s["tokens"][i], att.resid[i][None], att.bias[i][None]])  # [key + 2, d]
    whole = parts.sum(0)
    p = torch.stack([proximity(whole, z) for z in parts])
    p = p / p.sum()
    return p[:-2], float(p[-2]), float(p[-1])


@pytest.mark.parametrize("fam", ["llama", "gemma3_text", "gpt_neox", "bert"])
def test_importances_are_fractions_and_match_the_reference(
    cat: Catalogue, fam: str, monkeypatch
) -> None:
    m = _load(cat, fam)
    enc = encode(m, TEXT)
    arch = locate(m)
    steps = layer_steps(m, enc)
    monkeypatch.setattr(
        flow_mod, "CHUNK_BYTES", 1
    )  # one query per chunk: the chunking is exercised
    flows = []
    run_layers(
        m,
        enc,
        lambda layer, rec: flows.append(
            layer_flow(rec, arch.layers[layer], m.n_heads, threshold=0.0, causal=m.causal)
        ),
    )
    n = enc.n
    for s, f in zip(steps, flows, strict=True):
        assert sorted(f.attn) == list(range(n))
        dense = torch.zeros(n, n, dtype=torch.float64)
        for i, row in f.attn.items():
            dense[i, row.cols] = torch.tensor(row.values, dtype=torch.float64)
            heads = torch.tensor(row.heads, dtype=torch.float64)  # [edge, H]
            assert float(heads.min()) >= 0.0
            assert torch.allclose(
                heads.sum(1), torch.tensor(row.values, dtype=torch.float64), atol=1e-12
            )
        resid = torch.tensor([f.attn[i].resid for i in range(n)], dtype=torch.float64)
        bias = torch.tensor([f.attn[i].bias for i in range(n)], dtype=torch.float64)
        assert float(dense.min()) >= 0.0 and float(dense.max()) <= 1.0
        assert torch.allclose(
            dense.sum(1) + resid + bias, torch.ones(n, dtype=torch.float64), atol=1e-12
        )
        ff = torch.tensor([f.ff, f.ff_resid, f.ff_bias], dtype=torch.float64)
        assert float(ff.min()) >= 0.0 and torch.allclose(
            ff.sum(0), torch.ones(n, dtype=torch.float64), atol=1e-12
        )
        for i in (0, n // 2, n - 1):
            tok, res, b = _reference(s, i)
            assert torch.allclose(dense[i], tok, atol=1e-12)
            assert abs(float(resid[i]) - res) < 1e-12 and abs(float(bias[i]) - b) < 1e-12


def _reachable(result: dict) -> tuple[set[str], set[int]]:
    """Nodes reached from the top node down the edges (target -> source) and the edges used."""
    top = next(
        nd["id"]
        for nd in result["nodes"]
        if nd["kind"] == "state"
        and nd["position"] == result["position"]
        and nd["layer"] == max(x["layer"] for x in result["nodes"] if x["kind"] == "state")
    )
    into: dict[str, list[int]] = {}
    for k, e in enumerate(result["edges"]):
        into.setdefault(e["target"], []).append(k)
    seen, used, todo = {top}, set(), [top]
    while todo:
        v = todo.pop()
        for k in into.get(v, []):
            used.add(k)
            u = result["edges"][k]["source"]
            if u not in seen:
                seen.add(u)
                todo.append(u)
    return seen, used


@pytest.mark.parametrize("fam", ["llama", "gemma2", "gpt2", "bert"])
def test_graph_hangs_from_the_position_and_thresholds_nest(cat: Catalogue, fam: str) -> None:
    m = _load(cat, fam)
    enc = encode(m, TEXT)
    position = enc.n - 1 if m.causal else 3
    results = {
        t: information_flow(m, enc, position=position, threshold=t) for t in (0.001, 0.04, 0.3)
    }
    for t, r in results.items():
        assert r["position"] == position and r["threshold"] == t
        ids = {nd["id"] for nd in r["nodes"]}
        seen, used = _reachable(r)
        assert seen == ids and used == set(range(len(r["edges"])))  # everything hangs from X[L]_p
        assert f"X{m.n_layers}_{position}" in ids
        for e in r["edges"]:
            assert t <= e["importance"] <= 1.0
            if m.causal:
                assert e["from"] <= e["to"] <= position
            if e["kind"] == "attention":
                assert len(e["heads"]) == m.n_heads
                assert abs(sum(e["heads"]) - e["importance"]) < 1e-12
    key = lambda r: {(e["source"], e["target"], e["kind"]): e["importance"] for e in r["edges"]}  # noqa: E731
    lo, mid, hi = key(results[0.001]), key(results[0.04]), key(results[0.3])
    assert set(hi) <= set(mid) <= set(lo) and len(hi) < len(lo)
    # an edge both graphs keep has the same importance, computed again: the top-down pass computes
    # only the queries a threshold reaches, in chunks of another height, and a row of a matrix product
    # need not equal itself in a batch of another height (docs/models.md, "Precision"; MKL's AVX-512
    # code differs here in the last bits), so to 1e-12 as the eager pass below, not ==
    assert all(abs(lo[k] - v) <= 1e-12 for k, v in mid.items())


@pytest.mark.parametrize("fam", ["qwen2", "bert"])
def test_top_down_graph_equals_every_query_computed(cat: Catalogue, fam: str, monkeypatch) -> None:
    """The top-down pass (only the reached queries) and the in-forward pass (every query, used when
    the layers' records would not fit ``KEEP_BYTES``) give the same graph; the thread count is kept."""
    m = _load(cat, fam)
    enc = encode(m, TEXT)
    torch.set_num_threads(
        2
    )  # the top-down pass runs on one thread and gives the caller's count back
    lazy = information_flow(m, enc, threshold=1e-4)
    assert torch.get_num_threads() == 2
    torch.set_num_threads(1)
    monkeypatch.setattr(flow_mod, "KEEP_BYTES", 0)
    eager = information_flow(m, enc, threshold=1e-4)
    assert lazy["top_down"] and not eager["top_down"]
    assert [(e["source"], e["target"], e["kind"]) for e in lazy["edges"]] == [
        (e["source"], e["target"], e["kind"]) for e in eager["edges"]
    ]
    for a, b in zip(lazy["edges"], eager["edges"], strict=True):
        assert abs(a["importance"] - b["importance"]) < 1e-12
        assert torch.allclose(
            torch.tensor(a.get("heads", [])), torch.tensor(b.get("heads", [])), atol=1e-12
        )
    assert [nd["id"] for nd in lazy["nodes"]] == [nd["id"] for nd in eager["nodes"]]
    assert any(e["kind"] == "attention" for e in lazy["edges"])


def test_encoder_default_position_and_bad_input(cat: Catalogue) -> None:
    m = _load(cat, "bert")
    enc = encode(m, TEXT)
    assert information_flow(m, enc)["position"] == 0  # [CLS]
    with pytest.raises(OutOfRangeError, match="out of range"):
        information_flow(m, enc, position=enc.n)
    for t in (0.0, 1.0, -0.1):
        with pytest.raises(HeadscopeError, match="between 0 and 1"):
            information_flow(m, enc, threshold=t)
