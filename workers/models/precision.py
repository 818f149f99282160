"""The model's dtype end to end: what transformers computes in float32 whatever the dtype, redone in it.

Three places in transformers' decoders round a float64 model to float32 (docs/models.md, "Precision"):

- the eager attention of the Llama-like families and GPT-NeoX runs ``softmax(..., dtype=float32)``;
- ``LlamaRMSNorm`` (and its copies: Mistral, Qwen2, Qwen3, Phi-3) casts its input to float32, and
  Gemma's RMSNorms (gain ``1 + w``) do too;
- the rotary embedding computes its angles ``position * inv_freq`` and their cos/sin in float32.

With torch's AVX-512 kernels that float32 rounding differs between a padded batch and the single text
(~2e-7), so "float64" was float32-precise and machine-dependent. Here the attention is a registered
attention function (``ATTENTION``, named by the family table) whose softmax runs in the query's dtype,
and the norm and rotary modules get a forward that keeps float64 in float64. In float32 every one of
them computes exactly what transformers computes (same operations, same order); float16 and bfloat16
still upcast to float32 as transformers does.
"""

from __future__ import annotations

import types

import torch

from workers.models.families import DTYPE_EAGER as ATTENTION

_HALF = (torch.float16, torch.bfloat16)
_STATIC_ROPE = {"default", "linear", "llama3", "yarn"}  # inv_freq fixed at init (no dynamic update)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for half types (as transformers), the dtype itself otherwise."""
    return torch.float32 if dtype in _HALF else dtype


def eager_attention(
    module: torch.nn.Module,
    query: torch.Tensor,  # [batch, head, query, head_dim]
    key: torch.Tensor,  # [batch, kv_head, key, head_dim]
    value: torch.Tensor,  # [batch, kv_head, key, head_dim]
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    softcap: float | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' eager attention (Llama's, which covers GPT-NeoX's with one key/value group;
    Gemma 2's ``softcap``: scores become ``softcap * tanh(scores / softcap)`` before the mask) with the
    softmax in the query's dtype. Returns ``(output [batch, query, head, head_dim], weights [batch,
    head, query, key])``. The sliding window arrives in the mask (transformers builds it)."""
    groups = int(getattr(module, "num_key_value_groups", 1) or 1)
    if groups > 1:
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if softcap is not None:
        weights = torch.tanh(weights / softcap) * softcap
    if attention_mask is not None:
        weights = weights + attention_mask
    weights = torch.nn.functional.softmax(weights, dim=-1, dtype=_compute_dtype(query.dtype)).to(
        query.dtype
    )
    weights = torch.nn.functional.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


def register_attention() -> str:
    """Register ``eager_attention`` (and eager's mask) with transformers under ``ATTENTION``."""
    from transformers.masking_utils import AttentionMaskInterface, eager_mask
    from transformers.modeling_utils import AttentionInterface

    AttentionInterface.register(ATTENTION, eager_attention)
    AttentionMaskInterface.register(ATTENTION, eager_mask)
    return ATTENTION


def _rms_norm_forward(self: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``g * x / sqrt(mean(x^2) + eps)``, computed in float32 for float32 and half inputs (as
    transformers does) and in float64 for float64 ones."""
    dtype = x.dtype
    t = x.to(_compute_dtype(dtype))
    variance = t.pow(2).mean(-1, keepdim=True)
    t = t * torch.rsqrt(variance + self.variance_epsilon)
    return self.weight * t.to(dtype)


def _gemma_norm_forward(self: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Gemma's RMSNorm ``(1 + w) * x / sqrt(mean(x^2) + eps)``, in float32 for float32 and half inputs
    (as transformers: the gain is applied before the cast back) and in float64 for float64 ones."""
    dtype = x.dtype
    cd = _compute_dtype(dtype)
    t = x.to(cd)
    t = t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + self.eps)
    return (t * (1.0 + self.weight.to(cd))).to(dtype)


def norm_gain(norm: torch.nn.Module) -> torch.Tensor:
    """The gain an RMSNorm or LayerNorm multiplies by: ``w``, or ``1 + w`` for Gemma's RMSNorms
    (their weight is stored centred on 0)."""
    if _is_gemma_norm(norm):
        return 1.0 + norm.weight
    return norm.weight


def _is_gemma_norm(module: torch.nn.Module) -> bool:
    name = type(module).__name__
    return name.startswith("Gemma") and name.endswith("RMSNorm") and hasattr(module, "eps")


def _typed_rotary_forward(
    self: torch.nn.Module, x: torch.Tensor, position_ids: torch.Tensor, layer_type: str
):
    """Gemma 3's rotary (one frequency table per layer type): as ``_rotary_forward``."""
    original = type(self).forward
    if x.dtype != torch.float64 or self.rope_type.get(layer_type, "default") not in _STATIC_ROPE:
        return original(self, x, position_ids, layer_type)
    with torch.no_grad():
        inv_freq = getattr(self, f"{layer_type}_inv_freq").to(device=x.device, dtype=torch.float64)
        freqs = position_ids[..., None].to(torch.float64) * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        scale = getattr(self, f"{layer_type}_attention_scaling", 1.0)
        return emb.cos() * scale, emb.sin() * scale


def _rotary_forward(self: torch.nn.Module, x: torch.Tensor, position_ids: torch.Tensor):
    """The rotary cos/sin: the angles in float64 for a float64 model (transformers' own forward
    otherwise, and for rotary types whose frequencies change with the length)."""
    if x.dtype != torch.float64 or getattr(self, "rope_type", "default") not in _STATIC_ROPE:
        return type(self).forward(self, x, position_ids)
    with torch.no_grad():
        freqs = position_ids[..., None].to(torch.float64) * self.inv_freq.to(
            device=x.device, dtype=torch.float64
        )
        emb = torch.cat((freqs, freqs), dim=-1)
        scale = getattr(self, "attention_scaling", 1.0)
        return emb.cos() * scale, emb.sin() * scale


def keep_dtype(model: torch.nn.Module) -> list[str]:
    """Give every RMSNorm and rotary embedding of ``model`` a forward that keeps its dtype.

    Only modules that have the fields transformers' Llama versions have are touched (an RMSNorm
    with ``weight`` and ``variance_epsilon``; a rotary embedding with ``inv_freq``). Returns the
    class names patched (for the log and the tests).
    """
    patched: set[str] = set()
    for module in model.modules():
        name = type(module).__name__
        if (
            name.endswith("RMSNorm")
            and hasattr(module, "variance_epsilon")
            and hasattr(module, "weight")
        ):
            module.forward = types.MethodType(_rms_norm_forward, module)
            patched.add(name)
        elif _is_gemma_norm(module) and hasattr(module, "weight"):
            module.forward = types.MethodType(_gemma_norm_forward, module)
            patched.add(name)
        elif name.endswith("RotaryEmbedding") and isinstance(
            getattr(module, "rope_type", None), dict
        ):
            module.forward = types.MethodType(_typed_rotary_forward, module)
            patched.add(name)
        elif name.endswith("RotaryEmbedding") and hasattr(module, "inv_freq"):
            module.forward = types.MethodType(_rotary_forward, module)
            patched.add(name)
    return sorted(patched)
