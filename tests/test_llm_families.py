"""Llama-family and GPT-NeoX models (issue 10): maps per query head, exact decomposition, streaming,
the memory estimate. Tiny random configs of every family, built here (offline, seconds)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import DECODER_FAMILIES, build_tiny_decoder

from workers import head_tsne, max_attention, mean_attention
from workers.analyses.decomposition import decompose, decompose_batch
from workers.engine.memory import MemoryBudgetError, ModelFacts, estimate_text_request
from workers.engine.pipeline import analyze
from workers.models import Catalogue, ModelSpec, load_model, run_text

TEXT = "The cat sat on the mat. The dog, who was tired, did not mind the cat at all."
SHORT = "A short one."
TOL = {"float32": 1e-4, "float64": 1e-9}
FAST = {"n_iter": 100, "early_exaggeration_iter": 50}


@pytest.fixture(scope="module")
def families(tmp_path_factory: pytest.TempPathFactory) -> Catalogue:
    base = tmp_path_factory.mktemp("families")
    cat = Catalogue()
    for fam in DECODER_FAMILIES:
        cat.register(ModelSpec(f"tiny-{fam}", "local", str(build_tiny_decoder(base / fam, fam))))
    return cat


def _load(cat: Catalogue, fam: str, dtype: str = "float32"):
    return load_model(f"tiny-{fam}", catalogue=cat, dtype=dtype, device="cpu")


@pytest.mark.parametrize("fam", DECODER_FAMILIES)
def test_maps_per_query_head_equal_the_eager_weights(families, fam):
    loaded = _load(families, fam)
    run = run_text(loaded, TEXT)
    n = run.encoded.n
    assert loaded.family == fam and loaded.causal
    assert run.attentions.shape == (2, 4, n, n)  # 4 query heads, even where there are 2 kv heads
    assert loaded.n_kv_heads == (4 if fam == "gpt_neox" else 2)
    with torch.inference_mode():
        ids = torch.tensor([run.encoded.input_ids])
        out = loaded.model(
            input_ids=ids, attention_mask=torch.ones_like(ids), output_attentions=True
        )
    eager = torch.stack(out.attentions)[:, 0].numpy()
    np.testing.assert_array_equal(run.attentions, eager)
    assert np.abs(np.triu(run.attentions, k=1)).max() == 0.0  # causal: upper triangle exactly zero
    np.testing.assert_allclose(run.attentions.sum(-1), 1.0, atol=1e-5)
    assert run.tokens[0] == "<s>" and run.special[0] and not run.special[1:].any()  # BOS, the sink
    assert run.final_norm_in_last_state


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fam", DECODER_FAMILIES)
def test_decomposition_is_exact_on_every_state(families, fam, dtype):
    loaded = _load(families, fam, dtype)
    dec = decompose(loaded, TEXT)
    assert dec.max_abs_error.shape == (3,) and dec.max_abs_error.max() < TOL[dtype]
    assert str(dec.terms.dtype) == dtype and dec.final_norm_in_last_state
    # the states are the model's own (the last one re-normed in the model's dtype, as the model does)
    run = run_text(loaded, TEXT)
    same = 2e-6 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(dec.states, run.hidden_states, rtol=0, atol=same)
    assert dec.final_norm_deviation < same
    np.testing.assert_allclose(dec.importance.sum(-1), 1.0, atol=TOL[dtype])
    norms = np.linalg.norm(dec.terms[-1], axis=-1).mean(axis=-1)  # [term]
    assert (norms[:3] > 1e-2).all()  # input, attention and feed-forward all present
    assert (norms[3] > 1e-2) == (
        fam not in {"mistral", "phi3"}
    )  # no bias at all in these (RMSNorm, no biases)
    # per-head split: input + every head + every feed-forward + bias rebuilds the state
    parts, labels = dec.components(2, level="heads")
    assert labels.count("L1H3") == 1 and len(labels) == 1 + 2 * (4 + 1) + 1
    assert np.abs(parts.sum(0) - dec.states[2]).max() < TOL[dtype]


@pytest.mark.parametrize("fam", ["qwen2", "gpt_neox"])
def test_decomposition_of_a_padded_batch_matches_single_texts(families, fam):
    loaded = _load(families, fam, "float64")
    batch = decompose_batch(loaded, [SHORT, TEXT])
    assert batch[0].encoded.n < batch[1].encoded.n
    for text, dec in zip([SHORT, TEXT], batch, strict=True):
        single = decompose(loaded, text)
        assert dec.max_abs_error.max() < TOL["float64"]
        # float64 end to end (norms, softmax, rotary): batch and single agree on any CPU kernel set
        np.testing.assert_allclose(dec.terms, single.terms, rtol=0, atol=1e-12)
        np.testing.assert_allclose(dec.head_importance, single.head_importance, rtol=0, atol=1e-12)
        assert dec.final_norm_deviation < 1e-12  # the final norm is computed in float64 too


@pytest.mark.parametrize("fam", DECODER_FAMILIES)
def test_float64_maps_of_a_padded_batch_match_single_texts(families, fam):
    from workers.models.adapters import encode, watch_attention
    from workers.models.sublayers import batch_inputs

    loaded = _load(families, fam, "float64")
    encs = [encode(loaded, t) for t in (SHORT, TEXT)]
    maps: dict[int, torch.Tensor] = {}
    with (
        torch.inference_mode(),
        watch_attention(loaded, lambda layer, w: maps.__setitem__(layer, w)),
    ):
        out = loaded.model(**batch_inputs(loaded, encs), output_hidden_states=True)
    assert maps[0].dtype == torch.float64
    hidden = torch.stack(out.hidden_states).numpy()  # [state, batch, token, dim]
    for row, (text, enc) in enumerate(zip((SHORT, TEXT), encs, strict=True)):
        single = run_text(loaded, text)
        n = enc.n
        batch_maps = np.stack([maps[i][row, :, :n, :n].numpy() for i in range(len(maps))])
        np.testing.assert_allclose(batch_maps, single.attentions, rtol=0, atol=1e-12)
        np.testing.assert_allclose(hidden[:, row, :n], single.hidden_states, rtol=0, atol=1e-12)
        np.testing.assert_allclose(single.attentions.sum(-1), 1.0, rtol=0, atol=1e-12)


@pytest.mark.parametrize("fam", DECODER_FAMILIES)
def test_float32_forward_is_transformers_own_eager(families, fam):
    """headscope's dtype-keeping attention, norms and rotary compute exactly what transformers'
    eager model computes in float32 (same operations), bit for bit."""
    from transformers import AutoModel

    loaded = _load(families, fam)
    run = run_text(loaded, TEXT)
    plain = AutoModel.from_pretrained(
        families.get(f"tiny-{fam}").resolve(), attn_implementation="eager"
    )
    with torch.inference_mode():
        ids = torch.tensor([run.encoded.input_ids])
        out = plain.eval()(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            output_attentions=True,
            output_hidden_states=True,
        )
    np.testing.assert_array_equal(run.attentions, torch.stack(out.attentions)[:, 0].numpy())
    np.testing.assert_array_equal(run.hidden_states, torch.stack(out.hidden_states)[:, 0].numpy())


def test_causal_mean_runs_over_the_queries_that_see_the_key(families):
    run = run_text(_load(families, "llama"), TEXT)
    a, n = run.attentions, run.encoded.n
    mean = mean_attention(a, causal=True)
    j = 5
    np.testing.assert_allclose(mean[1, 2, j], a[1, 2, j:, j].mean(), rtol=1e-6)
    np.testing.assert_allclose(mean[..., -1], a[..., -1, -1], rtol=1e-6)  # the last key: one query
    assert mean.shape == (2, 4, n)
    np.testing.assert_array_equal(max_attention(a, causal=True), a.max(axis=2))


@pytest.mark.parametrize("fam", ["llama", "gpt_neox"])
def test_streamed_pass_equals_all_at_once(families, fam):
    loaded = _load(families, fam)
    res = analyze(loaded, TEXT, ["max-attention", "head-tsne"], {"drop_special": True, **FAST})
    run = run_text(loaded, TEXT)  # every layer's maps at once
    keep = ~run.special
    ma = res["max-attention"]
    assert ma["kept"] == list(range(1, run.encoded.n)) and ma["causal"]  # BOS hidden
    np.testing.assert_array_equal(
        np.asarray(ma["max_attention"]), max_attention(run.attentions, keep=keep)
    )
    np.testing.assert_allclose(
        np.asarray(ma["mean_attention"]),
        mean_attention(run.attentions, keep=keep, causal=True),
        rtol=1e-6,
    )
    from workers.analyses.tsne import TSNEOptions

    whole = head_tsne(run.attentions, keep=keep, options=TSNEOptions(**FAST))
    ht = res["head-tsne"]
    np.testing.assert_array_equal(np.asarray(ht["embedding"]), whole.embedding)
    np.testing.assert_array_equal(np.asarray(ht["kl"]), whole.kl)


def test_single_head_view_hidden_states_and_word_list(families):
    loaded = _load(families, "qwen3")
    res = analyze(loaded, TEXT, ["head-tsne", "hidden-tsne"], {"layer": 1, "head": 3, **FAST})
    run = run_text(loaded, TEXT)
    np.testing.assert_allclose(
        np.asarray(res["head-tsne"]["attention"]), run.attentions[1, 3], atol=1e-6
    )
    assert np.asarray(res["hidden-tsne"]["embedding"]).shape == (run.encoded.n, 2)
    words = analyze(loaded, "cat\ndog\nmat\nsat\ntired", ["word-tsne"], {"layer": 2, **FAST})[
        "word-tsne"
    ]
    assert words["pooling"] == "last"  # a decoder's last token has read the whole item


def test_robustness_streams_one_head(families):
    loaded = _load(families, "mistral")
    res = analyze(loaded, TEXT, ["robustness"], {"repeats": 2, "layer": 1, "head": 2, **FAST})[
        "robustness"
    ]
    assert (res["layer"], res["head"]) == (1, 2)
    assert len(res["head_tsne"]["disturbed"]["kl"]) == 2


def test_memory_estimate_refuses_before_any_work(families, setting):
    loaded = _load(families, "llama")
    calls = []
    handle = loaded.model.register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        setting("HEADSCOPE_MEMORY_BUDGET_GB", "0.00001")
        with pytest.raises(MemoryBudgetError) as info:
            analyze(loaded, TEXT, ["max-attention", "head-tsne"])
        msg = str(info.value)
        assert (
            "GiB of memory" in msg
            and "budget is 0.0 GiB" in msg
            and "HEADSCOPE_MEMORY_BUDGET_GB" in msg
        )
        assert info.value.code == "too_large" and calls == []  # refused before the forward pass
        setting("HEADSCOPE_MEMORY_BUDGET_GB", "4")
        analyze(loaded, TEXT, ["max-attention"])
        assert calls == [1]
    finally:
        handle.remove()


def test_memory_estimate_of_the_1b_shape():
    """Llama-3.2-1B's shape (16 layers, 32 query heads, d 2048, I 8192, 1.24 B parameters) at 2,048
    tokens: each view fits 24 GiB streamed; all heads' t-SNE at 4,096 tokens does not."""
    facts = ModelFacts(
        n_layers=16,
        n_heads=32,
        hidden=2048,
        intermediate=8192,
        n_params=1_235_814_400,
        dtype_bytes=4,
        head_dim=64,
    )
    budget = 24 * 2**30
    for kinds in (["max-attention"], ["decomposition"], ["head-tsne"]):
        est = estimate_text_request(facts, 2048, kinds, {"dtype": "float32"})
        assert est.total < budget, (kinds, est.total / 2**30)
        if kinds == ["max-attention"]:  # streamed: less than every layer's maps at once (8.6 GB)
            assert est.total - facts.n_params * 4 < 16 * 32 * 2048**2 * 4
    big = estimate_text_request(facts, 4096, ["head-tsne"], {})
    with pytest.raises(MemoryBudgetError, match="budget is 24.0 GiB"):
        big.check(budget)


