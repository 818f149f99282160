"""Where a head's data sits in a text result: pure look-ups shared by every figure module.

A result can hold one head's t-SNE (``result[HEAD_TSNE]`` for one layer and head, with its exact
attention matrix), a grid of heads (``head-tsne`` with layer/head ``all``), or both: the requested
head plus every head as ``result[ALL_HEADS]`` (the service's ``all_heads`` option; both keys are
named in ``workers/analyses/tsne/spec.py``). The grid
carries every head's attention one byte a weight (``workers/core/packing.py``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from workers.analyses.tsne.spec import ALL_HEADS, HEAD_TSNE
from workers.core.packing import unpack_attention

GALLERY_KEYS = (ALL_HEADS, HEAD_TSNE)


def gallery_section(result: dict[str, Any]) -> dict[str, Any] | None:
    """The grid-form head-tsne section (every head of some layers), or None."""
    for key in GALLERY_KEYS:
        sec = result.get(key)
        if sec and np.ndim(sec.get("kl")) == 2:
            return sec
    return None


def head_sections(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The head-tsne sections to look a head up in, the exact one-head section first."""
    return [s for s in (result.get(HEAD_TSNE), result.get(ALL_HEADS)) if s]


def head_view_key(
    source: dict[str, Any] | None,
    status: dict[str, Any],
    *,
    layer: int | None,
    head: int | None,
    options: list[Any],
) -> list[Any]:
    """What a head view of the text explorer (matrix, lines) is drawn from: the source, the head, the
    view's ``options``, whether the job failed or is none, and which section holds the head. The same
    key, the same figure: the page re-sends nothing when a section it does not show arrives (a
    large matrix was re-sent and redrawn with every section: docs/dashboard.md, "Where the browser's
    CPU went"). Callers add what else a figure reads
    (``section_layers``). JSON values only (kept in a dcc.Store)."""
    result = status.get("result") or {}
    holder = next(
        (
            name
            for name in (HEAD_TSNE, ALL_HEADS)
            if (sec := result.get(name))
            and layer in sec.get("layers", [])
            and head in sec.get("heads", [])
        ),
        None,
    )
    return [
        (source or {}).get("kind"),
        (source or {}).get("id"),
        layer,
        head,
        *options,
        status.get("status") in ("failed", "none"),
        bool(result.get(HEAD_TSNE)),
        holder,
    ]


def section_layers(section: dict[str, Any] | None) -> list[Any]:
    """A section's layers so far, and whether its attention was left out: what a figure drawn from it
    changes with (``[]`` when there is none)."""
    return [list((section or {}).get("layers") or []), "attention_omitted" in (section or {})]


def has_head(result: dict[str, Any], layer: int, head: int) -> bool:
    """Whether some section of ``result`` holds the map of (layer, head)."""
    return any(
        layer in s.get("layers", []) and head in s.get("heads", []) for s in head_sections(result)
    )


@lru_cache(maxsize=8)
def _unpacked(blob: str, shape: tuple[int, ...], scale: float) -> np.ndarray:
    return unpack_attention(
        {"attention_u8": blob, "attention_shape": list(shape), "attention_scale": scale}
    )  # type: ignore[return-value]


def grid_attention(section: dict[str, Any]) -> np.ndarray | None:
    """``[layer, head, query, key]`` of a grid section (1/255 resolution), or None (decoded once)."""
    blob, shape = section.get("attention_u8"), section.get("attention_shape")
    if not isinstance(blob, str) or not shape:
        return None
    return _unpacked(
        blob, tuple(int(s) for s in shape), float(section.get("attention_scale") or 255)
    )


def head_attention(
    result: dict[str, Any], layer: int, head: int
) -> tuple[np.ndarray, list[int], bool] | None:
    """(matrix ``[query, key]`` over kept tokens, kept indices, exact?) of (layer, head), or None.

    The one-head section's 6-decimal matrix when it is that head, else the grid's byte-coded one.
    """
    one = result.get(HEAD_TSNE)
    if (
        one
        and one.get("attention") is not None
        and one.get("layers") == [layer]
        and one.get("heads") == [head]
    ):
        a = np.asarray(one["attention"], dtype=np.float64)
        return a, list(one.get("kept") or range(a.shape[0])), True
    sec = gallery_section(result)
    if sec is None or layer not in sec.get("layers", []) or head not in sec.get("heads", []):
        return None
    grid = grid_attention(sec)
    if grid is None:
        return None
    a = grid[sec["layers"].index(layer), sec["heads"].index(head)].astype(np.float64)
    return a, list(sec.get("kept") or range(a.shape[0])), False


def waiting(job: list[dict[str, Any]] | None, source: dict[str, Any] | None) -> bool:
    """Whether a text-page view that follows the store ``text-job-late`` waits for it: a source is
    set and the store is still empty, as when a stored result's link is opened and its gallery is
    not painted yet (``assets/gallery.js``: lateSections). The store's value, when it comes, draws
    the view with the inputs then current (a head clicked meanwhile included)."""
    return job is None and bool((source or {}).get("id"))
