"""What the model says, read from its own head (docs/causal.md): predictions, the logit lens,
exact direct logit attribution and the continuation of a text.

Logits at position t are ``l_t = W_U N(X[L]_t) + b_U`` with ``N`` the family's final norm (the
model's own module, ``Family.final_norm``) and ``W_U``/``b_U`` the head ``workers.models.lm_head``
found. ``X[l]`` is the residual stream before layer l (``X[0]`` the embedding output, ``X[L]`` the
last layer's output before the final norm).

Notebook use::

    from workers.models import load_model
    from workers.models.adapters import encode
    from workers.analyses.causal.views import predictions, logit_attribution
    m = load_model("smollm2", dtype="float64")
    enc = encode(m, "The Eiffel Tower is in the city of")
    predictions(m, enc, k=5)["top_tokens"][-1]          # the model's five best next tokens
    att = logit_attribution(m, enc)                    # parts sum to att["logit"] (1e-9 in float64)
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from workers.analyses.causal.vocab import read_vocab
from workers.core.errors import HeadscopeError
from workers.core.progress import Progress, no_progress
from workers.models.adapters import Encoded, cache_kwarg, cache_out
from workers.models.families import resolve
from workers.models.lm_head import Unembedding
from workers.models.sublayers import batch_inputs

if TYPE_CHECKING:
    from collections.abc import Sequence

    from workers.models.loader import LoadedModel

logger = logging.getLogger(__name__)

LN2 = math.log(2.0)
FROZEN = (
    "the final norm's scale is frozen at its value on X[L] (1/rms, or 1/std with the mean shift and "
    "its bias in the bias part), so the norm is linear and the parts add up to the logit exactly"
)

TargetSpec = None | str | int | list[Any] | tuple[Any, ...]


class NoLMHeadError(HeadscopeError):
    code = "no_lm_head"

    def __init__(self, name: str, reason: str):
        super().__init__(
            f"model {name!r} has no language-model head, so it cannot say what comes next: {reason}"
        )


def head_of(loaded: LoadedModel) -> Unembedding:
    """The model's unembedding; ``NoLMHeadError`` (a 422 in the API) when it has none."""
    if loaded.unembed is None:
        raise NoLMHeadError(loaded.name, loaded.lm_head_reason or "none was found")
    return loaded.unembed


def final_norm(loaded: LoadedModel) -> torch.nn.Module:
    """The family's final norm module (a decoder's ``norm`` / ``ln_f`` / ``final_layer_norm``)."""
    assert loaded.arch is not None and loaded.arch.final_norm is not None
    return resolve(loaded.model, loaded.arch.final_norm)


def token_str(loaded: LoadedModel, token_id: int) -> str:
    """A token as text (``decode`` of the one id: spaces and newlines as they print)."""
    return str(loaded.tokenizer.decode([int(token_id)]))


