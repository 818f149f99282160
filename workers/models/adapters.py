"""Architecture adapters: tokenise a text and run the model, returning tokens, attentions and
hidden states in one layout for every family (``workers.models.families`` lists them).

Attention maps come from forward hooks on each layer's attention module (eager attention returns
``(output, weights)``), one query head per map: under grouped-query attention ``n_heads`` counts
query heads. ``run_text`` keeps every layer's maps; ``forward_streamed`` hands each layer's maps to a
sink as the forward pass reaches it and keeps none, so long texts on large models never hold
``layers x heads x n^2`` at once. HF's last hidden state of a decoder has the final norm applied;
``ModelRun.final_norm_in_last_state`` says so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from workers.core.errors import EmptyTextError, HeadscopeError, TextTooLongError
from workers.models.families import family_of, resolve

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel

logger = logging.getLogger(__name__)

AttentionSink = Callable[[int, torch.Tensor], None]  # (layer, weights [batch, head, query, key])


@dataclass
class Encoded:
    """One tokenised text."""

    input_ids: list[int]
    tokens: list[str]  # the tokenizer's own token strings
    offsets: list[tuple[int, int]]  # character span of each token in the text ((0, 0) for specials)
    special: list[bool]  # True for [CLS], [SEP], <s>, </s>, padding, and a chat template's tokens
    truncated_from: int | None = None  # the original token count when truncation happened
    texts: list[str] | None = (
        None  # each token's span of the string tokenised (chat: the template's too)
    )

    @property
    def n(self) -> int:
        return len(self.input_ids)


@dataclass
class ModelRun:
    """Everything one forward pass gives the analyses.

    Shapes: ``attentions`` [layer, head, query, key] (rows sum to 1); ``hidden_states``
    [layer + 1, token, dim] with state 0 the embedding output.
    """

    model: str
    family: str
    text: str
    encoded: Encoded
    attentions: np.ndarray | None  # [layer, head, query, key]; None when streamed
    hidden_states: np.ndarray  # [layer+1, token, dim]
    final_norm_in_last_state: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    causal: bool = False

    @property
    def tokens(self) -> list[str]:
        return self.encoded.tokens

    @property
    def special(self) -> np.ndarray:
        return np.asarray(self.encoded.special, dtype=bool)

    @property
    def n_layers(self) -> int:
        return int(self.hidden_states.shape[0] - 1)

    @property
    def n_heads(self) -> int:
        return int(self.meta.get("n_heads") or self.attentions.shape[1])  # type: ignore[union-attr]


CHAT_SENTINEL = "\x00HEADSCOPE-USER-MESSAGE\x00"


def chat_frame(loaded: LoadedModel) -> tuple[str, str]:
    """The model's chat template around one user message: (text before it, text after it), with
    the prompt for the assistant's answer. SmolLM2: ``<|im_start|>system\\n...<|im_end|>\\n
    <|im_start|>user\\n`` and ``<|im_end|>\\n<|im_start|>assistant\\n``.

    Raises:
        HeadscopeError: the model has no chat template (an encoder, a base model).
    """
    tok = loaded.tokenizer
    if not getattr(tok, "chat_template", None):
        raise HeadscopeError(
            f"model {loaded.name!r} has no chat template; turn the chat message option off"
        )
    rendered = tok.apply_chat_template([{"role": "user", "content": CHAT_SENTINEL}], tokenize=False,
                                       add_generation_prompt=True)  # fmt: skip
    before, found, after = str(rendered).partition(CHAT_SENTINEL)
    if not found:
        raise HeadscopeError(
            f"the chat template of {loaded.name!r} does not show the user's message as is"
        )
    return before, after


def _tokenize(
    tok: Any, text: str, *, add_special_tokens: bool, **kw: Any
) -> tuple[list[int], list[tuple[int, int]], list[bool]]:
    enc = tok(text, return_offsets_mapping=True, return_special_tokens_mask=True,
              add_special_tokens=add_special_tokens, verbose=False, **kw)  # fmt: skip
    return (list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]],
            [bool(s) for s in enc["special_tokens_mask"]])  # fmt: skip


def encode(
    loaded: LoadedModel, text: str, *, truncate: bool = False, chat: bool = False
) -> Encoded:
    """Tokenise ``text`` as the model's own tokenizer does.

    ``chat``: wrap the text in the model's chat template as a user message (``chat_frame``); every
    token outside the message is marked special (so ``drop_special`` hides the template) and has
    offsets (0, 0); ``texts`` holds every token's span of the templated string.

    Raises:
        EmptyTextError: nothing but whitespace.
        TextTooLongError: more tokens than the model takes and ``truncate`` is False.
        HeadscopeError: ``chat`` on a model without a chat template.
    """
    if not text or not text.strip():
        raise EmptyTextError()
    tok = loaded.tokenizer
    if chat:
        before, after = chat_frame(loaded)
        source, start, end = before + text + after, len(before), len(before) + len(text)
        ids, spans, _ = _tokenize(tok, source, add_special_tokens=False, truncation=False)
        inside = [a < end and b > start for a, b in spans]  # the token overlaps the user's message
        special = [not k for k in inside]
        offsets = [
            (max(a, start) - start, min(b, end) - start) if k else (0, 0)
            for (a, b), k in zip(spans, inside, strict=True)
        ]
        texts = [source[a:b] for a, b in spans]
    else:
        ids, offsets, special = _tokenize(tok, text, add_special_tokens=True, truncation=False)
        texts = None
    truncated_from = None
    limit = loaded.max_length
    if len(ids) > limit:
        if not truncate:
            raise TextTooLongError(count=len(ids), limit=limit, model=loaded.name)
        truncated_from = len(ids)
        if chat:  # keep the start of the template and of the message
            ids, offsets, special, texts = (
                ids[:limit],
                offsets[:limit],
                special[:limit],
                texts[:limit],
            )  # type: ignore[index]
        else:
            ids, offsets, special = _tokenize(
                tok, text, add_special_tokens=True, truncation=True, max_length=limit
            )
    if not any(not s for s in special):
        raise EmptyTextError()
    tokens = tok.convert_ids_to_tokens(ids)
    return Encoded(ids, list(tokens), offsets, special, truncated_from, texts)  # type: ignore[arg-type]


def model_inputs(loaded: LoadedModel, encoded: Encoded) -> dict[str, torch.Tensor]:
    """The keyword arguments of ``loaded.model`` for one encoded text (batch of one)."""
    ids = torch.tensor([encoded.input_ids], device=loaded.device)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if loaded.family == "bert" and loaded.config.get("type_vocab_size", 0) > 0:
        inputs["token_type_ids"] = torch.zeros_like(ids)
    return inputs


def cache_kwarg(loaded: LoadedModel) -> str:
    """The forward's keyword for a key/value cache: ``cache`` from transformers 5.24 on (which warns
    on ``past_key_values``), ``past_key_values`` before."""
    import inspect

    return (
        "cache"
        if "cache" in inspect.signature(loaded.model.forward).parameters
        else "past_key_values"
    )


def cache_out(out: Any) -> Any:
    """The key/value cache of a forward's output, under either name (see ``cache_kwarg``)."""
    cache = out.get("cache") if hasattr(out, "get") else None
    return cache if cache is not None else out.past_key_values


