"""Exact additive decomposition of every hidden state (docs/decomposition.md; Mickus et al. 2022, eqs. 1-5, app. A).

Every hidden state splits as ``X[l] = i + h + f + c`` per token:

- ``input`` (i): the input embedding (word + position + segment), carried through each LayerNorm
  after it as ``t -> g * t / s`` (gain times the term, over the std ``s`` of the LayerNorm's
  whole input vector, eps included: ``s = sqrt(var + eps)``);
- ``attention`` (h): the unbiased multi-head attention outputs ``sum_h sum_t' a x_t' W_V,h W_O,h`` of
  every layer, carried likewise; also available per (layer, head);
- ``feedforward`` (f): the unbiased feed-forward outputs of every layer, carried likewise;
- ``bias`` (c): everything else: LayerNorm biases and mean shifts ``b - g * mean / s``, value biases
  mapped through ``W_O``, attention and feed-forward output biases, each carried like the others.

Post-LayerNorm encoders (BERT family): the embedding LayerNorm gives state 0, the two LayerNorms of
layer l give state l + 1. Pre-norm decoders (GPT-2, Llama, Mistral, Qwen2, Qwen3, GPT-NeoX): the
residual stream is already a sum (state 0 = the embedding); the norms inside the branches need no
term (the branch outputs are recorded); HF's last hidden state has the final norm applied, so the
terms of the last state are carried through it the same way (``Decomposition.final_norm_in_last_state``).
RMSNorm maps ``t -> g * t / rms(x)``, ``rms(x) = sqrt(mean(x^2) + eps)``: no mean shift, no bias.
GPT-NeoX's parallel residual adds both branches, each read from the same input: still a sum.
Gemma 2 and 3 (sandwich norms) normalise each branch's output before it joins the stream: that
post-norm's scale ``(1 + w) / rms(o)`` is frozen at the model's own value (as the final norm's is) and
carried with the branch, so every head's share (and the biases') is scaled by it and the sum holds.
Value biases go to ``c`` as ``(sum_j a_ij) b_v W_O`` with the recorded row sums, so a softmax computed
in float32 inside a float64 model costs no exactness; under grouped-query attention a key/value
head's bias goes to every query head of its group.

Importance (paper eq. 6): ``mu(e, t) = e.t / |e|^2`` with ``e`` the model's own hidden state, so the
four importances of a token sum to 1 up to the reconstruction error.

Notebook use::

    from workers.models import load_model
    from workers.analyses.decomposition import decompose
    dec = decompose(load_model("minilm", dtype="float64"), "The cat sat on the mat.")
    dec.importance          # [state, token, term]
    vecs, labels = dec.components(6, level="heads")   # like TransformerLens' decompose_resid
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from workers.core.errors import HeadscopeError
from workers.core.progress import Progress, no_progress
from workers.models.adapters import Encoded, encode
from workers.models.precision import norm_gain
from workers.models.sublayers import Recorder, batch_inputs, ln_stats, locate

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel

logger = logging.getLogger(__name__)

TERM_LABELS: tuple[str, ...] = ("input", "attention", "feedforward", "bias")
CONVENTION = (
    "X[l] = input + attention + feedforward + bias per token. Each LayerNorm maps every term t to "
    "g*t/s (s = sqrt(var(x) + eps) of its whole input x); its mean shift -g*mean(x)/s and its bias b "
    "go to the bias term; an RMSNorm maps t to g*t/rms(x) (rms(x) = sqrt(mean(x^2) + eps)), with no "
    "mean shift and no bias. Attention and feed-forward terms are the sublayer outputs without their "
    "biases; value biases (through W_O) and output biases go to the bias term. "
    "Importance mu(e, t) = e.t/|e|^2 with e the model's hidden state."
)


@dataclass
class Decomposition:
    """One text's decomposition. Terms and labels, like TransformerLens' ``decompose_resid``.

    Shapes: ``states`` [state, token, dim] (the model's hidden states ``X[0..L]``); ``terms``
    [state, term, token, dim] in ``labels`` order; ``head_importance`` [state, layer, head, token]
    (``mu`` of one head's carried output; zero for layers at or above the state);
    ``ff_importance`` [state, layer, token].
    """

    model: str
    family: str
    text: str
    encoded: Encoded
    dtype: str
    states: np.ndarray  # [state, token, dim]
    terms: np.ndarray  # [state, term, token, dim]
    head_importance: np.ndarray  # [state, layer, head, token]
    ff_importance: np.ndarray  # [state, layer, token]
    final_norm_in_last_state: bool
    labels: tuple[str, ...] = TERM_LABELS
    head_outputs: np.ndarray | None = (
        None  # [layer, head, token, dim] unbiased, before any LayerNorm
    )
    ff_outputs: np.ndarray | None = None  # [layer, token, dim] unbiased, before any LayerNorm
    ln_std: np.ndarray | None = None  # [layernorm, token]: s = sqrt(var + eps)
    ln_gain: np.ndarray | None = None  # [layernorm, dim]
    ln_applied: list[int] = field(default_factory=list)  # per state: LayerNorms applied so far
    head_entry: list[int] = field(
        default_factory=list
    )  # per layer: LayerNorms applied before its heads
    ff_entry: list[int] = field(default_factory=list)
    final_norm_deviation: float = 0.0  # max |own final norm - transformers' own| (rounding only)

    @property
    def tokens(self) -> list[str]:
        return self.encoded.tokens

    @property
    def special(self) -> np.ndarray:
        return np.asarray(self.encoded.special, dtype=bool)

    @property
    def n_layers(self) -> int:
        return int(self.head_importance.shape[1])

    @property
    def n_heads(self) -> int:
        return int(self.head_importance.shape[2])

    @property
    def reconstruction(self) -> np.ndarray:
        """[state, token, dim]: ``i + h + f + c``."""
        return self.terms.sum(axis=1)

    @property
    def max_abs_error(self) -> np.ndarray:
        """[state]: ``|i + h + f + c - X[l]|_inf``."""
        return np.abs(self.reconstruction - self.states).max(axis=(1, 2))

    @property
    def max_rel_error(self) -> np.ndarray:
        """[state]: ``max over tokens of |i + h + f + c - X[l]|_2 / |X[l]|_2`` (decoders' states reach
        the thousands, so the absolute error alone says little)."""
        err = np.linalg.norm(self.reconstruction - self.states, axis=2)  # [state, token]
        norm = np.linalg.norm(self.states, axis=2)
        return (err / np.where(norm > 0, norm, 1.0)).max(axis=1)

    @property
    def importance(self) -> np.ndarray:
        """[state, token, term]: ``mu(X[l], t) = X[l].t / |X[l]|^2``."""
        e = self.states  # [state, token, dim]
        norm2 = np.einsum("std,std->st", e, e)
        dots = np.einsum("sktd,std->stk", self.terms, e)
        return dots / np.where(norm2 > 0, norm2, 1.0)[..., None]

    def _scale(self, entry: int, state: int) -> np.ndarray:
        """[token, dim]: the product of ``g / s`` of the LayerNorms from ``entry`` up to ``state``."""
        assert self.ln_std is not None and self.ln_gain is not None
        out = np.ones((self.encoded.n, self.states.shape[2]), dtype=self.states.dtype)
        for ln in range(entry, self.ln_applied[state]):
            out *= self.ln_gain[ln][None, :] / self.ln_std[ln][:, None]
        return out

    def components(self, state: int, *, level: str = "terms") -> tuple[np.ndarray, list[str]]:
        """The summands of ``X[state]``: ([component, token, dim], labels); they add up to the state.

        ``level``: ``terms`` (input, attention, feedforward, bias), ``layers`` (input, then
        ``L{l}.attn`` and ``L{l}.ff`` for each layer below the state, then bias) or ``heads``
        (input, ``L{l}H{h}`` for each head, ``L{l}.ff``, bias).
        """
        n_states = self.states.shape[0]
        if not 0 <= state < n_states:
            raise HeadscopeError(f"state {state} is out of range 0..{n_states - 1}")
        t = self.terms[state]
        if level == "terms":
            return t, list(self.labels)
        if level not in {"layers", "heads"}:
            raise HeadscopeError(f"unknown level {level!r}; use terms, layers or heads")
        if self.head_outputs is None or self.ff_outputs is None:
            raise HeadscopeError("this decomposition was computed without keep_components=True")
        parts, labels = [t[0]], ["input"]
        for layer in range(state):  # state l is the output of layer l - 1
            scale = self._scale(self.head_entry[layer], state)
            heads = self.head_outputs[layer] * scale[None]  # [head, token, dim]
            if level == "heads":
                parts.extend(heads)
                labels.extend(f"L{layer}H{h}" for h in range(heads.shape[0]))
            else:
                parts.append(heads.sum(axis=0))
                labels.append(f"L{layer}.attn")
            parts.append(self.ff_outputs[layer] * self._scale(self.ff_entry[layer], state))
            labels.append(f"L{layer}.ff")
        parts.append(t[3])
        labels.append("bias")
        return np.stack(parts), labels


def _carry(scales: list[torch.Tensor], start: int, stop: int) -> torch.Tensor | None:
    """The product of the norms' ``g / s`` [b, n, d] from norm ``start`` up to ``stop`` (None: none)."""
    out = None
    for k in range(start, stop):
        out = scales[k] if out is None else out * scales[k]
    return out


@torch.inference_mode()
def decompose_encoded(
    loaded: LoadedModel,
    encs: list[Encoded],
    texts: list[str],
    *,
    keep_components: bool = True,
    progress: Progress | None = None,
) -> list[Decomposition]:
    """Decompose a batch of already-tokenised texts (right-padded; padding never enters a term).

    Memory: one forward pass, then per layer its context vectors [b, n, heads*head_dim] and its
    feed-forward output [b, n, d]; per-head outputs [head, n, d] are never all held (head
    importances are ``context_h . (w W_O,h^T)``) unless ``keep_components``.
    """
    progress = progress or no_progress
    arch = locate(loaded)
    rec = Recorder(arch)
    try:
        out = loaded.model(**batch_inputs(loaded, encs), output_hidden_states=True)
    finally:
        rec.remove()
    progress(0.5, "decomposition: forward pass done")
    hidden = torch.stack(out.hidden_states)  # [state, b, n, d]
    n_layers, n_heads = len(arch.layers), arch.n_heads
    n_states = n_layers + 1
    b, n, d = hidden.shape[1:]
    terms = torch.zeros((4, b, n, d), dtype=hidden.dtype, device=hidden.device)  # [term, b, n, d]
    scales: list[torch.Tensor] = []  # per norm [b, n, d]: g / s
    stds: list[torch.Tensor] = []  # per norm [b, n]
    gains: list[torch.Tensor] = []
    state_terms: list[torch.Tensor] = []
    applied: list[int] = []
    contexts: list[torch.Tensor] = []  # per layer [b, n, head*head_dim], value bias removed
    ffs: list[torch.Tensor] = []  # per layer [b, n, d], output bias removed
    head_entry: list[int] = []
    ff_entry: list[int] = []
    branch_scales: list[torch.Tensor | None] = []  # per layer: the attention post-norm's g / rms

    def norm(ln: torch.nn.Module | None) -> torch.Tensor | None:
        if ln is None:
            return None
        x = rec.ln_in[id(ln)]
        scale, shift, std = ln_stats(ln, x)
        terms.mul_(scale)
        terms[3].add_(shift)
        scales.append(scale)
        stds.append(std)
        gains.append(
            norm_gain(ln)
            if getattr(ln, "weight", None) is not None
            else torch.ones_like(scale[0, 0])
        )
        return x * scale + shift  # the norm's output, in the model's dtype

    def branch(ln: torch.nn.Module | None) -> torch.Tensor | None:
        """``g / rms`` [b, n, d] of a norm on one branch's output: frozen at the model's own value,
        it is a linear map of that output, so each head's (or the feed-forward's) share keeps its sum."""
        return None if ln is None else ln_stats(ln, rec.ln_in[id(ln)])[0]

    x0 = rec.ln_in[id(arch.emb_ln)] if arch.emb_ln is not None else hidden[0]
    terms[0].add_(x0)
    norm(arch.emb_ln)
    state_terms.append(terms.clone())
    applied.append(len(scales))
    final_deviation = 0.0
    for layer, la in enumerate(arch.layers):
        ctx = rec.context[layer]  # [b, n, head*head_dim]
        dh = ctx.shape[-1] // n_heads
        # value bias times each query's attention row sum (1 up to the softmax's own rounding)
        vb = (
            rec.row_sums[layer].to(ctx.dtype).repeat_interleave(dh, dim=-1) * la.b_v
        )  # [b, n, head*head_dim]
        unbiased = ctx - vb
        contexts.append(unbiased)
        head_entry.append(len(scales))
        post_a = branch(la.post_attn)  # a sandwich post-norm scales the attention output alone
        branch_scales.append(post_a)
        terms[1].add_(_weighted(unbiased @ la.w_o, post_a))
        terms[3].add_(_weighted(vb @ la.w_o + la.b_o, post_a))
        norm(la.ln_attn)
        post_f = branch(la.post_ff)
        f = _weighted(rec.ff_out[layer] - la.ff_bias, post_f)  # [b, n, d]
        ffs.append(f)
        ff_entry.append(len(scales))
        terms[2].add_(f)
        terms[3].add_(_weighted(la.ff_bias.expand_as(f), post_f))
        norm(la.ln_ff)
        if layer == n_layers - 1 and arch.final_ln is not None:
            # the final norm's output recomputed from the carried terms' scale: equal to the
            # model's own up to rounding (its deviation is reported)
            own = norm(arch.final_ln)
            assert own is not None
            final_deviation = float((own - hidden[-1]).abs().max())
            hidden = torch.cat([hidden[:-1], own[None]])
        state_terms.append(terms.clone())
        applied.append(len(scales))
        progress(
            0.5 + 0.25 * (layer + 1) / n_layers, f"decomposition: layer {layer + 1}/{n_layers}"
        )

    # importances: mu(e, t) = e.t / |e|^2 for each head's and each feed-forward's carried output
    norm2 = (hidden * hidden).sum(-1, keepdim=True)
    w = hidden / torch.where(norm2 > 0, norm2, torch.ones_like(norm2))  # [state, b, n, d]
    head_imp = torch.zeros(
        (n_states, n_layers, b, n_heads, n), dtype=hidden.dtype, device=hidden.device
    )
    ff_imp = torch.zeros((n_states, n_layers, b, n), dtype=hidden.dtype, device=hidden.device)
    for layer, la in enumerate(arch.layers):
        later = range(layer + 1, n_states)
        wh = torch.stack(
            [
                _weighted(
                    _weighted(w[s], _carry(scales, head_entry[layer], applied[s])),
                    branch_scales[layer],
                )
                for s in later
            ]
        )
        v = wh @ la.w_o.T  # [state', b, n, head*head_dim]
        ctx = contexts[layer]
        prod = (ctx[None] * v).view(len(later), b, n, n_heads, -1).sum(-1)  # [state', b, n, head]
        head_imp[layer + 1 :, layer] = prod.transpose(-1, -2)
        for s in later:
            ff_imp[s, layer] = (
                ffs[layer] * _weighted(w[s], _carry(scales, ff_entry[layer], applied[s]))
            ).sum(-1)
        progress(
            0.75 + 0.25 * (layer + 1) / n_layers,
            f"decomposition: importances {layer + 1}/{n_layers}",
        )

    def np_(t: torch.Tensor) -> np.ndarray:
        return t.detach().cpu().numpy()

    dtype = str(hidden.dtype).removeprefix("torch.")
    all_terms = torch.stack(state_terms)  # [state, term, b, n, d]
    results = []
    for row, (enc, text) in enumerate(zip(encs, texts, strict=True)):
        k = enc.n
        dec = Decomposition(
            model=loaded.name,
            family=arch.family,
            text=text,
            encoded=enc,
            dtype=dtype,
            states=np_(hidden[:, row, :k]),
            terms=np_(all_terms[:, :, row, :k]),
            head_importance=np_(head_imp[:, :, row, :, :k]),
            ff_importance=np_(ff_imp[:, :, row, :k]),
            final_norm_in_last_state=arch.final_ln is not None,
            ln_applied=applied,
            head_entry=head_entry,
            ff_entry=ff_entry,
            final_norm_deviation=final_deviation,
        )
        if keep_components:
            heads = [
                _weighted(
                    torch.matmul(
                        c[row, :k].view(k, n_heads, -1).transpose(0, 1),
                        la.w_o.reshape(n_heads, -1, d),
                    ),
                    None if post is None else post[row, :k],
                )
                for c, la, post in zip(contexts, arch.layers, branch_scales, strict=True)
            ]  # per layer [head, token, d], after the branch's post-norm
            dec.head_outputs = np_(torch.stack(heads))
            dec.ff_outputs = np_(torch.stack([f[row, :k] for f in ffs]))
            if stds:
                dec.ln_std = np_(torch.stack([s[row, :k] for s in stds]))
                dec.ln_gain = np_(torch.stack(gains))
            else:
                dec.ln_std = np.zeros((0, k), dtype=dec.states.dtype)
                dec.ln_gain = np.zeros((0, d), dtype=dec.states.dtype)
        results.append(dec)
    return results


def _weighted(w: torch.Tensor, carry: torch.Tensor | None) -> torch.Tensor:
    return w if carry is None else w * carry


def decompose_batch(
    loaded: LoadedModel, texts: list[str], *, truncate: bool = False, keep_components: bool = True
) -> list[Decomposition]:
    """Decompose several texts in one padded forward pass; one result per text."""
    if not texts:
        raise HeadscopeError("no texts to decompose")
    encs = [encode(loaded, t, truncate=truncate) for t in texts]
    return decompose_encoded(loaded, encs, list(texts), keep_components=keep_components)


def decompose(
    loaded: LoadedModel, text: str, *, truncate: bool = False, keep_components: bool = True
) -> Decomposition:
    """Decompose every hidden state of ``text`` into input, attention, feedforward and bias terms.

    The precision is the model's: load it with ``dtype="float64"`` for errors below 1e-9.
    ``keep_components=False`` drops the per-head vectors (``components(level="heads")``) to save memory.
    """
    return decompose_batch(loaded, [text], truncate=truncate, keep_components=keep_components)[0]
