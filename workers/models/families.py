"""The architecture families headscope supports: one table entry per transformers ``model_type``.

Each entry says where a layer's pieces live in the Hugging Face module tree (attribute paths from
the base model, e.g. ``LlamaModel``) and what is exact for the family. A further family whose layout
follows Llama's (pre-RMSNorm decoder, ``self_attn.o_proj``, gated ``mlp.down_proj``, final ``norm``)
is one ``llama_like(...)`` line in ``FAMILIES``.

This module imports nothing from torch or transformers, so the backend can read the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from workers.core.errors import HeadscopeError

Layout = Literal["bert", "gpt2", "llama", "gpt_neox"]

# transformers' eager attention, except that the softmax runs in the model's dtype
# (workers/models/precision.py registers it; its eager softmax is float32 whatever the dtype)
DTYPE_EAGER = "headscope_eager"


@dataclass(frozen=True)
class Family:
    """Where one architecture keeps its parts and what the decomposition must handle.

    Attributes:
        name: the family name results and the model picker show.
        layout: ``bert`` (post-LayerNorm encoder), ``gpt2`` (pre-LayerNorm decoder, Conv1D weights),
            ``llama`` (pre-RMSNorm decoder, rotary, GQA, gated MLP) or ``gpt_neox`` (pre-LayerNorm
            decoder, fused per-head q/k/v, partial rotary, parallel residual).
        causal: queries see only keys at or before them.
        layers: attribute path of the layer list.
        attention: attribute path (in a layer) of the module returning ``(output, weights)``.
        out_proj: attribute path (in a layer) of the attention output projection; its input is the
            concatenated per-query-head outputs.
        ff_out: attribute path (in a layer) of the module whose output is the feed-forward output.
        final_norm: attribute path of the norm applied to the last hidden state (decoders).
        norm: ``layernorm`` or ``rmsnorm`` (no mean shift, no bias).
        notes: what is exact for this family (docs/models.md lists them).
        attn_implementation: the transformers attention function the family is loaded with:
            ``eager`` where transformers' own keeps the model's dtype (BERT, GPT-2),
            ``DTYPE_EAGER`` where its softmax is float32 whatever the dtype.
        post_norms: attribute paths (in a layer) of the norms applied to the attention output and to
            the feed-forward output before each joins the residual stream (Gemma 2 and 3's sandwich
            norms); ``None`` when the branches join unnormalised.
    """

    name: str
    layout: Layout
    causal: bool
    layers: str
    attention: str
    out_proj: str
    ff_out: str
    final_norm: str | None
    norm: Literal["layernorm", "rmsnorm"]
    notes: str = ""
    attn_implementation: str = "eager"
    post_norms: tuple[str, str] | None = None


BERT = Family(
    "bert",
    "bert",
    False,
    "encoder.layer",
    "attention.self",
    "attention.output.dense",
    "output.dense",
    None,
    "layernorm",
    "post-LayerNorm encoder; every LayerNorm carried as g*t/s, mean shift and biases in c",
)
GPT2 = Family(
    "gpt2",
    "gpt2",
    True,
    "h",
    "attn",
    "attn.c_proj",
    "mlp.c_proj",
    "ln_f",
    "layernorm",
    "pre-LayerNorm decoder; residual stream is a sum, ln_f carried into the last state",
)


def llama_like(name: str, notes: str = "", post_norms: tuple[str, str] | None = None) -> Family:
    """A pre-RMSNorm decoder laid out like Llama (``layers[i].self_attn.o_proj``, ``mlp.down_proj``)."""
    return Family(
        name,
        "llama",
        True,
        "layers",
        "self_attn",
        "self_attn.o_proj",
        "mlp.down_proj",
        "norm",
        "rmsnorm",
        notes
        or "RMSNorm (g*t/rms), rotary, grouped-query attention (one map per query head), gated MLP",
        DTYPE_EAGER,
        post_norms,
    )


SANDWICH = ("post_attention_layernorm", "post_feedforward_layernorm")  # Gemma 2 and 3
GEMMA_NOTES = (
    "as llama; RMSNorm gain 1+w, embedding scaled by sqrt(d) (in the input term); "
    "post-norms on the attention and feed-forward outputs carried with their branch"
)


FAMILIES: dict[str, Family] = {
    "bert": BERT,
    "roberta": BERT,
    "xlm-roberta": BERT,
    "camembert": BERT,
    "gpt2": GPT2,
    "llama": llama_like("llama"),
    "mistral": llama_like("mistral", "as llama; sliding-window attention beyond its window"),
    "qwen2": llama_like(
        "qwen2", "as llama, with q/k/v biases (value bias mapped through W_O into c)"
    ),
    "qwen3": llama_like("qwen3", "as llama; per-head q/k RMSNorms sit inside attention (no term)"),
    "phi3": llama_like("phi3", "as llama, with fused q/k/v and gate/up projections"),
    "gemma": llama_like(
        "gemma", "as llama; RMSNorm gain 1+w, embedding scaled by sqrt(d) (in the input term)"
    ),
    "gemma2": llama_like(
        "gemma2", GEMMA_NOTES + "; attention scores and logits soft-capped (tanh)", SANDWICH
    ),
    "gemma3_text": llama_like(
        "gemma3_text",
        GEMMA_NOTES + "; q/k RMSNorms inside attention; sliding-window layers between global ones",
        SANDWICH,
    ),
    "gpt_neox": Family(
        "gpt_neox",
        "gpt_neox",
        True,
        "layers",
        "attention",
        "attention.dense",
        "mlp.dense_4h_to_h",
        "final_layer_norm",
        "layernorm",
        "pre-LayerNorm decoder, parallel residual (both branches read the same input), partial rotary",
        DTYPE_EAGER,
    ),
}


@dataclass(frozen=True)
class TextPart:
    """Where a multimodal checkpoint keeps the language model headscope reads (its only part loaded).

    Attributes:
        config_key: the key of the text model's config inside the checkpoint's config.
        model_type: the text model's ``model_type`` (when its config does not say).
        weights: a regular expression matching the prefix of the text model's tensors in the checkpoint,
            removed to give the text model's own names (transformers' ``key_mapping``); tensors of the
            other parts (the vision tower, the projector) match nothing and are never read.
        what: the checkpoint in words.
    """

    config_key: str
    model_type: str
    weights: str
    what: str


TEXT_PARTS = {
    # saved as language_model.model.* (Google's checkpoints) or model.language_model.* (transformers 5)
    "gemma3": TextPart(
        "text_config",
        "gemma3_text",
        r"^(model\.)?language_model\.(model\.)?",
        "a multimodal Gemma 3 checkpoint (Gemma3ForConditionalGeneration)",
    ),
}


def text_part(cfg: dict[str, Any]) -> dict[str, Any]:
    """The config of what headscope reads: a multimodal checkpoint's text model (``TEXT_PARTS``; its
    ``tie_word_embeddings`` is the checkpoint's, which decides the tying), or ``cfg`` itself."""
    part = TEXT_PARTS.get(str(cfg.get("model_type")))
    if part is None or not isinstance(cfg.get(part.config_key), dict):
        return cfg
    text = {"model_type": part.model_type, **cfg[part.config_key]}
    if "tie_word_embeddings" in cfg:
        text["tie_word_embeddings"] = cfg["tie_word_embeddings"]
    return text


