"""Causal views (issue 23, docs/causal.md): the language-model head, predictions, the logit lens, exact logit
attribution, ablation, patching and continuation on tiny random decoders of every family (with a head:
untied, or tied for Qwen2 and GPT-2). References are transformers' own ``...ForCausalLM`` models loaded
from the same directories, and plain forward hooks on the whole model."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from tiny_models import DECODER_FAMILIES, build_tiny_decoder, build_tiny_gpt2

from workers.analyses.causal.interventions import (
    Row,
    ablation,
    patching,
    prefix_of,
    run_from,
    run_rows,
)
from workers.analyses.causal.views import (
    NoLMHeadError,
    continue_text,
    logit_attribution,
    logit_lens,
    predictions,
    stream,
)
from workers.core.errors import HeadscopeError
from workers.models import Catalogue, ModelSpec, load_model
from workers.models.adapters import encode
from workers.models.families import resolve
from workers.models.lm_head import head_status

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FAMILIES = (*DECODER_FAMILIES, "gpt2")
TIED = {"qwen2"}  # besides GPT-2, whose embedding is its head by default
# single tokens in the tiny BPE: the two texts have the same token length
CLEAN = "The head of the model is in the text and the word is of the token"
CORRUPTED = "The head of the model is in the text and a word is of the token"
TOL = {"float32": 1e-4, "float64": 1e-9}


@pytest.fixture(scope="module")
def heads(tmp_path_factory: pytest.TempPathFactory) -> Catalogue:
    base = tmp_path_factory.mktemp("causal")
    cat = Catalogue()
    for fam in FAMILIES:
        path = (
            build_tiny_gpt2(base / fam)
            if fam == "gpt2"
            else build_tiny_decoder(base / fam, fam, lm_head=True, tied=fam in TIED)
        )
        cat.register(ModelSpec(f"lm-{fam}", "local", str(path)))
    cat.register(ModelSpec("base-llama", "local", str(build_tiny_decoder(base / "base", "llama"))))
    return cat


def _load(cat: Catalogue, fam: str, dtype: str = "float32"):
    return load_model(f"lm-{fam}", catalogue=cat, dtype=dtype, device="cpu")


def _reference(cat: Catalogue, fam: str, dtype: str = "float32"):
    from transformers import AutoModelForCausalLM

    from workers.models.precision import keep_dtype, register_attention

    register_attention()
    loaded = _load(cat, fam, dtype)
    ref = AutoModelForCausalLM.from_pretrained(
        cat.get(f"lm-{fam}").resolve(),
        attn_implementation=loaded.arch.attn_implementation,
        dtype=loaded.dtype,
    )
    keep_dtype(ref)  # float64 end to end, as the loader's models
    return ref.eval()


@pytest.mark.parametrize("fam", FAMILIES)
def test_head_is_the_causal_lm_models_own(heads, fam):
    loaded = _load(heads, fam)
    ref = _reference(heads, fam)
    assert loaded.has_lm_head
    assert loaded.unembed.source == ("tied" if fam in TIED | {"gpt2"} else "file")
    assert torch.equal(loaded.unembed.weight, ref.get_output_embeddings().weight)
    enc = encode(loaded, CLEAN)
    with torch.inference_mode():
        want = ref(torch.tensor([enc.input_ids])).logits[0]
    assert torch.allclose(stream(loaded, enc).logits, want, atol=1e-5, rtol=1e-5)


def test_models_without_a_head_say_why(heads, minilm):
    base = load_model("base-llama", catalogue=heads, device="cpu")
    assert not base.has_lm_head and "base model only" in base.lm_head_reason
    with pytest.raises(NoLMHeadError, match="base-llama.*no language-model head.*lm_head.weight"):
        predictions(base, encode(base, CLEAN))
    assert not minilm.has_lm_head
    with pytest.raises(NoLMHeadError, match="encoder"):
        predictions(minilm, encode(minilm, CLEAN))
    cfg = minilm.config
    assert head_status(cfg, None).has is False
    assert head_status({"model_type": "llama", "tie_word_embeddings": True}, None).source == "tied"
    assert head_status({"model_type": "llama"}, None).has is None  # untied: only the files can tell


@pytest.mark.parametrize("fam", FAMILIES)
def test_predictions_and_the_lens(heads, fam):
    loaded = _load(heads, fam)
    enc = encode(loaded, CLEAN)
    pr = predictions(loaded, enc, k=7)
    n = enc.n
    probs = np.asarray(pr["top_probs"])
    assert (
        probs.shape == (n, 7)
        and (np.diff(probs, axis=1) <= 0).all()
        and (probs.sum(1) <= 1 + 1e-9).all()
    )
    ranks, lp = np.asarray(pr["next_rank"]), np.asarray(pr["next_logprob"])
    assert ranks.shape == lp.shape == (n - 1,) and (ranks >= 1).all()
    top1 = np.asarray(pr["top_ids"])[:-1, 0] == np.asarray(enc.input_ids[1:])
    assert ((ranks == 1) == top1).all()
    assert np.allclose(pr["surprisal_bits"], -lp / np.log(2))
    logits = stream(loaded, enc).logits.double()
    want = torch.log_softmax(logits, -1)[torch.arange(n - 1), torch.tensor(enc.input_ids[1:])]
    assert np.allclose(lp, want.numpy(), atol=1e-9)
    lens = logit_lens(loaded, enc)
    L = loaded.n_layers
    assert lens["top_ids"].shape == (L + 1, n) and lens["next_rank"].shape == (L + 1, n - 1)
    assert (lens["top_ids"][L] == np.asarray(pr["top_ids"])[:, 0]).all()
    assert np.allclose(
        lens["top_probs"][L], probs[:, 0], atol=1e-6
    )  # float32 log-sum-exp vs float64
    assert (lens["next_rank"][L] == ranks).all()
    assert not np.allclose(
        lens["top_probs"][0], lens["top_probs"][L]
    )  # the lens reads other states
    some = logit_lens(
        loaded, enc, positions=[n - 1, 0, 2]
    )  # one position's lens: the grid's columns
    assert some["positions"] == [n - 1, 0, 2] and some["top_ids"].shape == (L + 1, 3)
    assert (some["top_ids"] == lens["top_ids"][:, [n - 1, 0, 2]]).all()
    assert np.allclose(some["top_probs"], lens["top_probs"][:, [n - 1, 0, 2]], atol=1e-6)
    assert (some["next_rank"][:, 1:] == lens["next_rank"][:, [0, 2]]).all()
    assert (some["next_rank"][:, 0] == 0).all() and np.isnan(
        some["next_prob"][:, 0]
    ).all()  # no next token
    with pytest.raises(HeadscopeError, match="outside the text"):
        logit_lens(loaded, enc, positions=[n])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fam", FAMILIES)
def test_logit_attribution_is_exact(heads, fam, dtype):
    loaded = _load(heads, fam, dtype)
    enc = encode(loaded, CLEAN)
    att = logit_attribution(loaded, enc)
    L, H, n = loaded.n_layers, loaded.n_heads, enc.n
    assert att["heads"].shape == (L, H, n) and att["feedforward"].shape == (L, n)
    total = att["input"] + att["heads"].sum(axis=(0, 1)) + att["feedforward"].sum(0) + att["bias"]
    logits = stream(loaded, enc).logits
    cap = loaded.unembed.softcap
    assert att["softcap"] == cap and (cap is not None) == (fam == "gemma2")
    if cap is not None:  # Gemma 2: the attribution splits the logit before the soft-cap c*tanh(z/c)
        logits = torch.atanh(logits.double() / cap).to(logits.dtype) * cap
    own = logits[torch.arange(n), torch.as_tensor(att["target"])].numpy()
    assert np.abs(att["logit"] - own).max() <= TOL[dtype] * np.abs(own).max()
    assert np.abs(total - own).max() <= TOL[dtype] * np.abs(own).max()
    assert (
        list(att["target"][:-1]) == enc.input_ids[1:]
    )  # default: the next token, then the top prediction
    assert att["target"][-1] == int(logits[-1].argmax())
    a, b = enc.input_ids[3], enc.input_ids[5]
    pair = logit_attribution(loaded, enc, target=[a, b])
    total = (
        pair["input"] + pair["heads"].sum(axis=(0, 1)) + pair["feedforward"].sum(0) + pair["bias"]
    )
    want = (logits[:, a] - logits[:, b]).numpy()
    assert np.abs(total - want).max() <= TOL[dtype] * np.abs(want).max()
    assert np.abs(att["heads"]).max() > 0 and np.abs(att["feedforward"]).max() > 0


def _zero_head_with_hooks(ref, loaded, enc, layer: int, head: int) -> torch.Tensor:
    """log-probabilities [n, vocabulary] of the CausalLM model with one head's z zeroed by a hook."""
    fam = loaded.arch
    proj = resolve(resolve(ref.base_model, fam.layers)[layer], fam.out_proj)
    dh = (
        proj.in_features // loaded.n_heads
        if hasattr(proj, "in_features")
        else proj.weight.shape[0] // loaded.n_heads
    )

    def hook(module, args):
        z = args[0].clone()
        z[..., head * dh : (head + 1) * dh] = 0
        return (z,)

    handle = proj.register_forward_pre_hook(hook)
    try:
        with torch.inference_mode():
            return torch.log_softmax(ref(torch.tensor([enc.input_ids])).logits[0].double(), -1)
    finally:
        handle.remove()


@pytest.mark.parametrize("fam", FAMILIES)
def test_ablation(heads, fam):
    loaded = _load(heads, fam, "float64")
    enc = encode(loaded, CLEAN)
    n, L, H = enc.n, loaded.n_layers, loaded.n_heads
    nothing = ablation(loaded, enc, heads=[])
    assert np.abs(nothing["effect"]).max() < 1e-12  # ablating nothing changes nothing
    one = ablation(loaded, enc, heads=[(1, 2)], mode="zero")
    ref = _zero_head_with_hooks(_reference(heads, fam, "float64"), loaded, enc, 1, 2)
    want = ref[torch.arange(n), torch.as_tensor(one["target"])].numpy() - one["base"]
    assert np.allclose(one["effect"], want, atol=1e-9)
    assert np.abs(one["effect"]).max() > 1e-6
    # every head in turn at one position equals each head ablated alone, read there
    p = n // 2
    each = ablation(loaded, enc, heads=None, mode="mean", position=p)
    assert each["map"].shape == (L, H) and each["position"] == p
    for layer, head in [(0, 0), (1, H - 1)]:
        alone = ablation(loaded, enc, heads=[(layer, head)], mode="mean")
        assert abs(each["map"][layer, head] - alone["effect"][p]) < 1e-9
    both = ablation(loaded, enc, heads=[(0, 1), (1, 1)], mode="mean")
    assert both["effect"].shape == (n,)
    with pytest.raises(HeadscopeError, match="out of range"):
        ablation(loaded, enc, heads=[(L, 0)])


