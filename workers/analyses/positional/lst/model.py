"""The LST transformer (paper section 2.3): encoder-only, post-LayerNorm, no dropout.

Input: the 16 cell tokens plus a positional encoding ``pe`` [16, d] added to the token embeddings
(``nope``: zeros; ``1d-fixed`` / ``2d-fixed``: fixed sinusoids; ``learned``: a parameter drawn from
N(0, σ²)). Output: 4 logits read from the probe cell's final state.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from workers.analyses.positional.encodings import make_reference
from workers.analyses.positional.lst.puzzles import N_CELLS, N_SYMBOLS, SIZE, VOCAB

PE_KINDS: tuple[str, ...] = ("nope", "1d-fixed", "2d-fixed", "learned")
PE_TENSOR = "pe"  # the name of the positional encoding in model.safetensors, [16, d]


class Block(nn.Module):
    """Multi-head self-attention and a ReLU feed-forward, each followed by Add & LayerNorm."""

    def __init__(self, d: int, heads: int, d_ff: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, d_ff)
        self.ff2 = nn.Linear(d_ff, d)
        self.ln2 = nn.LayerNorm(d)

    def forward(
        self, x: torch.Tensor, *, need_attention: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        b, t, d = x.shape  # [batch, token, dim]
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if need_attention:
            scores = (
                q @ k.transpose(-1, -2) / math.sqrt(d // self.heads)
            )  # [batch, head, query, key]
            attn = scores.softmax(dim=-1)
            mixed = attn @ v
        else:
            attn, mixed = None, F.scaled_dot_product_attention(q, k, v)
        x = self.ln1(x + self.out(mixed.transpose(1, 2).reshape(b, t, d)))
        x = self.ln2(x + self.ff2(F.relu(self.ff1(x))))
        return x, attn


class LSTModel(nn.Module):
    """Encoder-only transformer for the Latin Square Task."""

    def __init__(
        self,
        *,
        pe: str,
        sigma: float = 0.2,
        d_model: int = 160,
        n_layers: int = 4,
        n_heads: int = 1,
        d_ff: int = 640,
        pe_seed: int = 0,
    ):
        super().__init__()
        if pe not in PE_KINDS:
            raise ValueError(f"unknown PE {pe!r}; use one of {', '.join(PE_KINDS)}")
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} is not divisible by {n_heads} heads")
        self.pe_kind = pe
        self.embed = nn.Embedding(VOCAB, d_model)  # N(0, 1) init, as nn.Embedding does
        if pe == "learned":
            gen = torch.Generator().manual_seed(
                pe_seed
            )  # own stream: other weights match across PEs
            self.pe = nn.Parameter(torch.randn(N_CELLS, d_model, generator=gen) * sigma)  # N(0, σ²)
        else:
            if pe == "nope":
                table = torch.zeros(N_CELLS, d_model)
            else:
                grid = (SIZE, SIZE) if pe == "2d-fixed" else None
                table = torch.tensor(
                    make_reference(pe, n=N_CELLS, d=d_model, grid=grid), dtype=torch.float32
                )
            self.register_buffer("pe", table)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, d_ff) for _ in range(n_layers))
        self.readout = nn.Linear(d_model, N_SYMBOLS)

    def forward(
        self, tokens: torch.Tensor, probe: torch.Tensor, *, need_attention: bool = False
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Logits ``[batch, 4]`` for the probe's symbol, and per layer ``[batch, head, q, k]`` maps."""
        x = self.embed(tokens) + self.pe  # [batch, 16, d]
        maps = []
        for block in self.blocks:
            x, attn = block(x, need_attention=need_attention)
            if attn is not None:
                maps.append(attn)
        h = x[torch.arange(len(x)), probe]  # [batch, d]
        return self.readout(h), maps