def token_id(loaded: LoadedModel, token: str | int) -> int:
    """A target given as an id or as the text of exactly one token (leading space included)."""
    vocab = head_of(loaded).vocab_size
    if isinstance(token, int) and not isinstance(token, bool):
        if not 0 <= token < vocab:
            raise HeadscopeError(
                f"token id {token} is out of range: the vocabulary has ids 0-{vocab - 1}"
            )
        return token
    ids = loaded.tokenizer(str(token), add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise HeadscopeError(
            f"target {token!r} is {len(ids)} tokens for {loaded.name}; a target must be exactly one token"
        )
    return int(ids[0])


@dataclass
class Stream:
    """One text's forward pass: the residual stream of every layer, the final norm's output and (made
    on first use, ``[n, vocabulary]``: 268 MB on Gemma 3 at n = 256) the final logits."""

    states: torch.Tensor  # [state, token, dim]: X[0..L], X[L] before the final norm
    normed: torch.Tensor  # [token, dim]: the model's own final norm output N(X[L])
    contexts: list[
        torch.Tensor
    ]  # per layer [token, head*head_dim]: each head's output z (before W_O)
    unembed: Unembedding

    @functools.cached_property
    def logits(self) -> torch.Tensor:
        """[token, vocabulary] in the model's dtype."""
        with torch.inference_mode():
            return self.unembed.logits(self.normed)


@torch.inference_mode()
def stream(loaded: LoadedModel, encoded: Encoded) -> Stream:
    """Run ``encoded`` once, keeping every ``X[l]``, each layer's head outputs and the logits."""
    from workers.models.sublayers import locate

    unembed = head_of(loaded)
    arch = locate(loaded)
    keep: dict[str, Any] = {"ctx": []}
    handles = [
        final_norm(loaded).register_forward_pre_hook(lambda m, a: keep.__setitem__("last", a[0])),
        *[
            la.context_module.register_forward_pre_hook(lambda m, a: keep["ctx"].append(a[0]))
            for la in arch.layers
        ],
    ]
    try:
        out = loaded.model(**batch_inputs(loaded, [encoded]), output_hidden_states=True)
    finally:
        for h in handles:
            h.remove()
    states = torch.stack([*out.hidden_states[:-1], keep["last"]])[:, 0]  # [state, n, d]
    return Stream(states, out.last_hidden_state[0], [c[0] for c in keep["ctx"]], unembed)


def resolve_target(
    loaded: LoadedModel, encoded: Encoded, target: TargetSpec, last_top: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """Per position the target token ``a`` [n] and, for a pair, ``b`` [n] (else None).

    ``None``: the text's own next token, and at the last position the model's top prediction
    ``last_top``; a token (text or id) at every position; ``[a, b]``: the logit difference.
    """
    n = encoded.n
    if target is None:
        a = np.asarray([*encoded.input_ids[1:], last_top], dtype=np.int64)
        return a, None
    if isinstance(target, list | tuple):
        if len(target) != 2:
            raise HeadscopeError(f"a target pair has two tokens [a, b], got {len(target)}")
        ia, ib = token_id(loaded, target[0]), token_id(loaded, target[1])
        return np.full(n, ia, dtype=np.int64), np.full(n, ib, dtype=np.int64)
    return np.full(n, token_id(loaded, target), dtype=np.int64), None


@torch.inference_mode()
def predictions(
    loaded: LoadedModel, encoded: Encoded, *, k: int = 10, run: Stream | None = None
) -> dict[str, Any]:
    """docs/causal.md: predictions: per position the top-k next tokens and the text's own next token's rank,
    log-probability (natural log) and surprisal in bits.

    Keys: ``top_ids``/``top_tokens``/``top_probs`` [n][k], ``next_rank``/``next_logprob``/
    ``surprisal_bits`` [n-1] (position t scores token t+1). Read by ``read_vocab`` (vocabulary blocks,
    the log-sum-exp in float64), never as an ``[n, vocabulary]`` array.
    """
    run = run or stream(loaded, encoded)
    unembed = head_of(loaded)
    k = min(int(k), unembed.vocab_size)
    nxt = torch.tensor(
        [*encoded.input_ids[1:], -1], device=run.normed.device
    )  # the last position has none
    read = read_vocab(unembed, run.normed, k=k, ids=nxt, exact_sum=True)
    out: dict[str, Any] = {
        "top_ids": read.top_ids.cpu().numpy(),
        "top_probs": read.logprob_top().exp().cpu().numpy(),
        "next_rank": read.rank[:-1].cpu().numpy(),  # type: ignore[index]
        "next_logprob": read.logprob_own()[:-1].cpu().numpy(),
    }
    out["top_tokens"] = [[token_str(loaded, i) for i in row] for row in out["top_ids"]]
    out["surprisal_bits"] = -out["next_logprob"] / LN2
    out["k"] = k
    return out


@torch.inference_mode()
def logit_lens(
    loaded: LoadedModel,
    encoded: Encoded,
    *,
    run: Stream | None = None,
    positions: Sequence[int] | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """docs/causal.md: logit lens: every ``X[l]`` through the final norm (its statistics taken on ``X[l]``)
    and the unembedding. Keys: ``top_ids``/``top_tokens``/``top_probs`` [L+1][n] (the top token),
    ``next_rank``/``next_prob`` [L+1][n-1]. Row L is the model's own prediction.

    ``positions``: read only these positions' states (the lens of one position is its L+1 residual
    vectors, 1/n of the grid's arithmetic); the keys are then [L+1][p], ``next_rank``/``next_prob``
    included (0 and NaN at the last position, which has no next token), and ``positions`` lists them.

    All states at once through ``read_vocab`` (vocabulary blocks; no ``[state, n, vocabulary]`` array):
    float32 logits as the full product gives them, the log-sum-exp accumulated in float64."""
    progress = progress or no_progress
    run = run or stream(loaded, encoded)
    unembed, norm = head_of(loaded), final_norm(loaded)
    n_states, n = run.states.shape[0], run.states.shape[1]
    following = [*encoded.input_ids[1:], -1]  # the last position has none
    if positions is None:
        cols, states = list(range(n)), run.states
    else:
        cols = [int(t) for t in positions]
        bad = [t for t in cols if not 0 <= t < n]
        if bad or not cols:
            raise HeadscopeError(
                f"logit lens positions {bad or cols} are outside the text's 0..{n - 1}"
            )
        states = run.states[:, cols]
    p = len(cols)
    normed = norm(states).reshape(n_states * p, -1)  # [state * p, d]: each state's own statistics
    nxt = torch.tensor([following[t] for t in cols], device=normed.device)
    read = read_vocab(
        unembed,
        normed,
        ids=nxt.repeat(n_states),
        progress=lambda f: progress(f, f"logit lens: {n_states} states, vocabulary {f:.0%}"),
    )
    shape = (n_states, p)
    keep = slice(None, -1) if positions is None else slice(None)
    out: dict[str, Any] = {
        "top_ids": read.top_ids[:, 0].reshape(shape).cpu().numpy(),
        "top_probs": read.logprob_top()[:, 0].exp().reshape(shape).cpu().numpy(),
        "next_rank": read.rank.reshape(shape)[:, keep].cpu().numpy(),  # type: ignore[union-attr]
        "next_prob": read.logprob_own().exp().reshape(shape)[:, keep].cpu().numpy(),
    }
    out["top_tokens"] = [[token_str(loaded, i) for i in row] for row in out["top_ids"]]
    if positions is not None:
        out["positions"] = cols
    return out


@torch.inference_mode()
def logit_attribution(
    loaded: LoadedModel,
    encoded: Encoded,
    *,
    target: TargetSpec = None,
    text: str = "",
    progress: Progress | None = None,
) -> dict[str, Any]:
    """docs/causal.md: direct logit attribution, exact: the target's logit at each position split into
    ``input`` [n], ``heads`` [L][H][n], ``feedforward`` [L][n] and ``bias`` [n] (every norm's mean
    shift and bias, the value and output biases, ``b_U``), summing to ``logit`` [n].

    Built on the decomposition (docs/decomposition.md) of ``X[L]`` carried through the final norm with its scale
    frozen; a part p contributes ``u_t . (g * p / s_t)`` with ``u_t = W_U[a_t]`` (or
    ``W_U[a_t] - W_U[b_t]`` for a pair). ``max_abs_error``: ``max_t |sum of parts - logit_t|``.
    """
    from workers.analyses.decomposition.terms import decompose_encoded

    progress = progress or no_progress
    unembed = head_of(loaded)
    seen: dict[str, torch.Tensor] = {}  # transformers' own final norm output, from the same pass
    hook = final_norm(loaded).register_forward_hook(
        lambda m, a, out: seen.__setitem__("normed", out)
    )
    try:
        dec = decompose_encoded(loaded, [encoded], [text], keep_components=True, progress=progress)[
            0
        ]
    finally:
        hook.remove()
    assert dec.head_outputs is not None and dec.ff_outputs is not None
    L = dec.n_layers
    normed = seen["normed"][0, : encoded.n]  # [n, d]: the model's own final norm output
    # the full vocabulary is needed at the last position only (the default target there: the top token)
    a, b = resolve_target(loaded, encoded, target, int(unembed.logits(normed[-1]).argmax()))
    w_u = unembed.weight
    u = w_u[torch.as_tensor(a, device=w_u.device)]  # [n, d]
    if b is not None:
        u = u - w_u[torch.as_tensor(b, device=w_u.device)]
    u_np = u.cpu().numpy().astype(dec.states.dtype)
    heads = np.stack(
        [
            np.einsum(
                "htd,td->ht", dec.head_outputs[layer], u_np * dec._scale(dec.head_entry[layer], L)
            )
            for layer in range(L)
        ]
    )  # [L, H, n]
    ff = np.stack(
        [
            np.einsum("td,td->t", dec.ff_outputs[layer], u_np * dec._scale(dec.ff_entry[layer], L))
            for layer in range(L)
        ]
    )  # [L, n]
    terms = dec.terms[L]  # [term, n, d], the last state's terms with the final norm carried
    inp = np.einsum("td,td->t", terms[0], u_np)
    bias = np.einsum("td,td->t", terms[3], u_np)
    if unembed.bias is not None:
        bu = unembed.bias.cpu().numpy().astype(bias.dtype)
        bias = bias + bu[a] - (bu[b] if b is not None else 0.0)
    logit = unembed.logit_of(normed, torch.as_tensor(a, device=normed.device))
    if b is not None:
        logit = logit - unembed.logit_of(normed, torch.as_tensor(b, device=normed.device))
    logit_np = logit.cpu().numpy()
    total = inp + heads.sum(axis=(0, 1)) + ff.sum(axis=0) + bias
    err = float(np.abs(total - logit_np).max())
    progress(1.0, "logit attribution done")
    return {
        "input": inp,
        "heads": heads,
        "feedforward": ff,
        "bias": bias,
        "logit": logit_np,
        "target": a,
        "target_b": b,
        "target_tokens": [token_str(loaded, i) for i in a],
        "target_b_tokens": None if b is None else [token_str(loaded, i) for i in b],
        "max_abs_error": err,
        "rel_error": err / max(float(np.abs(logit_np).max()), 1e-30),
        "dtype": dec.dtype,
        "scale": FROZEN,
        "softcap": unembed.softcap,  # the attributed logit is the uncapped one (docs/causal.md)
    }


@torch.inference_mode()
def continue_text(
    loaded: LoadedModel,
    encoded: Encoded,
    text: str,
    *,
    n_tokens: int,
    temperature: float = 0.0,
    seed: int = 0,
    progress: Progress | None = None,
) -> tuple[Encoded, str, list[float]]:
    """docs/causal.md: continuation: ``n_tokens`` tokens appended greedily (``temperature`` 0) or sampled at
    ``temperature`` with ``seed``; stops early after an end-of-sequence token. Returns the extended
    encoding (generated tokens are its last ones, offsets into the extended text), the extended text
    and each generated token's probability under the distribution it was drawn from."""
    progress = progress or no_progress
    unembed = head_of(loaded)
    if encoded.n + n_tokens > loaded.max_length:
        raise HeadscopeError(
            f"the text has {encoded.n} tokens; with {n_tokens} more it would pass {loaded.name}'s limit "
            f"of {loaded.max_length}"
        )
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    ids = torch.tensor([encoded.input_ids], device=loaded.device)
    out = loaded.model(input_ids=ids, use_cache=True)
    past, new, probs = cache_out(out), [], []
    key = cache_kwarg(loaded)
    eos = loaded.tokenizer.eos_token_id
    for step in range(n_tokens):
        logits = unembed.logits(out.last_hidden_state[0, -1]).double()  # [vocabulary]
        if temperature > 0:
            p = torch.softmax(logits / temperature, dim=-1).cpu()
            nxt = int(torch.multinomial(p, 1, generator=gen))
        else:
            p = torch.softmax(logits, dim=-1).cpu()
            nxt = int(logits.argmax())
        new.append(nxt)
        probs.append(float(p[nxt]))
        progress((step + 1) / n_tokens, f"continuation: token {step + 1}/{n_tokens}")
        if eos is not None and nxt == eos:
            break
        out = loaded.model(
            input_ids=torch.tensor([[nxt]], device=loaded.device), use_cache=True, **{key: past}
        )
        past = cache_out(out)
    pieces, before = [], ""
    for i in range(len(new)):  # each token's text: the growth of the decoded continuation
        upto = str(loaded.tokenizer.decode(new[: i + 1]))
        pieces.append(upto[len(before) :] if upto.startswith(before) else token_str(loaded, new[i]))
        before = upto
    offsets, pos = list(encoded.offsets), len(text)
    for piece in pieces:
        offsets.append((pos, pos + len(piece)))
        pos += len(piece)
    special = loaded.tokenizer.all_special_ids
    ext = Encoded(
        [*encoded.input_ids, *new],
        [*encoded.tokens, *loaded.tokenizer.convert_ids_to_tokens(new)],
        offsets,
        [*encoded.special, *[t in special for t in new]],
    )
    return ext, text + "".join(pieces), probs
