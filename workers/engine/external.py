"""Bring your own attention: headscope's analyses on attention maps computed elsewhere.

The input is what transformers returns with ``output_attentions=True`` — a tuple with one
``[batch, heads, n, n]`` tensor per layer, of any model, including families headscope does not
know — plus the ``n`` tokens; bertviz's ``head_view(attention, tokens)`` takes the same pair. The
result has the shape of ``workers.engine.pipeline.analyze``'s (same keys, same sections, built by
the same consumers and section functions), so every figure of ``frontend/`` draws it, and on the
same maps it holds the same numbers as headscope's own path (``tests/test_notebook.py`` checks this
on MiniLM)::

    out = model(**inputs, output_attentions=True)           # attn_implementation="eager"
    tokens = tokenizer.convert_ids_to_tokens(inputs["input_ids"][0])
    result = attention_result(out.attentions, tokens)       # max-attention + every head's t-SNE
    result[MAX_ATTENTION]["max_attention"]                  # [layer][head][token] (attention.spec)

Every check runs before any work, and a problem is a ``HeadscopeError`` naming it: a tensor of the
wrong rank, maps that are not square or differ between layers, a token list of another length,
NaN or infinite weights, weights outside [0, 1] (scores before the softmax), an empty tuple (the
model ran with ``sdpa`` attention, which returns none).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from workers.analyses.attention.section import max_attention_section
from workers.analyses.attention.spec import MAX_ATTENTION
from workers.analyses.attention.streaming import AttentionStats, PackedAttention
from workers.analyses.tsne import TSNEOptions, select_indices
from workers.analyses.tsne.section import head_tsne_section
from workers.analyses.tsne.spec import HEAD_TSNE
from workers.analyses.tsne.streaming import LayerHeadTSNE
from workers.core.errors import HeadscopeError
from workers.core.notation import head_label
from workers.models.streaming import HeadKeeper, kept_index

KINDS = (MAX_ATTENTION, HEAD_TSNE)
SPECIAL = re.compile(
    r"^(\[[A-Z]+\]|<\|[^<>|]*\|>|</?s>|<(pad|unk|mask|bos|eos|cls|sep)>)$", re.IGNORECASE
)
TOLERANCE = 1e-3  # how far outside [0, 1] a float16/bfloat16 weight may round


def special_tokens(tokens: Sequence[str]) -> list[bool]:
    """Which tokens look like special ones (``[CLS]``, ``<s>``, ``<|endoftext|>``, ``<pad>``…)."""
    return [bool(SPECIAL.match(t)) for t in tokens]


def attention_layers(attentions: Any, *, batch_index: int | None = None) -> list[torch.Tensor]:
    """The per-layer maps ``[1, head, n, n]`` (float, detached, on their device), checked.

    Args:
        attentions: a tuple/list of ``[batch, heads, n, n]`` tensors or arrays, one per layer, or
            one stacked ``[layer, batch, heads, n, n]`` tensor.
        batch_index: which item of the batch; needed when the batch holds more than one.
    """
    if isinstance(attentions, torch.Tensor | np.ndarray):
        if attentions.ndim != 5:
            raise HeadscopeError(
                f"the attention is one tensor of {attentions.ndim} dimensions {list(attentions.shape)}; "
                "pass the tuple of [batch, heads, n, n] tensors (one per layer) that transformers returns "
                "with output_attentions=True, or one stacked [layer, batch, heads, n, n] tensor"
            )
        attentions = list(attentions)
    if (
        not isinstance(attentions, Sequence)
        or len(attentions) == 0
        or any(a is None for a in attentions)
    ):
        raise HeadscopeError(
            "no attention maps: pass the tuple of [batch, heads, n, n] tensors of output_attentions=True "
            "(an empty tuple or None means the model ran with attn_implementation='sdpa' or 'flash': "
            "load it with attn_implementation='eager')"
        )
    layers: list[torch.Tensor] = []
    for i, a in enumerate(attentions):
        t = torch.as_tensor(a).detach() if not isinstance(a, torch.Tensor) else a.detach()
        if t.ndim != 4:
            raise HeadscopeError(
                f"the attention of layer {i} has {t.ndim} dimensions {list(t.shape)}; expected 4: "
                "[batch, heads, n, n], as transformers returns with output_attentions=True"
            )
        if t.shape[-1] != t.shape[-2]:
            raise HeadscopeError(
                f"the attention of layer {i} is not square: {list(t.shape)} (queries != keys)"
            )
        if layers and t.shape[1:] != layers[0].shape[1:]:
            raise HeadscopeError(
                f"the attention of layer {i} has shape {list(t.shape)} but layer 0 has {list(layers[0].shape)}"
            )
        if not t.is_floating_point():
            raise HeadscopeError(
                f"the attention of layer {i} holds {t.dtype}, not floating-point weights"
            )
        layers.append(t)
    batch = layers[0].shape[0]
    if batch_index is None:
        if batch != 1:
            raise HeadscopeError(
                f"the attention holds a batch of {batch} texts; pick one with batch_index="
            )
        batch_index = 0
    if not 0 <= batch_index < batch:
        raise HeadscopeError(
            f"batch_index {batch_index} is out of range: the batch holds {batch} texts"
        )
    out = []
    for i, t in enumerate(layers):
        one = t[batch_index : batch_index + 1]
        if one.dtype in (torch.float16, torch.bfloat16):
            one = one.float()
        bad = ~torch.isfinite(one)
        if bool(bad.any()):
            head = int(torch.nonzero(bad)[0][1])
            raise HeadscopeError(
                f"the attention of {head_label(i, head)} holds NaN or infinite weights"
            )
        lo, hi = float(one.min()), float(one.max())
        if lo < -TOLERANCE or hi > 1 + TOLERANCE:
            raise HeadscopeError(
                f"the attention of layer {i} has weights from {lo:.3g} to {hi:.3g}; attention weights lie "
                "in [0, 1] (were these scores before the softmax?)"
            )
        out.append(one)
    return out


def is_causal(layers: list[torch.Tensor]) -> bool:
    """Whether every map is lower triangular (no query sees a later key): a left-to-right decoder."""
    n = layers[0].shape[-1]
    upper = torch.triu(torch.ones(n, n, dtype=torch.bool, device=layers[0].device), diagonal=1)
    return n > 1 and all(float(t[..., upper].abs().max()) == 0.0 for t in layers)


def attention_result(
    attentions: Any,
    tokens: Sequence[str],
    *,
    analyses: Sequence[str] = KINDS,
    batch_index: int | None = None,
    causal: bool | None = None,
    special: Sequence[bool] | None = None,
    drop_special: bool = False,
    layers: int | str | list[int] | None = "all",
    heads: int | str | list[int] | None = "all",
    options: TSNEOptions | None = None,
    model: str = "your model",
) -> dict[str, Any]:
    """Max-attention and the attention-head t-SNE of every head from attention maps you bring.

    Args:
        attentions: the ``output_attentions=True`` tuple (see ``attention_layers``).
        tokens: the ``n`` tokens of the maps, e.g. ``tokenizer.convert_ids_to_tokens(ids)``.
        analyses: ``max-attention`` and/or ``head-tsne`` (the grid of ``layers`` x ``heads``, with
            every embedded head's map packed for the head and model views; for one layer and one
            head, the one-head section with its exact matrix, as the pipeline gives).
        causal: whether queries see only earlier keys; None: read off the maps (lower triangular).
        special: which tokens are special (default: by their look, ``special_tokens``).
        drop_special: leave the special tokens out of both analyses, as the dashboard's toggle does.
        options: the t-SNE options; the default is the pipeline's (fast engine, spectral start, seed 0).

    Returns:
        A result dict as ``pipeline.analyze`` returns (``tokens``, ``n_layers``, ``n_heads``,
        ``causal``, one section per analysis), with ``family`` ``"external"``.
    """
    unknown = [k for k in analyses if k not in KINDS]
    if unknown or not analyses:
        raise HeadscopeError(
            f"unknown analysis {unknown[0] if unknown else None!r}; use {' and/or '.join(KINDS)}"
        )
    maps = attention_layers(attentions, batch_index=batch_index)
    n_layers, n_heads, n = len(maps), maps[0].shape[1], maps[0].shape[-1]
    tokens = [str(t) for t in tokens]
    if len(tokens) != n:
        raise HeadscopeError(
            f"{len(tokens)} tokens for attention maps over {n} positions: pass the tokens the model ran "
            "on, special tokens included (tokenizer.convert_ids_to_tokens(input_ids[0]))"
        )
    special = special_tokens(tokens) if special is None else [bool(s) for s in special]
    if len(special) != n:
        raise HeadscopeError(f"special has {len(special)} entries for {n} tokens")
    causal = is_causal(maps) if causal is None else bool(causal)
    keep = ~np.asarray(special, dtype=bool) if drop_special else None
    kept = kept_index(n, keep)
    options = (options or TSNEOptions()).validate()
    consumers: dict[str, Any] = {}
    if MAX_ATTENTION in analyses:
        consumers[MAX_ATTENTION] = AttentionStats(n_layers, n_heads, keep=keep, causal=causal)
    if HEAD_TSNE in analyses:
        consumers[HEAD_TSNE] = LayerHeadTSNE(
            n_layers, n_heads, layers=layers, heads=heads, keep=keep, options=options
        )
        pairs = [
            (la, h)
            for la in select_indices(layers, n_layers, "layer")
            for h in select_indices(heads, n_heads, "head")
        ]
        if len(pairs) == 1:  # one head: its exact matrix, as the pipeline keeps for one head
            consumers["one"] = HeadKeeper(pairs)
        else:
            consumers["packed"] = PackedAttention(
                n_layers, n_heads, layers=layers, heads=heads, keep=keep
            )
    for layer, weights in enumerate(maps):  # the same consumers the streamed forward pass feeds
        for consume in consumers.values():
            consume(layer, weights)
    result: dict[str, Any] = {
        "model": model, "family": "external", "n_layers": n_layers, "n_heads": n_heads, "max_tokens": n,
        "causal": causal, "tokens": tokens, "token_texts": tokens, "special": special, "n_tokens": n,
        "truncated_from": None,
    }  # fmt: skip
    if MAX_ATTENTION in consumers:
        result[MAX_ATTENTION] = max_attention_section(consumers[MAX_ATTENTION], kept, causal=causal)
    if HEAD_TSNE in consumers:
        if "one" in consumers:
            a = next(iter(consumers["one"].maps.values()))[np.ix_(kept, kept)]  # [query, key]
            extra, single = {"attention": np.round(a, 6).tolist()}, True
        else:
            extra, single = consumers["packed"].fields(), False
        result[HEAD_TSNE] = head_tsne_section(
            consumers[HEAD_TSNE], kept, single=single, extra=extra
        )
    return result
