"""Word-level attention maps (docs/compare.md): one shape for every tokenizer.

Words are the maximal runs of non-space characters of the text; a token belongs to every word its
character span overlaps, special tokens to none. A head's word-level map is

    W[u, w] = mean over query tokens t of u of  sum_{s in w} A[t, s],   each row renormalised,

so two models' maps of one text are matrices of the same size [words, words]. Notebook use::

    from workers.models import load_model
    from workers.analyses.compare.word_maps import text_word_maps
    res = text_word_maps(load_model("minilm"), "The cat sat on the mat.")
    res["words"], res["maps"]          # ["The", ...], [layer][head][word][word]

Numpy-only at import except ``WordMapper``/``text_word_maps``, which take torch tensors.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np

from workers.core.errors import HeadscopeError

if TYPE_CHECKING:
    import torch

    from workers.models.loader import LoadedModel

WORD = re.compile(r"\S+")


def word_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the words of ``text`` (maximal runs of non-space characters)."""
    return [m.span() for m in WORD.finditer(text)]


def token_words(
    offsets: list[tuple[int, int]], special: list[bool], spans: list[tuple[int, int]]
) -> np.ndarray:
    """Membership [token, word] (float64 0/1): token t belongs to word w when their spans overlap."""
    m = np.zeros((len(offsets), len(spans)))
    if not spans:
        return m
    starts = np.array([s for s, _ in spans])
    ends = np.array([e for _, e in spans])
    for t, ((a, b), sp) in enumerate(zip(offsets, special, strict=True)):
        if sp or b <= a:
            continue
        m[t] = (starts < b) & (a < ends)
    return m


def word_level(attn: np.ndarray, member: np.ndarray) -> np.ndarray:
    """Word-level maps of token maps ``attn`` [..., n, n] with membership ``member`` [n, words]:
    [..., words, words], rows renormalised over the word keys. A word no token covers (cut off by
    truncation) gets a row and column of zeros; a row with no mass on any word stays zero."""
    counts = member.sum(axis=0)  # query tokens per word
    to_words = attn @ member  # [..., n, words]: mass of each query token on each word
    w = np.swapaxes(member, 0, 1) @ to_words / np.maximum(counts, 1)[:, None]  # [..., words, words]
    total = w.sum(axis=-1, keepdims=True)
    return np.divide(w, total, out=np.zeros_like(w), where=total > 0)


class WordMapper:
    """A streamed-pass consumer (``workers.models.streaming``) keeping every head's word-level map of
    one text: ``maps`` [layer, head, words, words] float32, filled as the forward pass reaches each layer."""

    def __init__(self, n_layers: int, n_heads: int, member: np.ndarray):
        self.member = member
        self.maps = np.zeros(
            (n_layers, n_heads, member.shape[1], member.shape[1]), dtype=np.float32
        )

    def __call__(self, layer: int, weights: torch.Tensor) -> None:
        import torch

        m = torch.as_tensor(self.member, dtype=torch.float64, device=weights.device)
        a = weights[0].to(torch.float64)  # [head, n, n]
        counts = m.sum(dim=0).clamp(min=1)
        w = m.T @ (a @ m) / counts[:, None]
        total = w.sum(dim=-1, keepdim=True)
        w = torch.where(total > 0, w / torch.where(total > 0, total, 1.0), 0.0)
        self.maps[layer] = w.cpu().numpy()


def covered(member: np.ndarray) -> np.ndarray:
    """Per word: whether any token covers it (False for words cut off by truncation)."""
    return member.sum(axis=0) > 0


def word_maps_section(
    *,
    text: str,
    offsets: list[tuple[int, int]],
    special: list[bool],
    maps: np.ndarray,
    member: np.ndarray,
) -> dict[str, Any]:
    """The ``word-maps`` section (docs/results.md): the words each tokenizer reached, their spans and
    tokens, and the maps [layer][head][word][word] over those words (rounded to 1e-5)."""
    keep = np.flatnonzero(covered(member))
    spans = word_spans(text)
    kept_maps = maps[:, :, keep][:, :, :, keep]
    return {
        "words": [text[spans[i][0] : spans[i][1]] for i in keep],
        "spans": [list(spans[i]) for i in keep],
        "word_tokens": [np.flatnonzero(member[:, i]).tolist() for i in keep],
        "n_words": len(spans),
        "n_words_cut": int(len(spans) - keep.size),
        "maps": np.round(kept_maps.astype(np.float64), 5).tolist(),
    }


def check_words(text: str) -> list[tuple[int, int]]:
    """The word spans of ``text``; an error naming the problem when it has none."""
    spans = word_spans(text)
    if not spans:
        raise HeadscopeError("the text has no word (only spaces)")
    return spans


def text_word_maps(loaded: LoadedModel, text: str, *, truncate: bool = False) -> dict[str, Any]:
    """Every head's word-level map of ``text`` (one forward pass); the ``word-maps`` section."""
    from workers.models.adapters import encode, forward_streamed

    spans = check_words(text)
    enc = encode(loaded, text, truncate=truncate)
    member = token_words(enc.offsets, enc.special, spans)
    mapper = WordMapper(loaded.n_layers, loaded.n_heads, member)
    forward_streamed(loaded, enc, mapper)
    return word_maps_section(
        text=text, offsets=enc.offsets, special=enc.special, maps=mapper.maps, member=member
    )
