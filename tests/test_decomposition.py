"""Exact additive decomposition (docs/decomposition.md): reconstruction, importances, padding, by-hand layer, CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from workers.analyses.decomposition import TERM_LABELS, decompose, decompose_batch
from workers.analyses.decomposition.stats import (
    importance_curves,
    importance_spearman,
    spearman_per_state,
)
from workers.core.errors import EmptyTextError, HeadscopeError
from workers.models import load_model, run_text

TEXT = "The quick brown fox jumps over the lazy dog, and the dog does not mind at all."
SHORT = "A short one."
TOL = {"float32": 1e-4, "float64": 1e-9}


def _tiny(name: str, dtype: str):
    return load_model(name, dtype=dtype, device="cpu")


@pytest.fixture(scope="module")
def minilm64():
    return load_model("minilm", dtype="float64", device="cpu")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["tiny-bert", "tiny-gpt2"])
def test_reconstruction_tiny_models(catalogue, name, dtype):
    loaded = _tiny(name, dtype)
    dec = decompose(loaded, TEXT)
    run = run_text(loaded, TEXT)
    # the states are the model's own hidden states (HF's, GPT-2's last one after ln_f) ...
    assert dec.states.shape == (loaded.n_layers + 1, run.encoded.n, dec.states.shape[2])
    np.testing.assert_allclose(dec.states, run.hidden_states, atol=1e-5)
    assert dec.final_norm_in_last_state == (name == "tiny-gpt2")
    # ... and i + h + f + c rebuilds every one of them
    assert dec.max_abs_error.shape == (loaded.n_layers + 1,)
    assert dec.max_abs_error.max() < TOL[dtype]
    assert str(dec.terms.dtype) == dtype
    # perturbed gains and biases: no term is trivially zero in the last state
    norms = np.linalg.norm(dec.terms[-1], axis=-1).mean(axis=-1)  # [term]
    assert (norms > 1e-2).all(), dict(zip(TERM_LABELS, norms, strict=True))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_reconstruction_minilm(minilm, minilm64, demo_text, dtype):
    loaded = minilm if dtype == "float32" else minilm64
    dec = decompose(loaded, demo_text)
    assert dec.max_abs_error.max() < TOL[dtype]
    imp = dec.importance  # [state, token, term]
    np.testing.assert_allclose(imp.sum(axis=-1), 1.0, atol=TOL[dtype])
    # BERT-like behaviour (paper Fig. 3a): the input term dominates at first and then fades
    mean_input = imp[:, :, 0].mean(axis=1)
    assert mean_input[0] > 0.9 and mean_input[-1] < 0.5 * mean_input[1]
    assert (imp[0, :, 1:3] == 0).all()  # no attention or feed-forward before layer 0


@pytest.mark.parametrize(
    "name,dtype,tol",
    [("tiny-bert", "float64", 1e-12), ("tiny-gpt2", "float64", 1e-12), ("minilm", "float32", 2e-5)],
)
def test_padded_batch_matches_single_texts(catalogue, name, dtype, tol):
    loaded = load_model(name, dtype=dtype, device="cpu")
    batch = decompose_batch(loaded, [SHORT, TEXT])
    assert batch[0].encoded.n < batch[1].encoded.n  # the short text really was padded
    for text, dec in zip([SHORT, TEXT], batch, strict=True):
        single = decompose(loaded, text)
        assert dec.terms.shape == single.terms.shape  # no padded positions in the result
        assert dec.max_abs_error.max() < TOL[dtype]
        np.testing.assert_allclose(dec.terms, single.terms, rtol=0, atol=tol)
        np.testing.assert_allclose(dec.head_importance, single.head_importance, rtol=0, atol=tol)
        np.testing.assert_allclose(dec.ff_importance, single.ff_importance, rtol=0, atol=tol)


@pytest.mark.parametrize("name", ["tiny-bert", "tiny-gpt2"])
def test_importances_sum_and_heads_add_up(catalogue, name):
    dec = decompose(_tiny(name, "float64"), TEXT)
    imp = dec.importance  # [state, token, term]
    np.testing.assert_allclose(imp.sum(axis=-1), 1.0, atol=1e-9)
    # per-(layer, head) and per-layer parts add up to the attention / feed-forward terms
    np.testing.assert_allclose(dec.head_importance.sum(axis=(1, 2)), imp[..., 1], atol=1e-12)
    np.testing.assert_allclose(dec.ff_importance.sum(axis=1), imp[..., 2], atol=1e-12)
    last = dec.states.shape[0] - 1
    vecs, labels = dec.components(last, level="heads")
    assert labels[0] == "input" and labels[-1] == "bias" and "L1H3" in labels
    heads = np.stack([v for v, lab in zip(vecs, labels, strict=True) if "H" in lab])
    assert heads.shape[0] == dec.n_layers * dec.n_heads
    np.testing.assert_allclose(heads.sum(axis=0), dec.terms[last, 1], atol=1e-12)
    np.testing.assert_allclose(vecs.sum(axis=0), dec.states[last], atol=1e-9)
    # a head's vector gives the same importance as head_importance
    e = dec.states[last]
    mu = np.einsum("td,td->t", heads[dec.n_heads + 2], e) / np.einsum("td,td->t", e, e)
    np.testing.assert_allclose(mu, dec.head_importance[last, 1, 2], atol=1e-12)
    layer_vecs, layer_labels = dec.components(1, level="layers")
    assert layer_labels == ["input", "L0.attn", "L0.ff", "bias"]
    np.testing.assert_allclose(layer_vecs.sum(axis=0), dec.states[1], atol=1e-9)
    with pytest.raises(HeadscopeError, match="out of range"):
        dec.components(last + 1)


def _ln_by_hand(ln: torch.nn.LayerNorm, x: torch.Tensor):
    mean = x.mean(-1, keepdim=True)
    std = torch.sqrt(((x - mean) ** 2).mean(-1, keepdim=True) + ln.eps)
    return ln.weight / std, ln.bias - ln.weight * mean / std  # scale, shift


@torch.no_grad()
def test_adding_a_bert_layer_by_hand(catalogue):
    """State 2 from state 1 of tiny-bert with the layer's own modules: old terms only get rescaled."""
    loaded = _tiny("tiny-bert", "float64")
    dec = decompose(loaded, TEXT)
    layer = loaded.model.encoder.layer[1]
    x = torch.from_numpy(dec.states[1])[None]  # [1, token, dim]
    old = torch.from_numpy(dec.terms[1])[:, None]  # [term, 1, token, dim]
    context = layer.attention.self(x)[0]
    att = layer.attention.output.dense(context)
    k1, shift1 = _ln_by_hand(layer.attention.output.LayerNorm, att + x)
    mid = layer.attention.output.LayerNorm(att + x)
    ff = layer.output.dense(layer.intermediate(mid))
    k2, shift2 = _ln_by_hand(layer.output.LayerNorm, ff + mid)
    w_o, b_o = layer.attention.output.dense.weight, layer.attention.output.dense.bias
    attn_bias = b_o + layer.attention.self.value.bias @ w_o.T
    expect = [
        old[0] * k1 * k2,  # input: rescaled by the two new LayerNorms only
        (old[1] + att - attn_bias) * k1 * k2,
        old[2] * k1 * k2 + (ff - layer.output.dense.bias) * k2,
        ((old[3] + attn_bias) * k1 + shift1 + layer.output.dense.bias) * k2 + shift2,
    ]
    for t, label in enumerate(TERM_LABELS):
        np.testing.assert_allclose(dec.terms[2, t], expect[t][0].numpy(), atol=1e-10, err_msg=label)


