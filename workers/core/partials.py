"""A grid head-tsne section published layer by layer while it is computed (docs/api.md;
docs/dashboard.md, "How fast the gallery arrives").

Embedding every head of a 30-layer model takes seconds; the job publishes each finished layer as its
own partial key ``{section}@L{layer}`` (``head-tsne-all@L0``, ...), written once and never changed,
so a reader downloads each layer once. The finished result holds only the whole section. ``fold``
turns the parts of a partial result back into a section of the finished layers, shaped as the
finished one (``layers`` lists the layers present), with ``partial`` saying how far it got::

    fold({"head-tsne-all@L0": part0, "head-tsne-all@L1": part1})
    -> {"head-tsne-all": {"layers": [0, 1], ..., "partial": {"layers_done": 2, "layers": [0, ..., 29]}}}

Plain Python and numpy: the worker, the backend's clients and the dashboard use it.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

SEP = "@L"


def part_key(section: str, layer: int) -> str:
    """``head-tsne-all@L3``."""
    return f"{section}{SEP}{int(layer)}"


def parse_part_key(key: str) -> tuple[str, int] | None:
    """(section, layer) of a part key, or None for any other key."""
    section, sep, layer = key.rpartition(SEP)
    return (section, int(layer)) if sep and section and layer.isdigit() else None


def part_fields(*, layer: int, layers: list[int], heads: list[int], kept: list[int], embedding: np.ndarray,
                kl: np.ndarray, kl_restarts: np.ndarray, engine: str, attention: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """One layer's part: ``embedding`` [head, token, 2], ``kl`` [head], ``kl_restarts`` [head, restart],
    ``attention``: ``workers.core.packing.encode_packed`` of this layer ([1, head, n, n]) or ``attention_omitted``."""
    return {
        "layer": int(layer), "of_layers": [int(x) for x in layers], "heads": [int(h) for h in heads],
        "kept": [int(k) for k in kept], "engine": engine, "embedding": np.asarray(embedding).tolist(),
        "kl": np.asarray(kl).tolist(), "kl_restarts": np.asarray(kl_restarts).tolist(), **attention,
    }  # fmt: skip


def join_base64(blobs: list[str]) -> str:
    """The base64 of the layers' bytes joined, from each layer's base64 text."""
    if any(b.endswith("=") for b in blobs[:-1]):  # padded: the bytes are joined, not the text
        return base64.b64encode(b"".join(base64.b64decode(b) for b in blobs)).decode("ascii")
    # whole groups of 3 bytes (9 heads, or n a multiple of 3): base64 of the join = join of the base64
    return "".join(blobs)


def _section(parts: list[dict[str, Any]]) -> dict[str, Any]:
    parts = sorted(parts, key=lambda p: p["layer"])
    first = parts[0]
    out: dict[str, Any] = {
        "layers": [p["layer"] for p in parts], "heads": first["heads"], "kept": first["kept"],
        "engine": first.get("engine"), "embedding": [p["embedding"] for p in parts], "kl": [p["kl"] for p in parts],
        "kl_restarts": [p["kl_restarts"] for p in parts],
        "partial": {"layers_done": len(parts), "layers": first.get("of_layers") or [p["layer"] for p in parts]},
    }  # fmt: skip
    omitted = next((p["attention_omitted"] for p in parts if p.get("attention_omitted")), None)
    if omitted:
        out["attention_omitted"] = omitted
    elif all(isinstance(p.get("attention_u8"), str) for p in parts):
        joined = join_base64([p["attention_u8"] for p in parts])
        shape = list(first["attention_shape"])
        out.update(attention_u8=joined, attention_shape=[len(parts), *shape[1:]],
                   attention_scale=first.get("attention_scale"))  # fmt: skip
    return out


def fold(partial: dict[str, Any]) -> dict[str, Any]:
    """``partial`` with its layer parts replaced by the sections they make (a section already
    present, i.e. finished, wins and its parts are dropped)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    out: dict[str, Any] = {}
    for key, value in partial.items():
        parsed = parse_part_key(key)
        if parsed is None or not isinstance(value, dict):
            out[key] = value
        else:
            groups.setdefault(parsed[0], []).append(value)
    for section, parts in groups.items():
        if section not in out:
            out[section] = _section(parts)
    return out


LAYER_FIELDS = ("embedding", "kl", "kl_restarts", "attention_u8")  # one entry (or bytes) per layer


def split(section: Any) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """A finished grid section as (what is not per layer, its layer parts in its layers' order), the
    inverse of ``fold``: ``fold`` of the parts is the section, apart from ``partial`` and the section's
    own keys (``backend``, ``fallback``, ``timings``, kept in the first value). None: not a grid section.
    The store keeps a stored result's gallery this way (docs/api.md, "Sections of a finished result")."""
    if not isinstance(section, dict) or "partial" in section:
        return None
    layers = section.get("layers")
    if not isinstance(layers, list) or not layers or not all(isinstance(x, int) for x in layers):
        return None
    n = len(layers)
    if not all(
        isinstance(section.get(k), list) and len(section[k]) == n
        for k in ("embedding", "kl", "kl_restarts")
    ):
        return None
    if "heads" not in section or "kept" not in section:
        return None
    attention: list[dict[str, Any]] = [{} for _ in layers]
    if section.get("attention_omitted"):
        attention = [{"attention_omitted": section["attention_omitted"]} for _ in layers]
    elif isinstance(section.get("attention_u8"), str):
        shape, raw = section.get("attention_shape"), base64.b64decode(section["attention_u8"])
        if not isinstance(shape, list) or not shape or shape[0] != n or len(raw) % n:
            return None
        per = len(raw) // n
        attention = [{"attention_u8": base64.b64encode(raw[i * per : (i + 1) * per]).decode("ascii"),
                      "attention_shape": [1, *shape[1:]], "attention_scale": section.get("attention_scale")}
                     for i in range(n)]  # fmt: skip
    parts = [
        {"layer": layer, "of_layers": list(layers), "heads": section["heads"], "kept": section["kept"],
         "engine": section.get("engine"), "embedding": section["embedding"][i], "kl": section["kl"][i],
         "kl_restarts": section["kl_restarts"][i], **attention[i]}
        for i, layer in enumerate(layers)
    ]  # fmt: skip
    rest = {k: v for k, v in section.items() if k not in LAYER_FIELDS}
    return rest, parts
