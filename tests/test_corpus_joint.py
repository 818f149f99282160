"""The joint query–key map (issue 24, docs/corpus.md): the captured q and k reproduce every family's maps,
the AttentionViz translation and scaling change no softmax, sampling beyond the limit says so."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import DECODER_FAMILIES, build_tiny_decoder

from workers.analyses.corpus.joint_map import align, joint_map, run_capture
from workers.models import Catalogue, ModelSpec, load_model
from workers.models.adapters import attention_modules, encode, forward
from workers.models.sublayers import batch_inputs

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TEXT = "The cat sat on the mat. The dog, who was tired, did not mind the cat at all."
TEXTS = [
    "The cat sat on the mat.",
    "A dog barked at the cat twice.",
    "Nothing else happened that day.",
]


@pytest.fixture(scope="module")
def families(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_dirs: dict[str, Path]
) -> Catalogue:
    base = tmp_path_factory.mktemp("qk-families")
    cat = Catalogue()
    for fam in DECODER_FAMILIES:
        cat.register(ModelSpec(f"tiny-{fam}", "local", str(build_tiny_decoder(base / fam, fam))))
    for name in ("tiny-bert", "tiny-gpt2"):
        cat.register(ModelSpec(name, "local", str(tiny_model_dirs[name])))
    return cat


def softmax_from_qk(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    causal: bool,
    window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """softmax(q·k/√d + mask) per head: q, k [head, n, d] -> [head, n, n]. ``window``: a sliding
    window (query i sees keys i - window < j); ``softcap``: scores -> c tanh(scores / c) (Gemma 2)."""
    d = q.shape[-1]
    scores = q @ k.transpose(-1, -2) / d**0.5
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    if causal:
        n = q.shape[1]
        seen = torch.ones(n, n, dtype=torch.bool).tril()
        if window:
            seen &= ~torch.ones(n, n, dtype=torch.bool).tril(-window)
        scores = scores.masked_fill(~seen, float("-inf"))
    return torch.softmax(scores.double(), dim=-1)


@pytest.mark.parametrize("fam", [*DECODER_FAMILIES, "bert", "gpt2"])
def test_captured_queries_and_keys_reproduce_every_map(families, fam):
    loaded = load_model(f"tiny-{fam}", catalogue=families, device="cpu")
    enc = encode(loaded, TEXT)
    maps, _ = forward(loaded, enc)  # [layer, head, n, n]
    assert loaded.model.config._attn_implementation != "headscope_capture"
    got: dict[str, torch.Tensor] = {}

    def keep(q: torch.Tensor, k: torch.Tensor) -> None:
        got.update(q=q, k=k)

    modules = attention_modules(loaded)
    for layer in range(loaded.n_layers):
        got.clear()
        run_capture(loaded, batch_inputs(loaded, [enc]), layer, keep)
        assert (
            got["q"].shape[1] == loaded.n_heads == got["k"].shape[1]
        )  # one key per query head (GQA)
        # Gemma 2/3: the captured q and k (after the q/k norms) give the raw scores; the soft-cap and
        # the sliding window come after them, as in the model
        window = getattr(modules[layer], "sliding_window", None)
        cap = getattr(modules[layer], "attn_logit_softcapping", None)
        rebuilt = softmax_from_qk(
            got["q"][0], got["k"][0], causal=loaded.causal, window=window, softcap=cap
        ).numpy()
        np.testing.assert_allclose(rebuilt, maps[layer], atol=1e-5, err_msg=f"{fam} layer {layer}")
    assert loaded.model.config._attn_implementation != "headscope_capture"  # restored
    again, _ = forward(loaded, enc)
    np.testing.assert_array_equal(again, maps)


def test_translation_and_scaling_leave_every_softmax_unchanged():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(30, 8)) * 3 + 2.0
    k = rng.normal(size=(30, 8)) * 0.5 - 1.0
    q2, k2, info = align(q, k)
    assert info["scale"] != 1.0 and info["shift_norm"] > 1.0
    np.testing.assert_allclose(np.linalg.norm(q2, axis=1).mean(), np.linalg.norm(k2, axis=1).mean())
    for causal in (False, True):
        before = softmax_from_qk(torch.tensor(q)[None], torch.tensor(k)[None], causal=causal)
        after = softmax_from_qk(torch.tensor(q2)[None], torch.tensor(k2)[None], causal=causal)
        torch.testing.assert_close(after, before, atol=1e-12, rtol=0)
    # the clouds overlap after the translation: the means coincide up to the scaling
    np.testing.assert_allclose(q2.mean(0) / info["scale"], k2.mean(0) * info["scale"], atol=1e-12)


def test_joint_map_samples_beyond_the_limit_and_says_so(catalogue):
    loaded = load_model("tiny-llama", device="cpu")
    full = joint_map(loaded, TEXTS, layer=1, head=2, max_points=10_000, method="pca")
    n = full["n_points"] // 2
    assert not full["sampled"] and n == full["n_tokens"]  # BOS dropped: every other token
    assert len(full["xy"]) == 2 * n and len(full["token"]) == n == len(full["context"])
    small = joint_map(loaded, TEXTS, layer=1, head=2, max_points=10, method="pca")
    assert small["sampled"] and small["n_points"] == 10 and small["n_tokens"] == full["n_tokens"]
    assert set(zip(small["text"], small["position"], strict=True)) <= set(
        zip(full["text"], full["position"], strict=True)
    )
    tsne = joint_map(loaded, TEXTS, layer=0, head=0, method="tsne")
    assert np.all(np.isfinite(np.array(tsne["xy"]))) and len(tsne["xy"]) == tsne["n_points"]