@pytest.mark.parametrize("fam", FAMILIES)
def test_patching(heads, fam, monkeypatch):
    loaded = _load(heads, fam, "float64")
    c, k = encode(loaded, CLEAN), encode(loaded, CORRUPTED)
    assert c.n == k.n
    first = next(i for i, (x, y) in enumerate(zip(c.input_ids, k.input_ids, strict=True)) if x != y)
    target = stream(loaded, c).logits[-1].topk(2).indices.tolist()  # the clean run's two best
    pat = patching(loaded, c, k, target=target)
    L, H, n = loaded.n_layers, loaded.n_heads, c.n
    res = pat["residual"]
    assert res.shape == (L + 1, n) and pat["heads"].shape == (L, H)
    assert abs(res[L, n - 1] - 1) < 1e-9  # the last layer's stream at the last position: all of it
    assert (
        np.abs(res[L, : n - 1]).max() < 1e-9
    )  # elsewhere the last stream reaches no later position
    assert (
        np.abs(res[:, :first]).max() < 1e-9
    )  # before the first difference both runs agree: nothing to patch
    assert np.abs(res[0, first]) > 1e-6
    # patching nothing: the corrupted run's own metric, from any layer
    rk = stream(loaded, k)
    for layer in (0, L - 1, L):
        logits = run_from(loaded, layer, rk.states[layer][None])
        m = float(logits[0, -1, target[0]] - logits[0, -1, target[1]])
        assert abs(m - pat["metric_corrupted"]) < 1e-9
    if fam == "llama":  # patched runs in batches of 7 rows: the same fractions
        import workers.analyses.causal.interventions as iv

        monkeypatch.setattr(iv, "ROW_TOKENS", 7 * n)
        again = patching(loaded, c, k, target=target)
        assert np.allclose(again["residual"], res, atol=1e-12)
    with pytest.raises(HeadscopeError, match="same length"):
        patching(loaded, c, encode(loaded, CLEAN + " of the"), target=target)


