"""The text explorer's way on past a limit: a text longer than the model takes (or than the API's
20,000 characters) is refused with an offer to truncate it, as ``headscope analyze --truncate``
(docs/dashboard.md, "A text too long").

``truncate`` is an option of the request (``workers/core/options.py``): the worker keeps the
text's first tokens up to the model's limit. The API takes at most ``MAX_TEXT_CHARS`` characters
whatever the option, so a truncated request sends the text's first ``MAX_TEXT_CHARS`` characters.
"""

from __future__ import annotations

from typing import Any

from workers.core.errors import TRUNCATION, offers_truncation
from workers.core.options import MAX_TEXT_CHARS

OFFER = "text-truncate-offer"  # the button that ticks the option and analyzes again
SHOWN, HIDDEN = {"display": "inline-block"}, {"display": "none"}


def cut(text: str, truncate: bool) -> str:
    """The text a request sends: all of it, or its first ``MAX_TEXT_CHARS`` characters when
    truncating (the worker then cuts it to the model's token limit)."""
    return text[:MAX_TEXT_CHARS] if truncate else text


def too_many_characters(text: str) -> str | None:
    """The error of a text over the API's character limit, in the API's words; None when it fits."""
    if len(text) <= MAX_TEXT_CHARS:
        return None
    return (
        f"the text has {len(text):,} characters; the limit is {MAX_TEXT_CHARS:,}: shorten it or "
        f"{TRUNCATION}"
    )


def offer_style(message: Any) -> dict[str, str]:
    """The offer shows beside an error that says the text is too long, and only then."""
    text = message if isinstance(message, str) else ""
    return SHOWN if offers_truncation(text) else HIDDEN
