"""A word list: the text of the word-tsne analysis, one item per line (torch-free)."""

from __future__ import annotations

from workers.core.errors import HeadscopeError

MAX_WORDS = 2_000  # word-tsne: items in the list
MIN_WORDS = 4


def word_list(text: str) -> list[str]:
    """The items of a word list: one per non-empty line (commas also split one-line lists)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) == 1 and "," in lines[0]:
        lines = [w.strip() for w in lines[0].split(",") if w.strip()]
    return lines


def check_word_list(text: str) -> list[str]:
    """The items, or an error naming the limit: ``MIN_WORDS`` to ``MAX_WORDS`` items."""
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
