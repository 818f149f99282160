"""Where a model's sublayers live and the hooks that record them for the decomposition.

Every family of ``workers.models.families``: for each layer the attention output projection ``W_O``,
the value bias per query head, the output and feed-forward biases, and the norms on the residual path
(BERT's post-LayerNorms; a decoder's final norm, LayerNorm or RMSNorm); forward hooks keep each
sublayer's raw input or output and the row sums of each layer's attention weights.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from workers.core.errors import HeadscopeError
from workers.models.adapters import Encoded
from workers.models.families import resolve
from workers.models.precision import norm_gain

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel

logger = logging.getLogger(__name__)


@dataclass
class Sublayers:
    """Where one layer's pieces live in the HF module tree."""

    w_o: torch.Tensor  # [head*head_dim, dim]: out = context @ w_o + b_o
    b_o: torch.Tensor  # [dim] attention output bias (zeros when the family has none)
    ff_bias: torch.Tensor  # [dim]
    context_module: torch.nn.Module  # input: concatenated query-head outputs, value bias included
    b_v: torch.Tensor  # [head*head_dim]: value bias per *query* head (GQA groups expanded)
    ff_module: torch.nn.Module  # its output is the feed-forward output (bias included)
    ln_attn: torch.nn.Module | None  # post-LN after attention (None for pre-norm models)
    ln_ff: torch.nn.Module | None
    attention: torch.nn.Module  # returns (output, weights): the row sums of the weights scale b_v
    post_attn: torch.nn.Module | None = None  # a norm on the attention output alone (Gemma 2/3)
    post_ff: torch.nn.Module | None = None  # a norm on the feed-forward output alone


@dataclass
class Arch:
    """A model's decomposition-relevant parts, in forward order."""

    family: str
    n_heads: int
    emb_ln: torch.nn.Module | None  # BERT's embedding LayerNorm; its input is i
    layers: list[Sublayers]
    final_ln: torch.nn.Module | None  # a decoder's final norm (applied to the last state only)


def _zeros(like: torch.Tensor, size: int) -> torch.Tensor:
    return torch.zeros(size, dtype=like.dtype, device=like.device)


def _bias(module: torch.nn.Module, size: int, like: torch.Tensor) -> torch.Tensor:
    b = getattr(module, "bias", None)
    return b if b is not None else _zeros(like, size)