def family_of(model_type: str) -> Family:
    """The family of a transformers ``model_type`` (a multimodal one's: its text model's); a clear
    error for anything else."""
    if model_type in TEXT_PARTS:
        model_type = TEXT_PARTS[model_type].model_type
    fam = FAMILIES.get(model_type)
    if fam is None:
        supported = ", ".join(sorted([*FAMILIES, *(f"{k} (its text model)" for k in TEXT_PARTS)]))
        raise HeadscopeError(f"model type {model_type!r} is not supported; supported: {supported}")
    return fam


def config_facts(cfg: dict[str, Any]) -> dict[str, Any]:
    """Layers, query heads, key/value heads, hidden size and token limit from a config.json dict."""
    cfg = text_part(cfg)
    n_heads = cfg.get("num_attention_heads", cfg.get("n_head"))
    max_pos = cfg.get("max_position_embeddings", cfg.get("n_positions"))
    if max_pos and cfg.get("model_type") in {"roberta", "xlm-roberta", "camembert"}:
        max_pos -= 2  # RoBERTa's position ids start after the padding index
    fam = FAMILIES.get(str(cfg.get("model_type")))
    return {
        "family": fam.name if fam else None,
        "n_layers": cfg.get("num_hidden_layers", cfg.get("n_layer")),
        "n_heads": n_heads,
        "n_kv_heads": cfg.get("num_key_value_heads") or n_heads,
        "hidden_size": cfg.get("hidden_size", cfg.get("n_embd")),
        "intermediate_size": cfg.get("intermediate_size", cfg.get("n_inner")),
        "vocab_size": cfg.get("vocab_size"),
        "max_tokens": max_pos,
        "causal": fam.causal if fam else None,
        # attention and feed-forward of a layer read the same stream (GPT-NeoX's default;
        # the circuits' edges: docs/circuits.md)
        "parallel_residual": bool(
            fam and fam.layout == "gpt_neox" and cfg.get("use_parallel_residual", True)
        ),
    }


def layer_windows(cfg: dict[str, Any]) -> list[int | None]:
    """Per layer, the sliding window of a local layer (a query sees only the last ``w`` keys, itself
    included) or None for a global one.

    From a config's ``layer_types`` where it names them (Gemma 2/3: local layers between global ones;
    Qwen2's ``max_window_layers``); without ``layer_types``, a ``sliding_window`` applies to every layer,
    as transformers' Mistral and Phi-3 apply it (Phi-3 mini 4k: 2,047). Empty when neither is set.
    """
    cfg = text_part(cfg)
    window = cfg.get("sliding_window")
    types = cfg.get("layer_types")
    if not types:
        n_layers = cfg.get("num_hidden_layers") or 0
        return [int(window)] * int(n_layers) if window else []
    return [int(window) if window and t == "sliding_attention" else None for t in types]


def resolve(root: Any, path: str) -> Any:
    """``resolve(model, "encoder.layer")`` -> ``model.encoder.layer``."""
    obj = root
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj
