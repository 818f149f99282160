"""A model's language-model head: the unembedding ``W_U`` [vocabulary, dim] and bias ``b_U`` (docs/causal.md).

The loader loads base models (``AutoModel``: no head). The causal views (docs/causal.md) need the
logits ``l = W_U N(X[L]) + b_U``; this module finds the head without a second copy of the model:

- tied embeddings (``tie_word_embeddings``, true for GPT-2 and SmolLM2): ``W_U`` *is* the input
  embedding matrix, shared, not copied;
- untied: ``lm_head.weight`` (GPT-NeoX: ``embed_out.weight``) and ``lm_head.bias`` if any, read from
  the model directory's safetensors files (never from a pickle), one tensor at a time.

A decoder saved as a base model only (``LlamaModel.save_pretrained``) and every encoder have no
head here: ``head_status`` says why in words the API and the page show. The status part imports no
torch (the backend calls it before queueing); ``load_unembedding`` does.
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workers.models.families import FAMILIES, text_part

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

HEAD_WEIGHTS = ("lm_head.weight", "embed_out.weight")  # Llama-like / GPT-2, GPT-NeoX
HEAD_BIASES = ("lm_head.bias", "embed_out.bias")
TIED_DEFAULT = {"gpt2": True}  # transformers' config default when the key is absent (else False)


@dataclass(frozen=True)
class HeadStatus:
    """Whether a model has a language-model head: ``has`` True/False, or None when unknown before
    loading (a hub model); ``source`` ``tied`` / ``file`` / ``""``; ``reason`` a sentence."""

    has: bool | None
    source: str
    reason: str


def _tied(cfg: dict[str, Any]) -> bool:
    value = cfg.get("tie_word_embeddings")
    if value is None:
        return TIED_DEFAULT.get(str(cfg.get("model_type")), False)
    return bool(value)


def safetensors_names(model_dir: str | Path) -> set[str] | None:
    """Every tensor name in a directory's safetensors files (headers only), or None without any."""
    d = Path(model_dir)
    index = d / "model.safetensors.index.json"
    if index.is_file():
        try:
            return set(json.loads(index.read_text()).get("weight_map", {}))
        except (OSError, ValueError):
            return None
    names: set[str] = set()
    files = sorted(d.glob("*.safetensors"))
    for f in files:
        try:
            with f.open("rb") as fh:
                (size,) = struct.unpack("<Q", fh.read(8))
                if size > 100_000_000:
                    return None
                names |= set(json.loads(fh.read(size))) - {"__metadata__"}
        except (OSError, ValueError, struct.error):
            return None
    return names if files else None


def _find(names: set[str], wanted: tuple[str, ...]) -> str | None:
    for name in sorted(names):
        if name in wanted or any(name.endswith("." + w) for w in wanted):
            return name
    return None


def head_status(cfg: dict[str, Any], model_dir: str | Path | None) -> HeadStatus:
    """Whether the model with config ``cfg`` (files in ``model_dir``; None: not on disk) has a head
    (a multimodal checkpoint's: its text model's, ``lm_head.weight`` under its prefix when untied)."""
    cfg = text_part(cfg)
    model_type = str(cfg.get("model_type"))
    fam = FAMILIES.get(model_type)
    if fam is None:
        return HeadStatus(False, "", f"model type {model_type!r} is not supported")
    if not fam.causal:
        return HeadStatus(
            False, "", f"it is an encoder ({fam.name} family) loaded without a language-model head; "
            "the causal views need a decoder with one (GPT-2, Llama, Mistral, Qwen, GPT-NeoX)",
        )  # fmt: skip
    if _tied(cfg):
        return HeadStatus(True, "tied", "the unembedding is the input embedding (tied weights)")
    if model_dir is None:
        return HeadStatus(None, "", "untied head: checked when the worker loads the model")
    names = safetensors_names(model_dir)
    if names is None:
        return HeadStatus(
            False,
            "",
            "its weights are not in safetensors files, where the untied head is read from",
        )
    if _find(names, HEAD_WEIGHTS) is None:
        return HeadStatus(False, "", "the checkpoint holds the base model only (no lm_head.weight)")
    return HeadStatus(
        True, "file", "the unembedding is the checkpoint's own output matrix (lm_head.weight)"
    )


