"""The atlas' causal evidence (docs/atlas.md) equals independent ablation runs on a tiny decoder: the
repeated-half loss through the causal view's own ablation, the induction heads' summed score through
a plain hook and the definition written out."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from workers.analyses.atlas.evidence import add_evidence, attribution
from workers.analyses.atlas.probe import make_probe
from workers.analyses.atlas.run import AtlasSettings, atlas
from workers.analyses.causal.interventions import ablation
from workers.analyses.causal.views import stream
from workers.models import load_model
from workers.models.adapters import Encoded, watch_attention
from workers.models.sublayers import locate

pytestmark = pytest.mark.usefixtures("one_torch_thread", "catalogue")
R = 10


def _records(loaded: Any) -> list[dict[str, Any]]:
    """Layer 1's heads labelled induction, layer 0's previous-token (by hand: what is checked is the
    evidence, whatever the labels)."""
    labels = {0: "previous-token", 1: "induction"}
    return [
        {"layer": layer, "head": head, "label": labels.get(layer), "evidence": {}}
        for layer in range(loaded.n_layers)
        for head in range(loaded.n_heads)
    ]


def _induction_sum(loaded: Any, ids: list[int], layer: int, head: int) -> float:
    """Layer 1's summed induction score on ``ids`` with head (layer, head) replaced by its mean over
    the positions (zero heads: nothing ablated), by a plain pre-hook and the definition's loop."""
    run = stream(loaded, Encoded(ids, [""] * len(ids), [], [False] * len(ids)))
    dh = run.contexts[0].shape[-1] // loaded.n_heads
    mean = run.contexts[layer][:, head * dh : (head + 1) * dh].mean(0)

    def pre(module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        z = args[0].clone()
        z[:, :, head * dh : (head + 1) * dh] = mean
        return (z, *args[1:])

    maps: dict[int, torch.Tensor] = {}
    handle = locate(loaded).layers[layer].context_module.register_forward_pre_hook(pre)
    try:
        with watch_attention(loaded, lambda i, w: maps.__setitem__(i, w[0])), torch.no_grad():
            loaded.model(input_ids=torch.tensor([ids]))
    finally:
        handle.remove()
    a = maps[1]
    return float(
        sum(a[h, R + t, t + 1] for h in range(loaded.n_heads) for t in range(1, R)) / (R - 1)
    )


def test_the_evidence_equals_independent_ablation_runs() -> None:
    loaded = load_model("tiny-gpt2", device="cpu")
    assert loaded.has_lm_head and loaded.causal
    probe = make_probe(loaded, random_seqs=3, random_len=R, seed=0)
    assert probe.offset == 0
    heads = _records(loaded)
    summary = add_evidence(loaded, probe, heads, seqs=1, exact_all=True)
    ids = probe.ids[0].tolist()
    enc = Encoded(ids, [""] * len(ids), [], [False] * len(ids))
    rises = []
    for layer in range(loaded.n_layers):
        for head in range(loaded.n_heads):
            effect = ablation(loaded, enc, heads=[(layer, head)], mode="mean")["effect"]
            # the loss of token p sits at p - 1: the repeat's tokens R+1..2R-1 at R..2R-2
            rises.append(-float(np.mean(effect[R : 2 * R - 1])))
    got = np.asarray(summary["loss_rise"]["map"]).reshape(-1)
    np.testing.assert_allclose(got, rises, atol=5e-5)
    base = _induction_sum(loaded, ids, 0, 0)  # layer 0 head 0 ablated
    for head in range(loaded.n_heads):
        record = heads[head]  # layer 0: previous-token
        ref = _induction_sum(loaded, ids, 0, head)
        unablated = summary["base_induction_sum"]
        assert record["evidence"]["induction_fall"] == pytest.approx(unablated - ref, abs=5e-5)
    assert base == pytest.approx(unablated - heads[0]["evidence"]["induction_fall"], abs=5e-5)
    for h in heads[loaded.n_heads :]:  # layer 1: induction
        i = h["layer"] * loaded.n_heads + h["head"]
        assert h["evidence"]["loss_rise"] == pytest.approx(rises[i], abs=5e-5)
        assert h["evidence"]["rank"] == 1 + sum(r > rises[i] for r in rises)
    assert "every head, one at a time" in summary["method"]
    assert summary["sequences"] == 1 and summary["induction_heads"] == [[1, h] for h in range(4)]


def test_the_atlas_carries_the_evidence_of_a_decoder_and_none_for_an_encoder() -> None:
    settings = AtlasSettings(random_seqs=3, random_len=R, bootstrap=20, evidence_seqs=2)
    texts = ["The cat sat on the mat.", "A head reads the text."]
    res = atlas(load_model("tiny-gpt2", device="cpu"), settings, texts=texts)
    assert res["evidence"]["sequences"] == 2 and res["loss_repeated"]["repeated"] > 0
    res = atlas(load_model("tiny-bert", device="cpu"), settings, texts=texts)
    assert res["evidence"] is None and res["loss_repeated"] is None
    assert all(h["evidence"] == {} for h in res["heads"])


def test_by_default_the_labelled_heads_are_ablated_exactly_and_the_rest_estimated() -> None:
    loaded = load_model("tiny-gpt2", device="cpu")
    probe = make_probe(loaded, random_seqs=2, random_len=R, seed=1)
    exact_heads, estimated_heads = _records(loaded), _records(loaded)
    exact = add_evidence(loaded, probe, exact_heads, seqs=2, exact_all=True)
    mixed = add_evidence(loaded, probe, estimated_heads, seqs=2)
    assert "attribution patching" in mixed["method"] and mixed["exact_all"] is False
    assert len(mixed["exact_heads"]) == 8  # every head is labelled here
    for a, b in zip(exact_heads, estimated_heads, strict=True):
        key = "loss_rise" if a["label"] == "induction" else "induction_fall"
        assert b["evidence"][key] == pytest.approx(a["evidence"][key], abs=5e-5)
    # the estimates of the heads not ablated exactly: first order, within a tenth of the largest
    est = attribution(loaded, probe.ids[:2], length=R, offset=0, induction_heads=[])["loss_rise"]
    ref = np.asarray(exact["loss_rise"]["map"])
    assert np.abs(ref).max() > 0
    np.testing.assert_allclose(est, ref, atol=0.1 * np.abs(ref).max())
