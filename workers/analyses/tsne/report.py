"""What ``headscope analyze`` prints for the t-SNE views (``workers.core.report``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from workers.core.notation import head_label
from workers.core.report import num


def _seconds(section: dict[str, Any]) -> str:
    t = (section.get("timings") or {}).get("tsne_s")
    return f", {t:.1f} s of t-SNE" if isinstance(t, (int, float)) else ""


def head_tsne(section: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """One head's KL, or the grid's best, median and worst."""
    layers, heads = section.get("layers") or [], section.get("heads") or []
    kl = np.asarray(section["kl"], dtype=float)
    engine = f"{section.get('engine', '?')} engine{_seconds(section)}"
    if kl.ndim == 1:
        return [f"{head_label(layers[0], heads[0])}: KL {num(kl[0])} ({engine})"]
    lo, hi = (
        np.unravel_index(np.nanargmin(kl), kl.shape),
        np.unravel_index(np.nanargmax(kl), kl.shape),
    )
    return [
        f"{kl.size} heads ({engine}): KL from {num(kl[lo])} ({head_label(layers[lo[0]], heads[lo[1]])}) "
        f"to {num(kl[hi])} ({head_label(layers[hi[0]], heads[hi[1]])}), median {num(np.nanmedian(kl))}"
    ]


def hidden_tsne(section: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """The KL of each state's map."""
    pairs = zip(section.get("layers") or [], section.get("kl") or [], strict=False)
    return [
        f"KL per hidden state (perplexity {num(section.get('perplexity'))}{_seconds(section)}): "
        + ", ".join(f"X[{layer}] {num(k)}" for layer, k in pairs)
    ]


def word_tsne(section: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """The words embedded and each state's KL."""
    words = section.get("words") or []
    pairs = zip(section.get("layers") or [], section.get("kl") or [], strict=False)
    return [
        f"{len(words)} items ({section.get('pooling', '?')} pooling): "
        + ", ".join(f"X[{layer}] KL {num(k)}" for layer, k in pairs)
    ]


def robustness(section: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """Both maps' KL undisturbed and disturbed (mean ± sd over the repeats)."""
    lines = [
        f"{head_label(section['layer'], section['head'])}, {num(section.get('fraction'))} of the "
        f"tokens replaced, {section.get('repeats')} repeats:"
    ]
    for key, name in (("head_tsne", "attention-head t-SNE"), ("hidden_tsne", "hidden-state t-SNE")):
        part = section.get(key) or {}
        u, d = part.get("undisturbed") or {}, part.get("disturbed") or {}
        lines.append(
            f"{name}: KL {num(u.get('mean'))} ± {num(u.get('sd'), 2)} undisturbed, "
            f"{num(d.get('mean'))} ± {num(d.get('sd'), 2)} disturbed"
        )
    return lines
