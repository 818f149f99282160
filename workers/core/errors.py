"""Errors a user can fix. Their message is shown as it is, in the CLI, the API and the dashboard.

This module imports nothing beyond the standard library so every layer can use it.
"""

from __future__ import annotations

import re
from typing import Any


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
            f"(special tokens included); shorten it or {TRUNCATION}"
        )


TRUNCATION = "opt in to truncation"  # the words of a too-long text's error that offer the way on


def offers_truncation(message: str) -> bool:
    """Whether an error says the text is too long for the model (``TextTooLongError``), the case
    where truncating it (the ``truncate`` option, the CLI's ``--truncate``) is the way on."""
    return TRUNCATION in message


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


# pydantic's errors in our words: the API's 422 body, the CLI's and the engine's one line --------

_BRANCH = re.compile(r"^(int|float|str|bool|none|[a-z-]+\[.*\])$")  # a union member, not a field
_BOUNDS = {
    "greater_than": "more than {gt}",
    "greater_than_equal": "at least {ge}",
    "less_than": "less than {lt}",
    "less_than_equal": "at most {le}",
}
_TYPES = {
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "none_required": "must be null",
    "too_short": "needs at least {min_length} item(s)",
    "too_long": "takes at most {max_length} item(s)",
    "string_too_short": "must not be empty",
    "string_too_long": "takes at most {max_length:,} characters",
    "string_pattern_mismatch": "is not in the expected form",
    "json_invalid": "the body is not valid JSON",
    "finite_number": "must be a finite number",
    "enum": "must be {expected}",
}


def problem_of(err: dict[str, Any]) -> tuple[str, str]:
    """(field, problem) of one pydantic error, in our words (never pydantic's own sentence,
    except a validator's message, which is ours)."""
    loc = [str(x) for x in err.get("loc", ()) if x not in ("body", "query", "path")]
    loc = [x for x in loc if not _BRANCH.match(x)]
    kind = str(err.get("type", ""))
    ctx = err.get("ctx") or {}
    given = err.get("input")
    if kind == "value_error":
        msg = str(ctx.get("error") or err.get("msg", "invalid value")).removeprefix("Value error, ")
    elif kind == "string_too_long" and loc[-1:] == ["text"]:
        msg = f"the text has {len(given or ''):,} characters; the limit is {ctx.get('max_length', 0):,}"
    elif kind == "extra_forbidden":
        msg = f"unknown {'option' if loc[:1] == ['options'] else 'field'} {loc[-1]!r}"
        loc = loc[:-1]
    elif kind == "missing":
        msg = f"{loc[-1] if loc else 'a field'} is required"
        loc = loc[:-1]
    elif kind == "literal_error":
        msg = f"must be {ctx.get('expected', 'one of the documented values')}"
        if loc[:1] == ["analyses"]:
            msg, loc = f"unknown analysis {given!r}; it {msg}", ["analyses"]
    elif kind in _BOUNDS:
        msg = "must be " + _BOUNDS[kind].format(**ctx)
    elif kind in _TYPES:
        try:
            msg = _TYPES[kind].format(**ctx)
        except (KeyError, ValueError):
            msg = _TYPES[kind].split(" {")[0]
        if kind == "json_invalid":
            loc = []
    else:
        msg = "invalid value"
    return ".".join(loc), msg


def readable_errors(errors: list[dict[str, Any]]) -> tuple[str, list[dict[str, str]]]:
    """Pydantic's error list as one sentence and a list of ``{field, problem}``.

    A value that fits none of a union's choices (``layer: true``) yields one error per choice;
    they are merged into one problem per field (``must be a whole number or must be 'all'``).
    """
    by_field: dict[str, list[str]] = {}
    for err in errors:
        field, problem = problem_of(err)
        problems = by_field.setdefault(field, [])
        if problem not in problems:
            problems.append(problem)
    items = [
        {"field": f, "problem": p[0] + "".join(" or " + x.removeprefix("must be ") for x in p[1:])}
        for f, p in by_field.items()
    ]
    parts = [f"{i['field']}: {i['problem']}" if i["field"] else i["problem"] for i in items]
    return "; ".join(parts) or "invalid request", items


def readable(exc: ValueError) -> str:
    """A contract's ``ValidationError`` as the API words it (``readable_errors``), for the CLI: never
    pydantic's own text, whose last line is a help URL. Any other ``ValueError``: its message."""
    errors = getattr(exc, "errors", None)
    return readable_errors(list(errors()))[0] if callable(errors) else str(exc)
