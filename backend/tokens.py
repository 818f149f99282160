"""Count a text's tokens in the API (no torch): over-long texts get a 4xx before they are queued.

Uses the model's ``tokenizer.json`` through the Rust ``tokenizers`` package, the same tokenizer
the worker's fast tokenizer wraps. When a model has no ``tokenizer.json`` the worker checks alone.
"""

from __future__ import annotations

import json
import logging
from functools import lru_cache
from pathlib import Path

from workers.models.catalogue import ModelSpec

logger = logging.getLogger(__name__)

ROBERTA_TYPES = {"roberta", "xlm-roberta", "camembert"}


@lru_cache(maxsize=16)
def _tokenizer(model_dir: str):  # -> tokenizers.Tokenizer | None
    path = Path(model_dir) / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(path))
    except Exception:  # an unusual tokenizer file: leave the check to the worker
        logger.warning(
            "cannot read %s; token limits are checked by the worker only", path, exc_info=True
        )
        return None
    tok.no_truncation()
    tok.no_padding()
    return tok


@lru_cache(maxsize=16)
def _limit(model_dir: str) -> int | None:
    d = Path(model_dir)
    try:
        cfg = json.loads((d / "config.json").read_text())
    except (OSError, ValueError):
        return None
    limit = cfg.get("max_position_embeddings") or cfg.get("n_positions")
    if limit is None:
        return None
    limit = int(limit) - (2 if cfg.get("model_type") in ROBERTA_TYPES else 0)
    try:
        tok_max = json.loads((d / "tokenizer_config.json").read_text()).get("model_max_length")
        if isinstance(tok_max, int | float) and 0 < tok_max < 10**7:
            limit = min(limit, int(tok_max))
    except (OSError, ValueError):
        pass
    return limit


def count_tokens(spec: ModelSpec, text: str, *, special: bool = True) -> tuple[int, int] | None:
    """(token count, with special tokens unless ``special`` is False; the model's limit), or None
    when unknown here."""
    model_dir = (
        spec.ready_dir()
    )  # None: a hub model, or a GGUF model the worker has not converted yet
    if model_dir is None:
        return None
    tok, limit = _tokenizer(model_dir), _limit(model_dir)
    if tok is None or limit is None:
        return None
    return len(tok.encode(text, add_special_tokens=special).ids), limit


def is_blank(spec: ModelSpec, text: str) -> bool:
    """True when the model's tokenizer finds no token in ``text`` (after its own normalisation).

    Models without a ``tokenizer.json`` here: False (the contract's ``visible`` check and the
    worker still apply).
    """
    model_dir = spec.ready_dir()
    if model_dir is None:
        return False
    tok = _tokenizer(model_dir)
    return tok is not None and not tok.encode(text, add_special_tokens=False).ids
