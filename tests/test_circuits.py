"""Circuits (issue 30, SPEC 12): attribution patching on tiny random decoders of every family, float64.
AtP is checked against a finite difference of the metric along the patch direction (the ratio goes to 1
as the step shrinks) and beside the real head patching it estimates."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
import torch
from tiny_models import DECODER_FAMILIES, build_tiny_decoder, build_tiny_gpt2

from workers.analysis.attribution_patching import attribution_patching, capture
from workers.analysis.decomposition.model import batch_inputs, locate
from workers.analysis.interventions import _layers
from workers.errors import HeadscopeError
from workers.models import Catalogue, ModelSpec, load_model
from workers.models.adapters import encode

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FAMILIES = (*DECODER_FAMILIES, "gpt2")
CLEAN = "The head of the model is in the text and the word is of the token"
CORRUPTED = "The head of the model is in the text and a word is of the token"


@pytest.fixture(scope="session")
def lms(tmp_path_factory: pytest.TempPathFactory) -> Catalogue:
    base = tmp_path_factory.mktemp("circuits")
    cat = Catalogue()
    for fam in FAMILIES:
        path = build_tiny_gpt2(base / fam) if fam == "gpt2" else build_tiny_decoder(
            base / fam, fam, lm_head=True, tied=fam == "qwen2")
        cat.register(ModelSpec(f"lm-{fam}", "local", str(path)))
    return cat


def _load(cat: Catalogue, fam: str):
    return load_model(f"lm-{fam}", catalogue=cat, dtype="float64", device="cpu")


@contextmanager
def _shifted(loaded, kind: str, layer: int, index: int, delta: torch.Tensor, eps: float):
    """Within the block node ``kind`` (head ``index`` of ``layer``, the feed-forward of ``layer``, or
    the residual stream X[layer]) is moved by ``eps * delta`` (its C - K difference)."""
    arch = locate(loaded)
    if kind == "head":
        dh = delta.shape[-1]

        def pre(m, args):
            z = args[0].clone()
            z[0, :, index * dh : (index + 1) * dh] += eps * delta
            return (z, *args[1:])

        h = arch.layers[layer].context_module.register_forward_pre_hook(pre)
    elif kind == "ff":
        h = arch.layers[layer].ff_module.register_forward_hook(lambda m, a, out: out + eps * delta)
    else:
        _, _, layers = _layers(loaded)

        def pre_layer(m, args, kwargs):
            if args:
                return (args[0] + eps * delta, *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": kwargs["hidden_states"] + eps * delta}

        h = layers[layer].register_forward_pre_hook(pre_layer, with_kwargs=True)
    try:
        yield
    finally:
        h.remove()


def _metric(loaded, enc, a: int, b: int) -> float:
    with torch.inference_mode():
        out = loaded.model(**batch_inputs(loaded, [enc]))
        logits = loaded.unembed.logits(out.last_hidden_state[0, -1]) if not hasattr(out, "logits") else None
    assert logits is not None
    return float(logits[a] - logits[b])


@pytest.mark.parametrize("fam", FAMILIES)
def test_atp_is_the_first_order_of_patching(lms, fam):
    loaded = _load(lms, fam)
    c, k = encode(loaded, CLEAN), encode(loaded, CORRUPTED)
    assert c.n == k.n
    target = capture(loaded, c, grad=False).logits.topk(2).indices.tolist()  # the clean run's two best
    atp = attribution_patching(loaded, c, k, target=target, real=True)
    L, H, n = loaded.n_layers, loaded.n_heads, c.n
    assert atp["heads"].shape == (L, H) and atp["heads_by_position"].shape == (L, H, n)
    assert atp["feedforward"].shape == (L,) and atp["residual"].shape == (L + 1, n)
    assert np.allclose(atp["heads_by_position"].sum(-1), atp["heads"], atol=1e-12)
    first = next(i for i, (x, y) in enumerate(zip(c.input_ids, k.input_ids, strict=True)) if x != y)
    assert np.abs(atp["residual"][:, :first]).max() < 1e-12  # both runs agree before the first difference
    assert np.abs(atp["heads_by_position"][..., :first]).max() < 1e-12
    a, b = atp["a"], atp["b"]
    m_k = _metric(loaded, k, a, b)
    assert abs(m_k - atp["metric_corrupted"]) < 1e-9 and abs(_metric(loaded, c, a, b) - atp["metric_clean"]) < 1e-9
    scale = atp["metric_clean"] - atp["metric_corrupted"]
    rc, rk = capture(loaded, c, grad=False), capture(loaded, k, grad=False)
    H_dh = rk.contexts[0].shape[-1] // H
    lh = np.unravel_index(np.abs(atp["heads"]).argmax(), atp["heads"].shape)
    lf = int(np.abs(atp["feedforward"]).argmax())
    lr = 1 + int(np.abs(atp["residual"][1:L]).sum(-1).argmax())  # a stream inside the model, all positions
    nodes = [
        ("head", int(lh[0]), int(lh[1]), (rc.contexts[lh[0]] - rk.contexts[lh[0]])[0, :, lh[1] * H_dh : (lh[1] + 1) * H_dh],
         atp["heads"][lh]),
        ("ff", lf, 0, rc.feedforward[lf] - rk.feedforward[lf], atp["feedforward"][lf]),
        ("residual", lr, 0, rc.states[lr] - rk.states[lr], atp["residual"][lr].sum()),
    ]
    for kind, layer, index, delta, est in nodes:
        assert abs(est) > 1e-8, (kind, est)
        errors = []
        for eps in (1e-2, 1e-3, 1e-4):
            with _shifted(loaded, kind, layer, index, delta, eps):
                fd = (_metric(loaded, k, a, b) - m_k) / eps / scale
            errors.append(abs(fd / est - 1))
        assert errors[-1] < 1e-3, (kind, errors)
        assert errors[-1] < errors[0] or errors[0] < 1e-9, (kind, errors)  # shrink the step, the ratio goes to 1
    # beside it the real patching it estimates
    assert atp["real"]["heads"].shape == (L, H)
    assert atp["pearson"] is None or -1 <= atp["pearson"] <= 1
    assert atp["spearman"] is None or -1 <= atp["spearman"] <= 1


def test_atp_refuses_different_lengths(lms):
    loaded = _load(lms, "llama")
    with pytest.raises(HeadscopeError, match="same length"):
        attribution_patching(loaded, encode(loaded, CLEAN), encode(loaded, CLEAN + " of the"))
