"""What ``headscope analyze --analysis max-attention`` prints (``workers.core.report``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from workers.core.notation import head_label
from workers.core.report import num, shown_tokens


def max_attention(section: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """The most-attended tokens, and the heads that pile the most attention on one token."""
    tokens = shown_tokens(result)
    ma = np.asarray(section["max_attention"], dtype=float)  # [layer, head, kept token]
    mean = np.asarray(section["mean_attention"], dtype=float)  # [layer, head, kept token]
    kept = list(section.get("kept") or range(ma.shape[-1]))
    name = [tokens[k] if k < len(tokens) else str(k) for k in kept]
    most = ma.max(axis=(0, 1))  # [kept token]
    top = np.argsort(-most, kind="stable")[:5]
    lines = [
        "most-attended tokens (max attention over every layer and head): "
        + ", ".join(f"{name[j]} {num(most[j], 2)}" for j in top)
    ]
    peak = mean.max(axis=-1)  # [layer, head]: the largest mean attention one token receives
    order = np.argsort(-peak, axis=None, kind="stable")[:5]
    heads = []
    for flat in order:
        layer, head = np.unravel_index(flat, peak.shape)
        j = int(mean[layer, head].argmax())
        heads.append(f"{head_label(layer, head)} -> {name[j]} {num(peak[layer, head], 2)}")
    lines.append(
        "heads piling the most attention on one token (its mean attention): " + ", ".join(heads)
    )
    return lines
