"""AtP node scores on a task set (docs/circuits.md, "Circuits on a task data set"), float64 on tiny random
decoders: on one example they are today's single-pair attribution patching (``attribution_patching``'s
``heads`` and ``feedforward``); batched by length they equal each example run alone, summed (1e-10); the
top list names the model's nodes."""

from __future__ import annotations

import numpy as np
import pytest
import test_circuits
from test_circuit_tasks import TINY_NAMES
from tiny_models import _decoder_tokenizer

from workers.analyses.causal.views import token_id
from workers.analyses.circuits.attribution_patching import attribution_patching
from workers.analyses.circuits.set_nodes import example_node_effects, node_scores
from workers.analyses.circuits.tasks import ioi
from workers.models import load_model
from workers.models.adapters import encode

pytestmark = pytest.mark.usefixtures("one_torch_thread")
lms = test_circuits.lms  # the tiny models of every family (one session fixture)


def _load(cat, fam):
    return load_model(f"lm-{fam}", catalogue=cat, dtype="float64", device="cpu")


@pytest.mark.parametrize("fam", ("llama", "gpt2"))
def test_one_example_is_the_single_pair_atp(lms, fam):
    loaded = _load(lms, fam)
    ex = ioi(_decoder_tokenizer(64), 3, 1, names=TINY_NAMES)[2]
    got = node_scores(loaded, [ex], [0])
    got = {**got, "heads": np.asarray(got["heads"]), "feedforward": np.asarray(got["feedforward"])}
    target = [token_id(loaded, ex.answer), token_id(loaded, ex.wrong)]
    atp = attribution_patching(
        loaded, encode(loaded, ex.clean), encode(loaded, ex.corrupted), target=target
    )
    scale = float(np.abs(atp["heads"]).max())
    assert scale > 0 and got["heads"].shape == (loaded.n_layers, loaded.n_heads)
    assert float(np.abs(got["heads"] - atp["heads"]).max()) < 1e-10 * scale
    assert float(np.abs(got["feedforward"] - atp["feedforward"]).max()) < 1e-10 * scale
    top = got["top"][0]
    assert abs(top["score"]) == max(np.abs(got["heads"]).max(), np.abs(got["feedforward"]).max())
    name = f"L{top['layer']}H{top['head']}" if top["kind"] == "head" else f"FF{top['layer']}"
    assert top["id"] == name


@pytest.mark.parametrize("fam", ("llama", "gemma3_text"))
def test_batched_effects_are_each_example_alone(lms, fam):
    loaded = _load(lms, fam)
    exs = ioi(_decoder_tokenizer(64), 7, 4, names=TINY_NAMES)
    assert len({len(encode(loaded, ex.clean).input_ids) for ex in exs}) > 1  # several lengths
    index = [5, 0, 3, 1, 6, 2]
    batched = example_node_effects(loaded, exs, index, rows=16)
    scale = float(np.abs(batched.heads).max())
    for row, i in enumerate(index):
        alone = example_node_effects(loaded, exs, [i], rows=1)
        assert float(np.abs(alone.heads[0] - batched.heads[row]).max()) < 1e-10 * scale
        assert float(np.abs(alone.feedforward[0] - batched.feedforward[row]).max()) < 1e-10 * scale
        assert abs(alone.m_clean[0] - batched.m_clean[row]) < 1e-10 * abs(batched.m_clean).max()
    summed = node_scores(loaded, exs, index)
    diff = (batched.m_clean - batched.m_corrupted).sum()
    assert np.allclose(
        np.asarray(summed["heads"]), batched.heads.sum(0) / diff, rtol=0, atol=1e-12 * scale
    )
    n_nodes = loaded.n_layers * (loaded.n_heads + 1)
    assert summed["n_examples"] == 6 and len(summed["top"]) == min(20, n_nodes)
