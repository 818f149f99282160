"""Where a model's sublayers live and the hooks that record them for the decomposition.

BERT family (post-LayerNorm) and GPT-2 (pre-LayerNorm): for each layer the attention output
projection ``W_O`` (with the value bias mapped through it), the feed-forward output bias, and the
LayerNorms on the residual path; forward hooks keep each sublayer's raw input or output.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from workers.errors import HeadscopeError
from workers.models.adapters import Encoded

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel

logger = logging.getLogger(__name__)


@dataclass
class LayerParts:
    """Where one layer's pieces live in the HF module tree."""

    w_o: torch.Tensor  # [head*head_dim, dim]: out = context @ w_o + b_o
    attn_bias: torch.Tensor  # [dim]: b_o + b_v @ w_o
    ff_bias: torch.Tensor  # [dim]
    context_module: torch.nn.Module  # input: concatenated head outputs, value bias included
    b_v: torch.Tensor  # [head*head_dim]
    ff_module: torch.nn.Module  # its output is the feed-forward output (bias included)
    ln_attn: torch.nn.LayerNorm | None  # post-LN after attention (None for pre-LN models)
    ln_ff: torch.nn.LayerNorm | None


@dataclass
class Arch:
    """A model's decomposition-relevant parts, in forward order."""

    family: str
    n_heads: int
    emb_ln: torch.nn.LayerNorm | None  # BERT's embedding LayerNorm; its input is i
    layers: list[LayerParts]
    final_ln: torch.nn.LayerNorm | None  # GPT-2's ln_f (applied to the last state only)


def locate(loaded: LoadedModel) -> Arch:
    """Locate the weights the decomposition needs (BERT family or GPT-2)."""
    model = loaded.model
    layers: list[LayerParts] = []
    if loaded.family == "bert":
        for layer in model.encoder.layer:
            att = layer.attention
            w_o = att.output.dense.weight.T  # nn.Linear: x @ W.T + b
            b_v = att.self.value.bias
            layers.append(
                LayerParts(
                    w_o,
                    att.output.dense.bias + b_v @ w_o,
                    layer.output.dense.bias,
                    att.output.dense,
                    b_v,
                    layer.output.dense,
                    att.output.LayerNorm,
                    layer.output.LayerNorm,
                )
            )
        return Arch("bert", loaded.n_heads, model.embeddings.LayerNorm, layers, None)
    if loaded.family == "gpt2":
        d = model.config.hidden_size
        for block in model.h:
            w_o = block.attn.c_proj.weight  # Conv1D: x @ W + b, W [in, out]
            b_v = block.attn.c_attn.bias[2 * d : 3 * d]
            layers.append(
                LayerParts(
                    w_o,
                    block.attn.c_proj.bias + b_v @ w_o,
                    block.mlp.c_proj.bias,
                    block.attn.c_proj,
                    b_v,
                    block.mlp.c_proj,
                    None,
                    None,
                )
            )
        return Arch("gpt2", loaded.n_heads, None, layers, model.ln_f)
    raise HeadscopeError(f"the decomposition does not support the {loaded.family!r} family")


def ln_stats(
    ln: torch.nn.LayerNorm, x: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Scale ``g / s`` [b, n, d], shift ``b - g * m / s`` [b, n, d] and std ``s`` [b, n] of a LayerNorm."""
    mean = x.mean(dim=-1, keepdim=True)
    std = torch.sqrt(x.var(dim=-1, unbiased=False, keepdim=True) + ln.eps)
    gain = ln.weight if ln.weight is not None else torch.ones_like(x[0, 0])
    bias = ln.bias if ln.bias is not None else torch.zeros_like(x[0, 0])
    scale = gain / std
    return scale, bias - scale * mean, std[..., 0]


class Recorder:
    """Forward hooks that keep each sublayer's raw input or output for one forward pass."""

    def __init__(self, arch: Arch):
        self.ln_in: dict[int, torch.Tensor] = {}  # id(LayerNorm) -> its input
        self.context: list[torch.Tensor] = []  # per layer [b, n, head*head_dim]
        self.ff_out: list[torch.Tensor] = []  # per layer [b, n, dim]
        self.handles: list[Any] = []
        lns = [arch.emb_ln, arch.final_ln] + [
            ln for la in arch.layers for ln in (la.ln_attn, la.ln_ff)
        ]
        for ln in lns:
            if ln is not None:
                self.handles.append(ln.register_forward_pre_hook(self._keep_ln))
        for la in arch.layers:
            self.handles.append(la.context_module.register_forward_pre_hook(self._keep_context))
            self.handles.append(la.ff_module.register_forward_hook(self._keep_ff))

    def _keep_ln(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        self.ln_in[id(module)] = args[0]

    def _keep_context(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        self.context.append(args[0])

    def _keep_ff(
        self, module: torch.nn.Module, args: tuple[Any, ...], output: torch.Tensor
    ) -> None:
        self.ff_out.append(output)

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
    if loaded.family == "bert" and loaded.config.get("type_vocab_size", 0) > 0:
        inputs["token_type_ids"] = torch.zeros_like(ids)
    return inputs