def _value_bias(loaded: LoadedModel, layer: torch.nn.Module, w_o: torch.Tensor) -> torch.Tensor:
    """[query head * head_dim]: the value bias each query head's output carries (zeros if none)."""
    fam, n_heads = loaded.arch, loaded.n_heads
    assert fam is not None
    width = w_o.shape[0]
    dh = width // n_heads
    if fam.layout == "bert":
        return layer.attention.self.value.bias
    if fam.layout == "gpt2":
        d = w_o.shape[1]
        return layer.attn.c_attn.bias[2 * d : 3 * d]
    if fam.layout == "gpt_neox":  # fused per head: [head, (q, k, v), head_dim]
        b = layer.attention.query_key_value.bias
        return _zeros(w_o, width) if b is None else b.view(n_heads, 3, dh)[:, 2].reshape(-1)
    v_proj = getattr(layer.self_attn, "v_proj", None)  # llama layout: [kv_head * head_dim]
    if v_proj is None:  # Phi-3: fused q/k/v, [q heads, kv heads, kv heads] x head_dim
        fused = layer.self_attn.qkv_proj.bias
        b = None if fused is None else fused[fused.shape[0] - (fused.shape[0] - width) // 2 :]
    else:
        b = v_proj.bias
    if b is None:
        return _zeros(w_o, width)
    group = n_heads // max(1, loaded.n_kv_heads)
    return b.view(-1, dh).repeat_interleave(group, dim=0).reshape(-1)


def layer_stack(loaded: LoadedModel) -> tuple[torch.nn.Module, str, torch.nn.ModuleList]:
    """The module that holds ``loaded``'s layer list, the list's attribute name on it, and the list
    (``(model.encoder, "layer", model.encoder.layer)`` for BERT): what a forward that starts at a
    later layer swaps (``causal.interventions.from_layer``) and what per-layer hooks walk."""
    fam = loaded.arch
    assert fam is not None
    parent_path, _, attr = fam.layers.rpartition(".")
    parent = resolve(loaded.model, parent_path) if parent_path else loaded.model
    return parent, attr, getattr(parent, attr)


def locate(loaded: LoadedModel) -> Arch:
    """Locate the weights the decomposition needs (any family in ``workers.models.families``)."""
    fam = loaded.arch
    if fam is None:
        raise HeadscopeError(f"the decomposition does not support the {loaded.family!r} family")
    model = loaded.model
    layers: list[Sublayers] = []
    for layer in resolve(model, fam.layers):
        out_proj = resolve(layer, fam.out_proj)
        ff = resolve(layer, fam.ff_out)
        # nn.Linear computes x @ W.T + b; GPT-2's Conv1D computes x @ W + b
        w_o = out_proj.weight if fam.layout == "gpt2" else out_proj.weight.T
        d = w_o.shape[1]
        post = fam.layout == "bert"
        sandwich = [resolve(layer, p) for p in fam.post_norms] if fam.post_norms else [None, None]
        layers.append(
            Sublayers(
                w_o=w_o,
                b_o=_bias(out_proj, d, w_o),
                ff_bias=_bias(ff, d, w_o),
                context_module=out_proj,
                b_v=_value_bias(loaded, layer, w_o),
                ff_module=ff,
                ln_attn=layer.attention.output.LayerNorm if post else None,
                ln_ff=layer.output.LayerNorm if post else None,
                attention=resolve(layer, fam.attention),
                post_attn=sandwich[0],
                post_ff=sandwich[1],
            )
        )
    emb_ln = model.embeddings.LayerNorm if fam.layout == "bert" else None
    final = resolve(model, fam.final_norm) if fam.final_norm else None
    return Arch(fam.name, loaded.n_heads, emb_ln, layers, final)


def ln_stats(
    ln: torch.nn.Module, x: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Scale ``g / s`` [b, n, d], shift ``b - g * m / s`` [b, n, d] and ``s`` [b, n] of a norm.

    LayerNorm: ``s = sqrt(var(x) + eps)``, ``m = mean(x)``. RMSNorm (no ``bias``, eps in
    ``variance_epsilon``): ``s = rms(x) = sqrt(mean(x^2) + eps)``, ``m = 0``, no bias. Gemma's
    RMSNorm: the same with gain ``1 + w`` (``workers.models.precision.norm_gain``).
    """
    gain = norm_gain(ln) if getattr(ln, "weight", None) is not None else torch.ones_like(x[0, 0])
    if isinstance(ln, torch.nn.LayerNorm):
        mean = x.mean(dim=-1, keepdim=True)
        std = torch.sqrt(x.var(dim=-1, unbiased=False, keepdim=True) + ln.eps)
        bias = ln.bias if ln.bias is not None else torch.zeros_like(x[0, 0])
        scale = gain / std
        return scale, bias - scale * mean, std[..., 0]
    eps = getattr(ln, "variance_epsilon", getattr(ln, "eps", 1e-6))
    rms = torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps)
    scale = gain / rms
    return scale, torch.zeros_like(scale), rms[..., 0]


class Recorder:
    """Forward hooks that keep each sublayer's raw input or output for one forward pass."""

    def __init__(self, arch: Arch):
        self.ln_in: dict[int, torch.Tensor] = {}  # id(LayerNorm) -> its input
        self.context: list[torch.Tensor] = []  # per layer [b, n, head*head_dim]
        self.ff_out: list[torch.Tensor] = []  # per layer [b, n, dim]
        self.row_sums: list[torch.Tensor] = []  # per layer [b, n, head]: sum_j a_ij of each query
        self.handles: list[Any] = []
        lns = [arch.emb_ln, arch.final_ln] + [
            ln for la in arch.layers for ln in (la.ln_attn, la.ln_ff, la.post_attn, la.post_ff)
        ]
        for ln in lns:
            if ln is not None:
                self.handles.append(ln.register_forward_pre_hook(self._keep_ln))
        for la in arch.layers:
            self.handles.append(la.context_module.register_forward_pre_hook(self._keep_context))
            self.handles.append(la.ff_module.register_forward_hook(self._keep_ff))
            self.handles.append(la.attention.register_forward_hook(self._keep_rows))

    def _keep_ln(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        self.ln_in[id(module)] = args[0]

    def _keep_context(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        self.context.append(args[0])

    def _keep_ff(
        self, module: torch.nn.Module, args: tuple[Any, ...], output: torch.Tensor
    ) -> None:
        self.ff_out.append(output)

    def _keep_rows(self, module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> None:
        weights = output[1]  # [b, head, query, key]
        self.row_sums.append(weights.sum(-1).transpose(1, 2))  # [b, query, head]

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def batch_inputs(loaded: LoadedModel, encs: list[Encoded]) -> dict[str, torch.Tensor]:
    """Right-padded ids and attention mask for a batch of encoded texts."""
    width = max(e.n for e in encs)
    ids = torch.full(
        (len(encs), width), loaded.pad_token_id, dtype=torch.long, device=loaded.device
    )
    mask = torch.zeros_like(ids)
    for row, e in enumerate(encs):
        ids[row, : e.n] = torch.tensor(e.input_ids, device=loaded.device)
        mask[row, : e.n] = 1
    inputs = {"input_ids": ids, "attention_mask": mask}
    if (
        loaded.arch is not None
        and loaded.arch.layout == "bert"
        and loaded.config.get("type_vocab_size", 0) > 0
    ):
        inputs["token_type_ids"] = torch.zeros_like(ids)
    return inputs
