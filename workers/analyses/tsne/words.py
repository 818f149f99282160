"""The word list of ``word-tsne``: its items, and the bounds the API and the CLI check before any
model work (README "Limits", docs/results.md#word-tsne).

Torch-free (standard library and the contracts only), so the backend checks a list before queueing
it and the CLI before loading the model; the section (``workers.engine.pipeline``) reads the same
items.
"""

from __future__ import annotations

from workers.core.contracts import MAX_WORDS
from workers.core.errors import HeadscopeError

MIN_WORDS = 4  # fewer points leave t-SNE's perplexity no room ((n - 1) / 3 < 1)

__all__ = ["MAX_WORDS", "MIN_WORDS", "check_word_list", "word_list"]


def word_list(text: str) -> list[str]:
    """The items of a word list: one per non-empty line (commas also split one-line lists).

    ``"new york, paris , rome"`` -> ``["new york", "paris", "rome"]``.
    """
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) == 1 and "," in lines[0]:
        lines = [w.strip() for w in lines[0].split(",") if w.strip()]
    return lines


def check_word_list(text: str) -> list[str]:
    """The items of ``text`` when there are ``MIN_WORDS`` to ``MAX_WORDS`` of them, else a
    ``HeadscopeError`` (a 422, exit status 2) stating the count and the bound."""
    words = word_list(text)
    if len(words) < MIN_WORDS:
        raise HeadscopeError(
            f"word-tsne needs at least {MIN_WORDS} items (one per line), got {len(words)}"
        )
    if len(words) > MAX_WORDS:
        raise HeadscopeError(
            f"the word list has {len(words):,} items; the limit is {MAX_WORDS:,} (one item per line)"
        )
    return words