@torch.no_grad()
def test_adding_a_gpt2_layer_by_hand(catalogue):
    """GPT-2: residual states only add new terms; the last state carries everything through ln_f."""
    loaded = _tiny("tiny-gpt2", "float64")
    dec = decompose(loaded, TEXT)
    n = dec.encoded.n
    mask = torch.full((n, n), torch.finfo(torch.float64).min, dtype=torch.float64).triu(1)[
        None, None
    ]
    resid = torch.from_numpy(dec.states[0])[None]
    for block in loaded.model.h:
        att = block.attn(block.ln_1(resid), attention_mask=mask)[0]
        ff = block.mlp(block.ln_2(resid + att))
        attn_bias = (
            block.attn.c_proj.bias + block.attn.c_attn.bias[2 * 32 :] @ block.attn.c_proj.weight
        )
        new = resid + att + ff
        if block is loaded.model.h[0]:
            np.testing.assert_array_equal(dec.terms[1, 0], dec.terms[0, 0])  # input untouched
            np.testing.assert_allclose(
                dec.terms[1, 1] - dec.terms[0, 1], (att - attn_bias)[0].numpy(), atol=1e-10
            )
            np.testing.assert_allclose(
                dec.terms[1, 2] - dec.terms[0, 2],
                (ff - block.mlp.c_proj.bias)[0].numpy(),
                atol=1e-10,
            )
        resid = new
    k, shift = _ln_by_hand(loaded.model.ln_f, resid)
    np.testing.assert_allclose(
        dec.terms[-1, 0], (torch.from_numpy(dec.terms[0, 0]) * k)[0].numpy(), atol=1e-10
    )
    np.testing.assert_allclose(dec.states[-1], (resid * k + shift)[0].numpy(), atol=1e-10)


