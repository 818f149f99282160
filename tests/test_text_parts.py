"""A multimodal Gemma 3 checkpoint's language model (issue 31), and one sliding window for every layer
(Phi-3, Mistral): tiny random configs built offline and saved with ``save_pretrained``.

The multimodal checkpoint (``Gemma3ForConditionalGeneration``) is read as its text model only: its
maps, states and logits are the multimodal model's own on a text, and every view equals the one of the
same language model saved alone (``Gemma3ForCausalLM``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import TINY_WINDOW, build_tiny_decoder, build_tiny_gemma3_multimodal

from workers.analyses.causal.views import logit_attribution, logit_lens, predictions
from workers.analyses.decomposition import decompose
from workers.core.errors import HeadscopeError
from workers.engine.pipeline import analyze
from workers.models import Catalogue, ModelSpec, load_model, run_text
from workers.models.adapters import encode
from workers.models.families import family_of, layer_windows

TEXT = "The cat sat on the mat. The dog, who was tired, did not mind the cat at all, and the cat slept."


@pytest.fixture(scope="module")
def cat(tmp_path_factory: pytest.TempPathFactory) -> Catalogue:
    base = tmp_path_factory.mktemp("text-parts")
    c = Catalogue()
    for tied in (True, False):
        mm, alone = base / f"mm-{tied}", base / f"alone-{tied}"
        build_tiny_gemma3_multimodal(mm, alone, tied=tied, seed=3)
        c.register(ModelSpec(f"mm-{tied}", "local", str(mm)))
        c.register(ModelSpec(f"alone-{tied}", "local", str(alone)))
    for fam in ("phi3", "mistral"):
        c.register(
            ModelSpec(
                f"window-{fam}",
                "local",
                str(build_tiny_decoder(base / fam, fam, window=TINY_WINDOW)),
            )
        )
    return c


def test_multimodal_checkpoint_is_listed_as_its_text_model(cat):
    cfg = cat.get("mm-True").config()
    assert (
        cfg["model_type"] == "gemma3" and "vision_config" in cfg
    )  # the checkpoint really is multimodal
    for tied in (True, False):
        s = cat.get(f"mm-{tied}").summary()
        assert s["model_type"] == "gemma3" and s["family"] == "gemma3_text" and s["causal"]
        assert (s["n_layers"], s["n_heads"], s["n_kv_heads"], s["hidden_size"]) == (2, 4, 2, 32)
        assert s["lm_head"] is True and s["lm_head_reason"].startswith(
            "the unembedding is the "
            + ("input embedding" if tied else "checkpoint's own output matrix")
        )
    assert family_of("gemma3").name == "gemma3_text"
    with pytest.raises(
        HeadscopeError,
        match=r"model type 'distilbert' is not supported; supported: bert, .*"
        r"gemma3 \(its text model\), gemma3_text",
    ):
        family_of("distilbert")  # other types: refused as before


@pytest.mark.parametrize("tied", [True, False])
def test_multimodal_text_part_is_the_multimodal_models_language_model(cat, tied):
    """Loaded as ``Gemma3TextModel`` (no vision tower in memory); maps bit for bit the multimodal
    model's eager weights on a text, its head the multimodal model's ``lm_head``."""
    from transformers import Gemma3ForConditionalGeneration

    loaded = load_model(f"mm-{tied}", catalogue=cat, device="cpu")
    assert type(loaded.model).__name__ == "Gemma3TextModel" and loaded.family == "gemma3_text"
    assert not any("vision" in k or "projector" in k for k in loaded.model.state_dict())
    assert loaded.unembed is not None and loaded.unembed.source == ("tied" if tied else "file")
    assert layer_windows(loaded.config) == [TINY_WINDOW, None]
    run = run_text(loaded, TEXT)
    n = run.encoded.n
    assert n > 2 * TINY_WINDOW
    full = Gemma3ForConditionalGeneration.from_pretrained(
        cat.get(f"mm-{tied}").resolve(), attn_implementation="eager"
    ).eval()
    with torch.inference_mode():
        ids = torch.tensor([run.encoded.input_ids])
        out = full(input_ids=ids, attention_mask=torch.ones_like(ids), output_attentions=True)
    np.testing.assert_array_equal(run.attentions, torch.stack(out.attentions)[:, 0].numpy())
    assert (
        np.abs(run.attentions[0][:, np.tril(np.ones((n, n), dtype=bool), k=-TINY_WINDOW)]).max()
        == 0.0
    )
    enc = encode(loaded, TEXT)
    pr = predictions(loaded, enc, k=3)
    want = out.logits[0].double().log_softmax(-1)
    assert (np.asarray(pr["top_ids"])[:, 0] == want.argmax(-1).numpy()).all()
    np.testing.assert_allclose(
        pr["next_logprob"], want[torch.arange(n - 1), ids[0, 1:]].numpy(), atol=1e-5
    )


@pytest.mark.parametrize("tied", [True, False])
def test_multimodal_views_equal_the_text_model_saved_alone(cat, tied):
    mm = load_model(f"mm-{tied}", catalogue=cat, device="cpu", dtype="float64")
    alone = load_model(f"alone-{tied}", catalogue=cat, device="cpu", dtype="float64")
    a, b = decompose(mm, TEXT), decompose(alone, TEXT)
    np.testing.assert_array_equal(a.terms, b.terms)
    assert a.max_rel_error.max() < 1e-9
    enc = encode(mm, TEXT)
    la, lb = logit_attribution(mm, enc), logit_attribution(alone, enc)
    np.testing.assert_array_equal(la["heads"], lb["heads"])
    assert la["rel_error"] < 1e-9
    lens_a, lens_b = logit_lens(mm, enc), logit_lens(alone, enc)
    for key in ("top_ids", "next_rank", "next_prob", "top_probs"):
        np.testing.assert_array_equal(lens_a[key], lens_b[key])


@pytest.mark.parametrize("fam", ["phi3", "mistral"])
def test_one_window_for_every_layer_without_layer_types(cat, fam):
    """Phi-3 and Mistral set ``sliding_window`` without ``layer_types``: transformers applies it to
    every layer, so every layer's maps are zero beyond it and the max-attention section says so."""
    loaded = load_model(f"window-{fam}", catalogue=cat, device="cpu")
    saved = json.loads((Path(cat.get(f"window-{fam}").resolve()) / "config.json").read_text())
    assert saved["sliding_window"] == TINY_WINDOW and not saved.get("layer_types")
    assert layer_windows(loaded.config) == [TINY_WINDOW, TINY_WINDOW]
    run = run_text(loaded, TEXT)
    n = run.encoded.n
    beyond = np.tril(np.ones((n, n), dtype=bool), k=-TINY_WINDOW)
    assert np.abs(run.attentions[:, :, beyond]).max() == 0.0
    assert (
        run.attentions[:, :, np.tril(np.ones((n, n), dtype=bool), k=-(TINY_WINDOW - 1))].max() > 0.0
    )
    res = analyze(loaded, TEXT, ["max-attention"], {"drop_special": False})["max-attention"]
    assert res["windows"] == [TINY_WINDOW, TINY_WINDOW]
    j = 3
    np.testing.assert_allclose(
        np.asarray(res["mean_attention"])[1, :, j],
        run.attentions[1, :, j : j + TINY_WINDOW, j].mean(-1),
        rtol=1e-6,
    )
    assert (
        layer_windows({"model_type": "phi3", "num_hidden_layers": 3}) == []
    )  # no window: nothing to say