def attention_modules(loaded: LoadedModel) -> list[torch.nn.Module]:
    """Each layer's attention module (its forward returns ``(output, weights)`` under eager)."""
    arch = loaded.arch or family_of(loaded.config.get("model_type", loaded.family))
    return [resolve(layer, arch.attention) for layer in resolve(loaded.model, arch.layers)]


@contextmanager
def watch_attention(loaded: LoadedModel, sink: AttentionSink) -> Iterator[None]:
    """Within the block, every forward pass hands ``sink(layer, weights)`` each layer's maps."""
    handles = []
    for i, module in enumerate(attention_modules(loaded)):

        def hook(module: torch.nn.Module, args: Any, output: Any, layer: int = i) -> None:
            weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
            if weights is None:
                raise RuntimeError(
                    "the model returned no attentions; load it with attn_implementation='eager'"
                )
            sink(layer, weights)

        handles.append(module.register_forward_hook(hook))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _to_np(t: torch.Tensor) -> np.ndarray:
    return t.cpu().numpy() if t.dtype == torch.float64 else t.float().cpu().numpy()


@torch.inference_mode()
def forward_streamed(
    loaded: LoadedModel, encoded: Encoded, sink: AttentionSink, *, ids: list[int] | None = None
) -> np.ndarray:
    """Run one text, handing each layer's attention ``[1, head, query, key]`` (on the model's
    device) to ``sink`` as the forward reaches it; keep none. Returns hidden states [layer+1, token, dim].
    """
    enc = (
        encoded
        if ids is None
        else Encoded(ids, encoded.tokens, encoded.offsets, encoded.special, texts=encoded.texts)
    )
    with watch_attention(loaded, sink):
        out = loaded.model(**model_inputs(loaded, enc), output_hidden_states=True)
    return _to_np(torch.stack(out.hidden_states)[:, 0])  # [layer+1, token, dim]


