"""Errors a user can fix. Their message is shown as it is, in the CLI, the API and the dashboard.

This module imports nothing beyond the standard library so every layer can use it.
"""

from __future__ import annotations


class HeadscopeError(ValueError):
    """Base class: a problem with the user's input, with a message fit to show them."""

    code = "invalid_input"


class UnknownModelError(HeadscopeError):
    code = "unknown_model"

    def __init__(self, name: str, known: list[str]):
        self.name = name
        self.known = known
        super().__init__(f"unknown model {name!r}; available models: {', '.join(known) or 'none'}")


class EmptyTextError(HeadscopeError):
    code = "empty_text"

    def __init__(self) -> None:
        super().__init__("the text is empty: paste at least one word")


class TextTooLongError(HeadscopeError):
    code = "text_too_long"

    def __init__(self, *, count: int, limit: int, model: str):
        self.count = count
        self.limit = limit
        super().__init__(
            f"the text has {count} tokens but model {model!r} takes at most {limit} "
            f"(special tokens included); shorten it or opt in to truncation"
        )


class OutOfRangeError(HeadscopeError):
    code = "out_of_range"


class BadFileError(HeadscopeError):
    code = "bad_file"


class CancelledError(HeadscopeError):
    """The user cancelled the job; nothing of it is kept."""

    code = "cancelled"

    def __init__(self, what: str = "the job") -> None:
        super().__init__(f"{what} was cancelled")
