"""t-SNE figures: one head's attention-head t-SNE, the hidden states' standard t-SNE, a word list's
map, and the two KLs side by side. Pure functions, result JSON -> plotly Figure.

A head's map is looked up in the one-head section (``HEAD_TSNE``) first, then in the every-head
grid (``ALL_HEADS``); see ``frontend/kit/heads.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from frontend.figures.base import empty_figure, token_scatter
from frontend.figures.tokens import token_labels
from frontend.kit.heads import head_sections
from workers.analyses.tsne.spec import HIDDEN_TSNE, WORD_TSNE
from workers.core.notation import head_label


def head_embedding(section: dict[str, Any], layer: int, head: int) -> dict[str, Any] | None:
    """The map of one head from a head-tsne section (one-head or grid form), or None."""
    layers, heads = list(section.get("layers", [])), list(section.get("heads", []))
    if layer not in layers or head not in heads:
        return None
    emb = np.asarray(section["embedding"], dtype=np.float64)
    kl = np.asarray(section["kl"], dtype=np.float64)
    restarts = np.asarray(section.get("kl_restarts", []), dtype=np.float64)
    if emb.ndim == 2:  # one head: [token, 2]
        return {
            "embedding": emb,
            "kl": float(kl.ravel()[0]),
            "kl_restarts": restarts.ravel().tolist(),
            "attention": section.get("attention"),
        }
    li, hi = layers.index(layer), heads.index(head)  # grid: [layer, head, token, 2]
    return {
        "embedding": emb[li, hi],
        "kl": float(kl[li, hi]),
        "kl_restarts": restarts[li, hi].tolist() if restarts.ndim == 3 else [],
        "attention": None,
    }


def find_head(
    result: dict[str, Any], layer: int, head: int
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(section, ``head_embedding``) of (layer, head) in the first head-tsne section holding it."""
    for sec in head_sections(result):
        found = head_embedding(sec, layer, head)
        if found is not None:
            return sec, found
    return None


def state_embedding(section: dict[str, Any], state: int) -> dict[str, Any] | None:
    """The map of one hidden state from a hidden-tsne / word-tsne section, or None."""
    layers = list(section.get("layers", []))
    if state not in layers:
        return None
    emb = np.asarray(section["embedding"], dtype=np.float64)
    i = layers.index(state)
    kl = section.get("kl") or []
    return {
        "embedding": emb if emb.ndim == 2 else emb[i],
        "kl": float(kl[i]) if i < len(kl) else None,
    }


def head_tsne_figure(
    result: dict[str, Any], *, layer: int, head: int, rescale: bool = True
) -> go.Figure:
    """Attention-head t-SNE of (layer, head): tokens as labels, coloured by position."""
    hit = find_head(result, layer, head)
    if hit is None:
        return empty_figure(f"No attention-head t-SNE for {head_label(layer, head)} yet.")
    section, found = hit
    kept = section.get("kept") or list(range(len(found["embedding"])))
    restarts = found["kl_restarts"]
    best = f" (best of {len(restarts)})" if len(restarts) > 1 else ""
    return token_scatter(
        found["embedding"],
        indices=kept,
        labels=token_labels(result, kept),
        colour=np.asarray(kept, dtype=np.float64),
        title=f"Attention-head t-SNE — {head_label(layer, head)} — KL {found['kl']:.4f}{best}",
        rescale=rescale,
    )


def hidden_tsne_figure(result: dict[str, Any], *, state: int, rescale: bool = True) -> go.Figure:
    """Standard t-SNE of the hidden states X[state] (state l + 1 = output of layer l)."""
    section = result.get(HIDDEN_TSNE)
    found = state_embedding(section, state) if section else None
    if found is None:
        return empty_figure(f"No hidden-state t-SNE for state {state} yet.")
    kept = section.get("kept") or list(range(len(found["embedding"])))
    what = "embedding output" if state == 0 else f"output of layer {state - 1}"
    kl = f" — KL {found['kl']:.4f}" if found["kl"] is not None else ""
    return token_scatter(
        found["embedding"],
        indices=kept,
        labels=token_labels(result, kept),
        colour=np.asarray(kept, dtype=np.float64),
        title=f"Standard t-SNE of hidden states X[{state}] ({what}), perplexity "
        f"{section.get('perplexity', '?'):.3g}{kl}",
        rescale=rescale,
    )


def kl_summary(result: dict[str, Any], *, layer: int, head: int) -> str:
    """One line comparing the two KLs of the head view (docs/analyses.md, thesis Fig. 12)."""
    parts = []
    hid_sec = result.get(HIDDEN_TSNE)
    found = (find_head(result, layer, head) or (None, None))[1]
    if found:
        parts.append(f"KL attention-head t-SNE ({head_label(layer, head)}): {found['kl']:.4f}")
        if len(found["kl_restarts"]) > 1:
            parts.append("restarts: " + ", ".join(f"{k:.4f}" for k in found["kl_restarts"]))
    state = state_embedding(hid_sec, layer + 1) if hid_sec else None
    if state and state["kl"] is not None:
        parts.append(f"KL standard t-SNE of X[{layer + 1}]: {state['kl']:.4f}")
    return " · ".join(parts)


# ---------------------------------------------------------------------------- word lists


def words_tsne_figure(result: dict[str, Any], *, state: int, rescale: bool = True) -> go.Figure:
    """t-SNE of the multi-token embeddings of a word list at one state."""
    section = result.get(WORD_TSNE)
    found = state_embedding(section, state) if section else None
    if found is None:
        return empty_figure(f"No word-list t-SNE for state {state} yet.")
    words = section.get("words") or [f"#{i}" for i in range(len(found["embedding"]))]
    n = len(words)
    kl = f" — KL {found['kl']:.4f}" if found["kl"] is not None else ""
    return token_scatter(
        found["embedding"],
        indices=list(range(n)),
        labels=words,
        colour=np.arange(n, dtype=np.float64),
        colour_title="item",
        title=f"t-SNE of {n} items ({section.get('pooling', '?')} pooling) at state {state}{kl}",
        rescale=rescale,
        show_text=n <= 300,
        height=560,
    )
