"""Models: catalogue, loader, adapters on the real MiniLM and tiny random BERT / GPT-2."""

from __future__ import annotations

import json

import numpy as np
import pytest

from workers.core.errors import EmptyTextError, HeadscopeError, TextTooLongError, UnknownModelError
from workers.models import Catalogue, ModelSpec, encode, load_model, run_text


def test_minilm_shapes_and_rows_sum_to_one(minilm, demo_text):
    run = run_text(minilm, demo_text)
    n = len(run.tokens)
    assert run.attentions.shape == (6, 12, n, n)
    assert run.hidden_states.shape == (7, n, 384)
    np.testing.assert_allclose(run.attentions.sum(axis=-1), 1.0, atol=1e-5)
    assert run.tokens[0] == "[CLS]" and run.tokens[-1] == "[SEP]"
    assert run.special[0] and run.special[-1] and not run.special[1:-1].any()


def test_tokenisation_is_the_model_tokenizers_own(minilm, demo_text):
    enc = encode(minilm, demo_text)
    assert enc.input_ids == minilm.tokenizer(demo_text)["input_ids"]
    # offsets point at the token's text (lower-cased tokenizer: compare lower-case, strip ##)
    for tok, (a, b), special in zip(enc.tokens, enc.offsets, enc.special, strict=True):
        if not special:
            assert demo_text[a:b].lower() == tok.removeprefix("##")


@pytest.mark.parametrize("name", ["tiny-bert", "tiny-gpt2"])
def test_tiny_models_run(catalogue, name):
    loaded = load_model(name)
    run = run_text(loaded, "A short text about t-SNE maps and attention heads.")
    n = len(run.tokens)
    assert run.attentions.shape == (2, 4, n, n)
    assert run.hidden_states.shape == (3, n, 32)
    np.testing.assert_allclose(run.attentions.sum(axis=-1), 1.0, atol=1e-5)
    if name == "tiny-gpt2":
        # causal: no attention to later tokens
        assert np.allclose(np.triu(run.attentions, k=1), 0.0)
        assert run.final_norm_in_last_state


def test_too_long_text_states_limit_and_count(catalogue):
    loaded = load_model("tiny-bert")  # 64 positions
    text = "word " * 100
    with pytest.raises(TextTooLongError) as info:
        encode(loaded, text)
    msg = str(info.value)
    assert "102 tokens" in msg and "at most 64" in msg
    enc = encode(loaded, text, truncate=True)
    assert enc.n == 64 and enc.truncated_from == 102


def test_empty_text_is_an_error(minilm):
    with pytest.raises(EmptyTextError, match="empty"):
        encode(minilm, "   \n\t ")


def test_unknown_model_names_the_choices():
    with pytest.raises(UnknownModelError) as info:
        Catalogue().get("bert-large-nonexistent")
    assert "bert-large-nonexistent" in str(info.value) and "minilm" in str(info.value)


def test_hub_models_need_the_operator_switch(tmp_path):
    path = tmp_path / "models.json"
    path.write_text(
        json.dumps({"models": {"gpt2": {"hub": "gpt2"}, "mine": {"path": str(tmp_path)}}})
    )
    closed = Catalogue.from_file(path)
    assert "gpt2" not in closed.names_available() and "mine" in closed.names_available()
    with pytest.raises(UnknownModelError):
        closed.get("gpt2")
    assert Catalogue.from_file(path, allow_hub=True).get("gpt2").location == "gpt2"


def test_catalogue_file_errors_are_clear(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(HeadscopeError, match="cannot read the model catalogue"):
        Catalogue.from_file(bad)
    bad.write_text(json.dumps({"models": {"x": {"weights": "/tmp"}}}))
    with pytest.raises(HeadscopeError, match="needs 'path' or 'hub'"):
        Catalogue.from_file(bad)


def test_unsupported_architecture_is_refused(tmp_path):
    from transformers import DistilBertConfig, DistilBertModel

    DistilBertModel(DistilBertConfig(dim=32, n_layers=1, n_heads=2, hidden_dim=64)).save_pretrained(
        tmp_path
    )
    cat = Catalogue()
    cat.register(ModelSpec("distil", "local", str(tmp_path)))
    with pytest.raises(HeadscopeError, match="not supported"):
        load_model("distil", catalogue=cat)


def test_loader_caches_per_dtype(catalogue):
    a = load_model("tiny-bert")
    assert load_model("tiny-bert") is a
    b = load_model("tiny-bert", dtype="float64")
    assert b is not a and b.dtype.is_floating_point and str(b.dtype) == "torch.float64"
    run = run_text(b, "float64 all the way down")
    assert run.attentions.dtype == np.float64 and run.hidden_states.dtype == np.float64


def test_catalogue_summary_without_loading():
    summary = Catalogue().get("minilm").summary()
    assert summary["n_layers"] == 6 and summary["n_heads"] == 12 and summary["max_tokens"] == 512
