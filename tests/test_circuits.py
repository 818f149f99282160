"""Circuits (issue 30, SPEC 12): attribution patching on tiny random decoders of every family, float64.
AtP is checked against a finite difference of the metric along the patch direction (the ratio goes to 1
as the step shrinks) and beside the real head patching it estimates."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
import torch
from tiny_models import DECODER_FAMILIES, build_tiny_decoder, build_tiny_gpt2

from workers.analyses.circuits.attribution_patching import attribution_patching, capture
from workers.core.errors import HeadscopeError
from workers.models import Catalogue, ModelSpec, load_model
from workers.models.adapters import encode
from workers.models.sublayers import batch_inputs, layer_stack, locate

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FAMILIES = (*DECODER_FAMILIES, "gpt2")
CLEAN = "The head of the model is in the text and the word is of the token"
CORRUPTED = "The head of the model is in the text and a word is of the token"


@pytest.fixture(scope="session")
def lms(tmp_path_factory: pytest.TempPathFactory) -> Catalogue:
    base = tmp_path_factory.mktemp("circuits")
    cat = Catalogue()
    for fam in FAMILIES:
        path = (
            build_tiny_gpt2(base / fam)
            if fam == "gpt2"
            else build_tiny_decoder(base / fam, fam, lm_head=True, tied=fam == "qwen2")
        )
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
        _, _, layers = layer_stack(loaded)

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
        logits = (
            loaded.unembed.logits(out.last_hidden_state[0, -1])
            if not hasattr(out, "logits")
            else None
        )
    assert logits is not None
    return float(logits[a] - logits[b])


@pytest.mark.parametrize("fam", FAMILIES)
def test_atp_is_the_first_order_of_patching(lms, fam):
    loaded = _load(lms, fam)
    c, k = encode(loaded, CLEAN), encode(loaded, CORRUPTED)
    assert c.n == k.n
    target = (
        capture(loaded, c, grad=False).logits.topk(2).indices.tolist()
    )  # the clean run's two best
    atp = attribution_patching(loaded, c, k, target=target, real=True)
    L, H, n = loaded.n_layers, loaded.n_heads, c.n
    assert atp["heads"].shape == (L, H) and atp["heads_by_position"].shape == (L, H, n)
    assert atp["feedforward"].shape == (L,) and atp["residual"].shape == (L + 1, n)
    assert np.allclose(atp["heads_by_position"].sum(-1), atp["heads"], atol=1e-12)
    first = next(i for i, (x, y) in enumerate(zip(c.input_ids, k.input_ids, strict=True)) if x != y)
    assert (
        np.abs(atp["residual"][:, :first]).max() < 1e-12
    )  # both runs agree before the first difference
    assert np.abs(atp["heads_by_position"][..., :first]).max() < 1e-12
    a, b = atp["a"], atp["b"]
    m_k = _metric(loaded, k, a, b)
    assert (
        abs(m_k - atp["metric_corrupted"]) < 1e-9
        and abs(_metric(loaded, c, a, b) - atp["metric_clean"]) < 1e-9
    )
    scale = atp["metric_clean"] - atp["metric_corrupted"]
    rc, rk = capture(loaded, c, grad=False), capture(loaded, k, grad=False)
    H_dh = rk.contexts[0].shape[-1] // H
    lh = np.unravel_index(np.abs(atp["heads"]).argmax(), atp["heads"].shape)
    lf = int(np.abs(atp["feedforward"]).argmax())
    lr = 1 + int(
        np.abs(atp["residual"][1:L]).sum(-1).argmax()
    )  # a stream inside the model, all positions
    nodes = [
        (
            "head",
            int(lh[0]),
            int(lh[1]),
            (rc.contexts[lh[0]] - rk.contexts[lh[0]])[0, :, lh[1] * H_dh : (lh[1] + 1) * H_dh],
            atp["heads"][lh],
        ),
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
        assert errors[-1] < errors[0] or errors[0] < 1e-9, (
            kind,
            errors,
        )  # shrink the step, the ratio goes to 1
    # beside it the real patching it estimates
    assert atp["real"]["heads"].shape == (L, H)
    assert atp["pearson"] is None or -1 <= atp["pearson"] <= 1
    assert atp["spearman"] is None or -1 <= atp["spearman"] <= 1


def test_atp_refuses_different_lengths(lms):
    loaded = _load(lms, "llama")
    with pytest.raises(HeadscopeError, match="same length"):
        attribution_patching(loaded, encode(loaded, CLEAN), encode(loaded, CLEAN + " of the"))


def _attn(seed: int, *, saturated: bool):
    """A random head pair (H = 2, n = 6) with a causal mask and, ``saturated``, scores large enough that
    rows put nearly all their weight on one key."""
    from workers.analyses.circuits.qk_fix import Attn

    gen = torch.Generator().manual_seed(seed)
    H, n, dh = 2, 6, 4
    q, k = (
        torch.randn(H, n, dh, generator=gen, dtype=torch.float64),
        torch.randn(H, n, dh, generator=gen, dtype=torch.float64),
    )
    scale = 4.0 if saturated else 0.5
    mask = torch.triu(
        torch.full((n, n), torch.finfo(torch.float64).min, dtype=torch.float64), diagonal=1
    )
    weights = torch.softmax(torch.einsum("hsd,htd->hst", q, k) * scale + mask, dim=-1)[None]
    g = torch.randn(1, H, n, n, generator=gen, dtype=torch.float64)
    dq, dk = (
        torch.randn(H, n, dh, generator=gen, dtype=torch.float64),
        torch.randn(H, n, dh, generator=gen, dtype=torch.float64),
    )
    return Attn(q, k, scale, None, mask, weights), g, dq, dk


def test_qk_fix_recomputes_the_softmax():
    """AtP*'s closed form equals the softmax recomputed by brute force (one key or one query changed at a
    time); for a patch shrunk by eps it equals plain AtP to first order."""
    from workers.analyses.circuits.qk_fix import fixed, linear

    for seed, saturated in ((0, False), (1, True)):
        a, g, dq, dk = _attn(seed, saturated=saturated)
        H, n, _ = a.q.shape
        got_q, got_k = fixed(a, g, a.q + dq, a.k + dk)
        A = a.weights[0]
        want_q, want_k = (
            torch.zeros(H, n, dtype=torch.float64),
            torch.zeros(H, n, dtype=torch.float64),
        )
        for h in range(H):
            for t in range(n):
                q2, k2 = a.q.clone(), a.k.clone()
                q2[h, t] += dq[h, t]
                k2[h, t] += dk[h, t]
                for new, out in (
                    (torch.einsum("hsd,htd->hst", q2, a.k), want_q),
                    (torch.einsum("hsd,htd->hst", a.q, k2), want_k),
                ):
                    A2 = torch.softmax(new * a.scale + a.mask, dim=-1)
                    out[h, t] = ((A2[h] - A[h]) * g[0, h]).sum()
        assert torch.allclose(got_q, want_q, atol=1e-12) and torch.allclose(
            got_k, want_k, atol=1e-12
        )
        lin_q, lin_k = linear(a, g, a.q + dq, a.k + dk)
        if (
            saturated
        ):  # where the softmax saturates the linearisation misses what the recomputation sees
            assert (got_k - lin_k).abs().max() > 10 * (got_k.abs().max() * 1e-3)
        for eps_q, eps_k, lq, lk in [
            (*fixed(a, g, a.q + e * dq, a.k + e * dk), e * lin_q, e * lin_k) for e in (1e-6,)
        ]:
            assert torch.allclose(eps_q, lq, rtol=1e-4, atol=1e-14) and torch.allclose(
                eps_k, lk, rtol=1e-4, atol=1e-14
            )


@pytest.mark.parametrize("fam", FAMILIES)
def test_qk_fix_keys_and_queries_are_first_order(lms, fam):
    """With the fix the result carries every head's queries and keys; their plain AtP equals a finite
    difference of the metric with the query (or the key/value head's key) shifted along C - K."""
    from workers.analyses.circuits.qk_fix import record_attention

    loaded = _load(lms, fam)
    c, k = encode(loaded, CLEAN), encode(loaded, CORRUPTED)
    target = capture(loaded, c, grad=False).logits.topk(2).indices.tolist()
    atp = attribution_patching(loaded, c, k, target=target, qk_fix=True)
    L, H, n = loaded.n_layers, loaded.n_heads, c.n
    for name in ("queries", "keys", "queries_linear", "keys_linear"):
        assert atp[name].shape == (L, H) and atp[f"{name}_by_position"].shape == (L, H, n)
    assert atp["qk_fix"] and len(atp["qk_top"]) == 20
    a, b = atp["a"], atp["b"]
    m_k, scale = atp["metric_corrupted"], atp["metric_clean"] - atp["metric_corrupted"]
    sinks: tuple[list, list] = ([], [])
    for enc, sink in zip((c, k), sinks, strict=True):
        with record_attention(loaded, sink):
            capture(loaded, enc, grad=False)
    groups = H // max(1, loaded.n_kv_heads or H)
    for kind in ("queries", "keys"):
        grid = atp[f"{kind}_linear_by_position"]
        layer, h, t = np.unravel_index(np.abs(grid).argmax(), grid.shape)
        if kind == "keys":  # the key/value head's key: every query head of its group moves
            h = h - h % groups
            est = grid[layer, h : h + groups, t].sum()
        else:
            est = grid[layer, h, t]
        field = "q" if kind == "queries" else "k"
        delta = getattr(sinks[0][layer], field)[h, t] - getattr(sinks[1][layer], field)[h, t]
        assert abs(est) > 1e-9
        errors = []
        for eps in (1e-2, 1e-4):

            def edit(query, key, value, eps=eps, kind=kind, h=h, t=t, delta=delta):
                query, key = query.clone(), key.clone()
                if kind == "queries":
                    query[0, h, t] += eps * delta
                else:
                    key[0, h // groups, t] += eps * delta
                return query, key, value

            with record_attention(loaded, [], edit={int(layer): edit}):
                fd = (_metric(loaded, k, a, b) - m_k) / eps / scale
            errors.append(abs(fd / est - 1))
        assert errors[-1] < 1e-3 and (errors[-1] < errors[0] or errors[0] < 1e-9), (kind, errors)
