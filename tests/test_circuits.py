"""Circuits (issue 30, SPEC 12): attribution patching on tiny random decoders of every family, float64.
AtP is checked against a finite difference of the metric along the patch direction (the ratio goes to 1
as the step shrinks) and beside the real head patching it estimates."""

from __future__ import annotations

from collections.abc import Callable
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


def _assert_first_order(metric_at: Callable[[float], float], est: float, label: object) -> None:
    """``est`` is the derivative of ``metric_at`` (the metric as a fraction of ``m_C - m_K``, the node
    moved by ``eps`` times its C - K difference) at 0, shown two ways that hold whatever the BLAS's last
    bits (docs/models.md, "Precision"):

    - first order: the forward difference ``(m(eps) - m(0)) / eps`` misses ``est`` by ``C·eps`` (the
      second-order term), so a step ten times smaller gives an error ten times smaller (a log-log slope
      of 1, 0.88-1.15 over every family's nodes); a wrong ``est`` leaves an error that stops shrinking
      (slope 0). Steps of 1e-1 and 1e-2 keep the rounding out: the metric's float64 rounding, ~1e-16
      under every BLAS path seen, over ``eps·|est|·|m_C - m_K|``, is at most 5% of that error (at the
      weakest node, GPT-2's largest query; far less elsewhere), and only a 15 times larger rounding
      would bring that slope down to 0.7.
    - the value: the central difference ``(m(eps) - m(-eps)) / 2eps`` has no first-order term; at
      eps = 1e-3 its truncation (eps², <= 1e-5 relative here) and its rounding (1/eps, <= 1e-5 at the
      weakest node, GPT-2's largest query) are both a hundred times below the 1e-3 asked.

    A smaller step only lets the rounding in: with a forward step of 1e-4 the error at that query was
    the BLAS's last bits (1.2e-4 under MKL's AVX-512 paths, 6.7e-5 under its AVX2 ones, 2.1e-4 under
    its compatible ones), and it grew as the step shrank.
    """
    m0 = metric_at(0.0)
    forward = [abs((metric_at(eps) - m0) / eps / est - 1) for eps in (1e-1, 1e-2)]
    slope = np.log10(forward[0] / forward[1]) if forward[1] > 0 else np.inf
    assert slope > 0.7 or forward[0] < 1e-8, (label, "forward errors", forward)
    eps = 1e-3
    central = abs((metric_at(eps) - metric_at(-eps)) / (2 * eps) / est - 1)
    assert central < 1e-3, (label, "central error", central, "forward errors", forward)


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

        def metric_at(eps, kind=kind, layer=layer, index=index, delta=delta):
            with _shifted(loaded, kind, layer, index, delta, eps):
                return _metric(loaded, k, a, b) / scale

        _assert_first_order(metric_at, est, kind)
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
    scale = atp["metric_clean"] - atp["metric_corrupted"]
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

        def metric_at(eps, kind=kind, layer=layer, h=h, t=t, delta=delta):
            def edit(query, key, value):
                query, key = query.clone(), key.clone()
                if kind == "queries":
                    query[0, h, t] += eps * delta
                else:
                    key[0, h // groups, t] += eps * delta
                return query, key, value

            with record_attention(loaded, [], edit={int(layer): edit}):
                return _metric(loaded, k, a, b) / scale

        _assert_first_order(metric_at, est, kind)