def test_catalogue_lists_family_heads_and_limit(families):
    summary = families.get("tiny-qwen2").summary()
    assert summary["family"] == "qwen2" and summary["n_layers"] == 2
    assert summary["n_heads"] == 4 and summary["n_kv_heads"] == 2 and summary["max_tokens"] == 64
    from frontend.kit.page import model_label

    assert (
        model_label({"name": "tiny-qwen2", **summary})
        == "tiny-qwen2 — qwen2, 2x4 (2 kv), 64 tokens"
    )


def test_operator_catalogue_with_hub_ids(tmp_path: Path):
    import json

    path = tmp_path / "models.json"
    path.write_text(
        json.dumps(
            {
                "models": {
                    "llama-3.2-1b": {
                        "hub": "meta-llama/Llama-3.2-1B",
                        "description": "Llama 3.2 1B",
                    },
                    "pythia-160m": {"hub": "EleutherAI/pythia-160m"},
                    "tiny": {"path": str(tmp_path)},
                }
            }
        )
    )
    closed, open_ = Catalogue.from_file(path), Catalogue.from_file(path, allow_hub=True)
    assert closed.names_available() == [
        "gemma3-270m",
        "minilm",
        "smollm2",
        "tiny",
    ]  # the builtins and the file's local entry
    assert "llama-3.2-1b" in open_.names_available()
    assert open_.get("pythia-160m").summary()["n_layers"] is None  # nothing downloaded by listing