def test_spearman_between_models(catalogue, minilm):
    a = decompose(minilm, TEXT)
    b = decompose(_tiny("tiny-bert", "float32"), TEXT)  # same tokenizer, 2 layers
    rho = importance_spearman(a, b)
    assert rho.shape == (3, 4)  # the common states 0..2
    assert np.isnan(rho[0, 1]) and np.isnan(rho[0, 2])  # no attention / feed-forward at state 0
    ok = ~np.isnan(rho)
    assert ((rho[ok] >= -1) & (rho[ok] <= 1)).all()
    np.testing.assert_allclose(rho, importance_spearman(b, a), equal_nan=True)
    # against a rank correlation written out here: Pearson's r of the ranks (no ties in floats)
    ra = a.importance[2, :, 3].argsort().argsort()
    rb = b.importance[2, :, 3].argsort().argsort()
    assert rho[2, 3] == pytest.approx(np.corrcoef(ra, rb)[0, 1], abs=1e-12)
    self_rho = spearman_per_state(a.importance, a.importance)
    np.testing.assert_allclose(self_rho[1:], 1.0)
    with pytest.raises(HeadscopeError, match="tokenise the text differently"):
        importance_spearman(a, decompose(_tiny("tiny-gpt2", "float32"), TEXT))


def test_curves_drop_special(minilm):
    dec = decompose(minilm, TEXT, keep_components=False)
    assert dec.head_outputs is None
    all_tokens = importance_curves(dec)
    no_special = importance_curves(dec, drop_special=True)
    kept = np.flatnonzero(~dec.special)
    assert no_special.kept.tolist() == kept.tolist() and len(kept) == dec.encoded.n - 2
    np.testing.assert_allclose(no_special.mean, dec.importance[:, kept].mean(axis=1))
    np.testing.assert_allclose(no_special.sd, dec.importance[:, kept].std(axis=1))
    assert not np.allclose(all_tokens.mean, no_special.mean)
    np.testing.assert_allclose(
        no_special.head_mean.sum(axis=(1, 2)), no_special.mean[:, 1], atol=1e-5
    )
    with pytest.raises(HeadscopeError, match="keep_components"):
        dec.components(3, level="heads")
    with pytest.raises(EmptyTextError):
        decompose(minilm, "   ")


def test_cli_writes_the_section(catalogue, tmp_path):
    from backend.cli import main

    out = tmp_path / "dec.json"
    argv = [
        "analyze",
        "--model",
        "tiny-bert",
        "--analysis",
        "decomposition",
        "--dtype",
        "float64",
        "--text",
        TEXT,
        "--out",
        str(out),
        "-q",
        "--drop-special",
    ]
    assert main(argv) == 0
    res = json.loads(out.read_text())
    n, n_states = res["n_tokens"], res["n_layers"] + 1
    assert (
        res["terms"] == ["input", "attention", "feedforward", "bias"] and res["dtype"] == "float64"
    )
    per_token = np.array(res["per_token"])  # [state][token][term]
    assert per_token.shape == (n_states, n, 4)
    np.testing.assert_allclose(per_token.sum(axis=-1), 1.0, atol=1e-9)
    assert max(res["max_abs_error"]) < 1e-9 and len(res["max_abs_error"]) == n_states
    assert np.array(res["mean"]).shape == np.array(res["sd"]).shape == (n_states, 4)
    assert res["kept"] == [i for i, s in enumerate(res["special"]) if not s]
    np.testing.assert_allclose(res["mean"], per_token[:, res["kept"]].mean(axis=1))
    assert np.array(res["head_importance"]).shape == (res["n_layers"], res["n_heads"], n)
    assert np.array(res["head_importance_mean"]).shape == (
        n_states,
        res["n_layers"],
        res["n_heads"],
    )
    assert np.array(res["feedforward_importance"]).shape == (n_states, res["n_layers"], n)
    assert res["head_state"] == n_states - 1 and "g*t/s" in res["convention"]


def test_pipeline_dtype_option_and_state(catalogue):
    from workers.engine.pipeline import analyze

    loaded = _tiny("tiny-gpt2", "float32")
    res = analyze(loaded, TEXT, ["decomposition"], {"dtype": "float64", "layer": 1})
    sec = res["decomposition"]
    assert sec["dtype"] == "float64" and max(sec["max_abs_error"]) < 1e-9
    assert sec["head_state"] == 1 and sec["final_norm_in_last_state"] is True
    head = np.array(sec["head_importance"])  # [layer][head][token] at state 1: only layer 0 counts
    assert np.abs(head[0]).sum() > 0 and (head[1] == 0).all()
    with pytest.raises(HeadscopeError, match="out of range"):
        analyze(loaded, TEXT, ["decomposition"], {"layer": 7})
