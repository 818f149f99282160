"""Errors a user can fix. Their message is shown as it is, in the CLI, the API and the dashboard.

This module imports nothing beyond the standard library so every layer can use it.
"""

from __future__ import annotations


class HeadscopeError(ValueError):
    """Base class: a problem the user can fix, with a message fit to show them.

    ``status`` is the HTTP status the API answers with (``backend/errors.py`` is the one place
    that translates); the CLI prints the message and exits non-zero.
    """

    code = "invalid_input"
    status = 422


class UnknownModelError(HeadscopeError):
    code = "unknown_model"

    def __init__(self, name: str, known: list[str]):
        self.name = name
        self.known = known
        super().__init__(f"unknown model {name!r}; available models: {', '.join(known) or 'none'}")


class EmptyTextError(HeadscopeError):
    code = "empty_text"

    def __init__(self, message: str = "the text is empty: paste at least one word") -> None:
        super().__init__(message)


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


class NotFoundError(HeadscopeError):
    """An id that names nothing stored (a job, a share, a checkpoint)."""

    code = "not_found"
    status = 404

    @classmethod
    def of(cls, what: str, ident: str, hint: str = "") -> NotFoundError:
        return cls(f"no {what} with id {ident!r}" + (f"; {hint}" if hint else ""))


class NotReadyError(HeadscopeError):
    """The target exists but is not ready for this yet (a share of an unfinished job)."""

    code = "not_ready"
    status = 409


class GoneError(HeadscopeError):
    """What an id referred to is no longer stored."""

    code = "gone"
    status = 410


class TooLargeError(HeadscopeError):
    """An upload, a view or a quota is over its limit."""

    code = "too_large"
    status = 413


class UnsupportedFileError(BadFileError):
    """A file type the endpoint does not take."""

    code = "unsupported_file"
    status = 415


class CancelledError(HeadscopeError):
    """The user cancelled the job; nothing of it is kept."""

    code = "cancelled"

    def __init__(self, what: str = "the job") -> None:
        super().__init__(f"{what} was cancelled")