def test_progress_is_reported_per_layer(families):
    loaded = _load(families, "llama")
    seen: list[tuple[float, str]] = []
    analyze(
        loaded,
        TEXT,
        ["max-attention", "head-tsne"],
        FAST,
        progress=lambda f, m: seen.append((f, m)),
    )
    messages = [m for _, m in seen]
    assert (
        "layer 1/2: attention + head t-SNE" in messages
        and "layer 2/2: attention + head t-SNE" in messages
    )
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0


@pytest.mark.parametrize("fam", ["gemma2", "gemma3_text"])
def test_sliding_window_layers_see_only_their_window(families, fam):
    """Gemma 2/3: the local layer's maps are exactly zero beyond its window (and the global layer's
    are not); the max-attention section names the windows, its means run over the queries that see
    each key, and the heatmap's title says the layer is local."""
    from tiny_models import TINY_WINDOW

    from frontend.figures.attention import max_attention_figure
    from workers.models.families import layer_windows

    loaded = _load(families, fam)
    assert layer_windows(loaded.config) == [TINY_WINDOW, None]
    run = run_text(loaded, TEXT)
    n = run.encoded.n
    assert n > 2 * TINY_WINDOW
    beyond = np.tril(np.ones((n, n), dtype=bool), k=-TINY_WINDOW)  # key j <= i - w
    assert np.abs(run.attentions[0][:, beyond]).max() == 0.0
    assert run.attentions[1][:, beyond].max() > 0.0  # the global layer reads every earlier key
    res = analyze(loaded, TEXT, ["max-attention"], {"drop_special": False})["max-attention"]
    assert res["windows"] == [TINY_WINDOW, None]
    a = run.attentions
    j = 3
    np.testing.assert_allclose(
        np.asarray(res["mean_attention"])[0, :, j],
        a[0, :, j : j + TINY_WINDOW, j].mean(-1),
        rtol=1e-6,
    )
    np.testing.assert_allclose(
        np.asarray(res["mean_attention"])[1, :, j], a[1, :, j:, j].mean(-1), rtol=1e-6
    )
    fig = max_attention_figure({"max-attention": res, "tokens": run.tokens, "n_layers": 2})
    titles = [ann.text for ann in fig.layout.annotations]
    assert (
        f"layer 0 (local: each query sees the last {TINY_WINDOW} keys)" in titles
        and "layer 1" in titles
    )
