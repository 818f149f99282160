"""Load catalogue models once per process and keep them (the worker's model cache)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import torch

from workers.models.catalogue import Catalogue, ModelSpec, get_catalogue
from workers.models.devices import resolve_device
from workers.models.families import (
    DTYPE_EAGER,
    TEXT_PARTS,
    Family,
    config_facts,
    family_of,
    text_part,
)
from workers.models.lm_head import Unembedding, load_unembedding
from workers.models.precision import keep_dtype, register_attention

logger = logging.getLogger(__name__)

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


@dataclass
class LoadedModel:
    """A model ready for analyses: weights in eval mode on ``device``, its tokenizer, its facts."""

    name: str
    spec: ModelSpec
    model: Any  # a transformers PreTrainedModel (BertModel, RobertaModel, GPT2Model)
    tokenizer: Any
    family: str  # the family's name: "bert", "gpt2", "llama", "qwen2", "gpt_neox", ...
    device: torch.device
    dtype: torch.dtype
    config: dict[str, Any] = field(default_factory=dict)
    n_layers: int = 0
    n_heads: int = 0
    max_length: int = 512
    arch: Family | None = None  # where the family keeps its parts (workers.models.families)
    n_kv_heads: int = 0  # key/value heads (fewer than n_heads under grouped-query attention)
    unembed: Unembedding | None = None  # the language-model head (workers.models.lm_head), if any
    lm_head_reason: str = ""  # why there is one, or why not (shown by the API and the causal page)

    @property
    def has_lm_head(self) -> bool:
        return self.unembed is not None

    @property
    def causal(self) -> bool:
        return bool(self.arch and self.arch.causal)

    @property
    def n_params(self) -> int:
        return int(sum(p.numel() for p in self.model.parameters()))

    @property
    def pad_token_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id or 0
        return int(pad)


_cache: dict[tuple[str, str, str], LoadedModel] = {}
_lock = threading.Lock()
_version = 0  # changes whenever a model is loaded or dropped (a worker then settles its heap: workers.queue.recycle)


def cache_version() -> int:
    """A number that changes whenever the cache gains or loses a model."""
    return _version


def default_device() -> torch.device:
    """The models' device (``workers.models.devices.resolve_device``)."""
    return resolve_device()


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def load_model(
    name: str,
    *,
    device: str | torch.device | None = None,
    dtype: str = "float32",
    catalogue: Catalogue | None = None,
) -> LoadedModel:
    """The catalogue model ``name``, loaded once per (name, device, dtype) and cached.

    Raises:
        UnknownModelError: the name is not in the catalogue.
        HeadscopeError: unsupported architecture or dtype.
    """
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    from workers.core.errors import HeadscopeError

    global _version
    if dtype not in DTYPES:
        raise HeadscopeError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    cat = catalogue or get_catalogue()
    spec = cat.get(name)
    dev = torch.device(device) if device is not None else default_device()
    key = (name, str(dev), dtype)
    with _lock:
        if key in _cache:
            return _cache[key]
        _quiet_transformers()
        where = spec.resolve()
        offline = spec.source != "hub"
        config = AutoConfig.from_pretrained(where, local_files_only=offline)
        family = family_of(config.model_type)
        logger.info(
            "loading model %s from %s (%s, %s, %s)", name, spec.source, family.name, dev, dtype
        )
        if family.attn_implementation == DTYPE_EAGER:
            register_attention()
        part = TEXT_PARTS.get(config.model_type)  # a multimodal checkpoint: its text model only
        text: dict[str, Any] = {}
        if part is not None:
            text = {"config": getattr(config, part.config_key), "key_mapping": {part.weights: ""}}
        model = AutoModel.from_pretrained(
            where,
            attn_implementation=family.attn_implementation,
            local_files_only=offline,
            dtype=DTYPES[dtype],
            **text,
        )
        keep_dtype(model)
        model.eval().to(dev)
        tokenizer = AutoTokenizer.from_pretrained(where, local_files_only=offline)
        cfg = text_part(config.to_dict())
        facts = config_facts(cfg)
        unembed, head_reason = load_unembedding(model, cfg, where if offline else None)
        max_pos = int(facts["max_tokens"] or 512)
        tok_max = getattr(tokenizer, "model_max_length", None) or max_pos
        loaded = LoadedModel(
            name=name,
            spec=spec,
            model=model,
            tokenizer=tokenizer,
            family=family.name,
            device=dev,
            dtype=DTYPES[dtype],
            config=cfg,
            n_layers=int(facts["n_layers"]),
            n_heads=int(facts["n_heads"]),
            max_length=int(min(max_pos, tok_max)),
            arch=family,
            n_kv_heads=int(facts["n_kv_heads"]),
            unembed=unembed,
            lm_head_reason=head_reason,
        )
        _cache[key] = loaded
        _version += 1
        return loaded


def clear_cache() -> None:
    """Forget every loaded model (tests; a worker reloading its catalogue)."""
    global _version
    with _lock:
        _cache.clear()
        _version += 1


def release_model(name: str) -> int:
    """Forget every cached copy of model ``name`` (a comparison that cannot hold two models drops the
    first before loading the second); how many were dropped. Its memory returns once unreferenced."""
    import gc

    global _version
    with _lock:
        keys = [k for k in _cache if k[0] == name]
        for k in keys:
            del _cache[k]
        _version += 1
    gc.unfreeze()  # a worker froze its preloaded models (workers.queue.recycle.settle): let this collection see them
    gc.collect()
    return len(keys)
