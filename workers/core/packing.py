"""All heads' attention matrices in a compact, JSON-safe form for the dashboard's head and model views.

Each weight becomes one byte, ``round(255 · A)`` (a resolution of 1/255 ≈ 0.004: weights below
0.002 read as 0), and the bytes of ``[layer, head, query, key]`` (kept tokens only) travel as one
base64 string. 72 MiniLM heads cost 1.6 MB of JSON at 128 tokens and 25 MB at 512; beyond
``MAX_PACKED_BYTES`` the field is left out and the result says why.
"""

from __future__ import annotations

import base64

import numpy as np

MAX_PACKED_BYTES = 32 * 2**20  # raw bytes; a 16 x 32 LLM at 512 tokens (134 MB) is left out
SCALE = 255.0


def packed_shape(
    layers: list[int], heads: list[int], kept: np.ndarray
) -> tuple[list[int], str | None]:
    """``([L, H, n, n], None)``, or the shape and why it is too large to pack."""
    shape = [len(layers), len(heads), int(np.asarray(kept).size), int(np.asarray(kept).size)]
    size = int(np.prod(shape))
    if size > MAX_PACKED_BYTES:
        return shape, (
            f"{shape[0]} x {shape[1]} heads at {shape[2]} tokens ({size / 2**20:.0f} MiB) exceed "
            f"the {MAX_PACKED_BYTES // 2**20} MiB kept for the head view"
        )
    return shape, None


def quantise(a: np.ndarray) -> np.ndarray:
    """Weights in [0, 1] as bytes, ``round(255 · a)``."""
    return np.clip(np.rint(np.asarray(a, dtype=np.float64) * SCALE), 0, 255).astype(np.uint8)


def encode_packed(q: np.ndarray) -> dict[str, object]:
    """The JSON fields of already quantised ``[layer, head, query, key]`` bytes."""
    return {
        "attention_u8": base64.b64encode(np.ascontiguousarray(q).tobytes()).decode("ascii"),
        "attention_shape": [int(s) for s in q.shape],
        "attention_scale": SCALE,
    }


def pack_attention(
    attentions: np.ndarray, *, layers: list[int], heads: list[int], kept: np.ndarray
) -> dict[str, object]:
    """``{"attention_u8": base64, "attention_shape": [L, H, n, n], "attention_scale": 255}``.

    Args:
        attentions: ``[layer, head, query, key]`` of the whole text.
        layers, heads: the grid to pack, in this order.
        kept: token indices kept (rows and columns), as in the t-SNE section.
    """
    kept = np.asarray(kept, dtype=np.int64)
    _, too_large = packed_shape(layers, heads, kept)
    if too_large:
        return {"attention_omitted": too_large}
    return encode_packed(
        quantise(np.asarray(attentions)[np.ix_(np.asarray(layers), np.asarray(heads), kept, kept)])
    )


def unpack_attention(section: dict[str, object]) -> np.ndarray | None:
    """``[layer, head, query, key]`` float32 weights back from ``pack_attention``'s fields, or None."""
    blob, shape = section.get("attention_u8"), section.get("attention_shape")
    if not isinstance(blob, str) or not isinstance(shape, list):
        return None
    raw = np.frombuffer(base64.b64decode(blob), dtype=np.uint8)
    scale = float(section.get("attention_scale") or SCALE)  # type: ignore[arg-type]
    return raw.reshape([int(s) for s in shape]).astype(np.float32) / np.float32(scale)