@pytest.mark.parametrize("fam", FAMILIES)
def test_intervened_runs_share_a_forward_and_reuse_the_prefix(heads, fam):
    """Rows that join the batch at their own layer, rows that reuse the base run's keys and values
    before their first position, and reading one position (the last layer's feed-forward run there
    only) each give what a separate full run of that row gives."""
    loaded = _load(heads, fam, "float64")
    enc = encode(loaded, CLEAN)
    run = stream(loaded, enc)
    n, L, H = enc.n, loaded.n_layers, loaded.n_heads
    dh = run.contexts[0].shape[-1] // H
    bump = 0.1 * torch.randn(
        run.states.shape[-1], dtype=run.states.dtype, generator=torch.Generator().manual_seed(0)
    )
    rows = []
    for start in range(L + 1):
        x = run.states[start].clone()
        x[n // 2] += bump  # an intervention at one position of X[start]
        heads_ = ((start, H - 1, torch.zeros(1, dh, dtype=x.dtype)),) if start < L else ()
        rows.append(Row(start, x, heads_))
    alone = torch.cat([run_rows(loaded, [row]) for row in rows])  # [L+1, n, vocabulary]
    shared = run_rows(
        loaded, rows[::-1]
    )  # one forward, the rows joining at their layers, any order
    assert torch.allclose(shared, alone.flip(0), atol=1e-12, rtol=0)
    assert (shared[:-1] - shared[-1:]).abs().amax() > 1e-6  # the rows differ
    read = run_rows(loaded, rows, read=[n - 1, n // 2])
    assert torch.allclose(read, alone[:, [n - 1, n // 2]], atol=1e-12, rtol=0)
    # without the head (it changes every position), positions before n // 2 are the base run's:
    # reuse their keys and values and run n // 2 .. n - 1 only
    plain = run_rows(loaded, [Row(r.start, r.x) for r in rows], read=[n - 1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prefix = prefix_of(loaded, enc)
        cut = [Row(r.start, r.x[n // 2 :]) for r in rows]
        tail = run_rows(loaded, cut, prefix=prefix, offset=n // 2, read=[n - 1 - n // 2])
    assert not [w for w in caught if "past_key_values" in str(w.message)], [
        str(w.message) for w in caught
    ]
    assert torch.allclose(tail, plain, atol=1e-12, rtol=0)
    assert (plain[:, 0] - alone[:, n - 1]).abs().amax() > 1e-6  # (the head did matter)
    with pytest.raises(ValueError, match="prefix"):
        run_rows(loaded, cut, offset=n // 2)


def test_keep_freed_memory_is_glibc_mallopt_once(tmp_path):
    """The heap setting workers and the CLI make (workers/models/allocator.py): glibc takes it, once per
    process; HEADSCOPE_KEEP_FREED_MEMORY=0 leaves the defaults."""
    import os
    import subprocess
    import sys

    code = "from workers.models.allocator import keep_freed_memory as k; print(k(), k())"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["True", "True"]
    env["HEADSCOPE_KEEP_FREED_MEMORY"] = "0"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("fam", ["llama", "gpt_neox", "gpt2"])
def test_continuation(heads, fam):
    loaded = _load(heads, fam)
    enc = encode(loaded, CLEAN)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ext, text, probs = continue_text(loaded, enc, CLEAN, n_tokens=6)
    # the cache goes by the name this transformers reads (``cache`` from 5.24 on, warning on the old one)
    assert not [w for w in caught if "past_key_values" in str(w.message)], [
        str(w.message) for w in caught
    ]
    ref = _reference(heads, fam)
    with torch.inference_mode():
        want = ref.generate(
            torch.tensor([enc.input_ids]),
            max_new_tokens=6,
            do_sample=False,
            pad_token_id=loaded.pad_token_id,
        )[0].tolist()
    assert ext.input_ids[: len(want)] == want[: ext.n]
    assert ext.input_ids[: enc.n] == enc.input_ids and len(probs) == ext.n - enc.n
    assert text.startswith(CLEAN) and ext.offsets[-1][1] == len(text)
    a = continue_text(loaded, enc, CLEAN, n_tokens=6, temperature=1.5, seed=3)[0].input_ids
    b = continue_text(loaded, enc, CLEAN, n_tokens=6, temperature=1.5, seed=3)[0].input_ids
    assert a == b
    with pytest.raises(HeadscopeError, match="limit"):
        continue_text(loaded, enc, CLEAN, n_tokens=loaded.max_length)