@dataclass
class Unembedding:
    """``W_U`` [vocabulary, dim] and ``b_U`` [vocabulary] or None, on the model's device and dtype."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    source: str  # "tied" or "file"
    softcap: float | None = (
        None  # Gemma 2's final_logit_softcapping: logits -> c * tanh(logits / c)
    )

    @property
    def vocab_size(self) -> int:
        return int(self.weight.shape[0])

    def logits(self, normed: torch.Tensor) -> torch.Tensor:
        """``normed`` [..., dim] (after the final norm) -> logits [..., vocabulary], soft-capped as the
        model caps them (``c * tanh(z / c)``, Gemma 2) where it does."""
        out = normed @ self.weight.T
        return self._capped(out if self.bias is None else out + self.bias)

    def _capped(self, out: torch.Tensor) -> torch.Tensor:
        return out if self.softcap is None else (out / self.softcap).tanh() * self.softcap

    def logits_of(self, normed: torch.Tensor, ids: Sequence[int]) -> torch.Tensor:
        """``logits(normed)[..., ids]`` [..., len(ids)], soft-capped as ``logits``, computing only
        those vocabulary entries."""
        at = list(ids)
        out = normed @ self.weight[at].T
        return self._capped(out if self.bias is None else out + self.bias[at])

    def logit_of(self, normed: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """The logits of ``ids`` [n] only at rows ``normed`` [n, dim]: ``logits(normed)[t, ids[t]]``
        without the other vocabulary entries, *before* any soft-cap (the linear logit that direct
        logit attribution splits exactly; the cap is monotone, so rankings are the same)."""
        out = (normed * self.weight[ids]).sum(-1)
        return out if self.bias is None else out + self.bias[ids]


def load_unembedding(
    model: Any, cfg: dict[str, Any], model_dir: str | None
) -> tuple[Unembedding | None, str]:
    """The head of a loaded base ``model`` (None and the reason when it has none)."""
    from safetensors import safe_open

    cfg = text_part(cfg)
    status = head_status(cfg, model_dir)
    if status.has is None and model_dir is None:
        return None, "the model directory is unknown (hub model); the untied head cannot be read"
    if not status.has:
        return None, status.reason
    emb = model.get_input_embeddings().weight  # [vocabulary, dim]
    cap = cfg.get("final_logit_softcapping") or None
    if status.source == "tied":
        return Unembedding(emb, None, "tied", cap), status.reason
    assert model_dir is not None
    d = Path(model_dir)
    index = d / "model.safetensors.index.json"
    where: dict[str, Path] = {}
    if index.is_file():
        where = {k: d / v for k, v in json.loads(index.read_text())["weight_map"].items()}
    else:
        for f in sorted(d.glob("*.safetensors")):
            with safe_open(str(f), framework="pt") as fh:
                where.update({k: f for k in fh.keys()})

    def read(name: str | None) -> torch.Tensor | None:
        if name is None:
            return None
        with safe_open(str(where[name]), framework="pt") as fh:
            return fh.get_tensor(name).to(device=emb.device, dtype=emb.dtype)

    weight = read(_find(set(where), HEAD_WEIGHTS))
    assert weight is not None
    if weight.shape != emb.shape:
        return (
            None,
            f"lm_head.weight has shape {list(weight.shape)}, not the embedding's {list(emb.shape)}",
        )
    bias = read(_find(set(where), HEAD_BIASES))
    logger.info("language-model head read from %s (%s)", model_dir, list(weight.shape))
    return Unembedding(weight.requires_grad_(False), bias, "file", cap), status.reason
