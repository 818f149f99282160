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
    shape = [len(layers), len(heads), int(kept.size), int(kept.size)]
    size = int(np.prod(shape))
    if size > MAX_PACKED_BYTES:
        return {"attention_omitted": f"{shape[0]} x {shape[1]} heads at {shape[2]} tokens "
                f"({size / 2**20:.0f} MiB) exceed the {MAX_PACKED_BYTES // 2**20} MiB kept for the head view"}
    a = np.asarray(attentions)[np.ix_(layers, heads, kept, kept)]  # [layer, head, query, key]
    q = np.clip(np.rint(a.astype(np.float64) * SCALE), 0, 255).astype(np.uint8)
    return {
        "attention_u8": base64.b64encode(q.tobytes()).decode("ascii"),
        "attention_shape": shape,
        "attention_scale": SCALE,
    }


def unpack_attention(section: dict[str, object]) -> np.ndarray | None:
    """``[layer, head, query, key]`` float32 weights back from ``pack_attention``'s fields, or None."""
    blob, shape = section.get("attention_u8"), section.get("attention_shape")
    if not isinstance(blob, str) or not isinstance(shape, list):
        return None
    raw = np.frombuffer(base64.b64decode(blob), dtype=np.uint8)
    scale = float(section.get("attention_scale") or SCALE)  # type: ignore[arg-type]
    return raw.reshape([int(s) for s in shape]).astype(np.float32) / np.float32(scale)