def forward(loaded: LoadedModel, encoded: Encoded) -> tuple[np.ndarray, np.ndarray]:
    """Attentions [layer, head, query, key] and hidden states [layer+1, token, dim] as numpy."""
    maps: dict[int, np.ndarray] = {}

    def keep(layer: int, weights: torch.Tensor) -> None:
        maps[layer] = _to_np(weights[0])

    hidden = forward_streamed(loaded, encoded, keep)
    return np.stack([maps[i] for i in range(len(maps))]), hidden


def run_text(loaded: LoadedModel, text: str, *, truncate: bool = False) -> ModelRun:
    """Tokenise and run one text; the entry point of every text analysis."""
    encoded = encode(loaded, text, truncate=truncate)
    attentions, hidden = forward(loaded, encoded)
    return ModelRun(
        model=loaded.name,
        family=loaded.family,
        text=text,
        encoded=encoded,
        attentions=attentions,
        hidden_states=hidden,
        final_norm_in_last_state=loaded.causal,
        meta={"truncated_from": encoded.truncated_from, "device": str(loaded.device)},
        causal=loaded.causal,
    )


@torch.inference_mode()
def pooled_states(
    loaded: LoadedModel, texts: list[str], *, pooling: str = "auto", batch_size: int = 32
) -> tuple[np.ndarray, list[Encoded]]:
    """One vector per text per state: [state, text, dim] (thesis Def. 4.1 multi-token embedding).

    ``pooling``: ``first`` (the [CLS] / first token, the thesis' choice for BERT), ``last`` (the last
    real token; the sensible choice for left-to-right decoders), ``mean`` (mean over non-special
    tokens), or ``auto`` (first for the bert family, last for every decoder).
    """
    if pooling == "auto":
        pooling = "first" if loaded.family == "bert" else "last"
    if pooling not in {"first", "last", "mean"}:
        raise HeadscopeError(f"unknown pooling {pooling!r}; use first, last, mean or auto")
    encs = [encode(loaded, t) for t in texts]
    chunks = []
    for start in range(0, len(encs), batch_size):
        batch = encs[start : start + batch_size]
        width = max(e.n for e in batch)
        pad = loaded.pad_token_id
        ids = torch.full((len(batch), width), pad, dtype=torch.long, device=loaded.device)
        mask = torch.zeros_like(ids)
        for row, e in enumerate(batch):
            ids[row, : e.n] = torch.tensor(e.input_ids, device=loaded.device)
            mask[row, : e.n] = 1
        kwargs = {"input_ids": ids, "attention_mask": mask}
        if loaded.family == "bert" and loaded.config.get("type_vocab_size", 0) > 0:
            kwargs["token_type_ids"] = torch.zeros_like(ids)
        out = loaded.model(**kwargs, output_hidden_states=True)
        hid = torch.stack(out.hidden_states).float()  # [state, batch, token, dim]
        for row, e in enumerate(batch):
            if pooling == "first":
                vec = hid[:, row, 0]
            elif pooling == "last":
                vec = hid[:, row, e.n - 1]
            else:
                keep = torch.tensor([not s for s in e.special], device=hid.device)
                vec = hid[:, row, : e.n][:, keep].mean(dim=1)
            chunks.append(vec.cpu().numpy())
    return np.stack(chunks, axis=1), encs  # [state, text, dim]
