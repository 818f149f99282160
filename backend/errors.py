"""One error model for every API response that is not a success (docs/api.md "Errors").

Every 4xx/5xx body is ``{"detail": "<a sentence for the user>"}``; a 422 for a malformed request
adds ``"errors": [{"field": "options.layer", "problem": "..."}]``, one item per problem. The
OpenAPI document declares exactly these shapes (``error_responses``), so a client generated from
it, or schemathesis, sees what the server sends. Messages are the project's own words: a library's
exception text never reaches a client (unexpected errors are logged and answered with a fixed 500).

Routers raise the domain errors of ``workers/core/errors.py`` (each knows its status: 422 for input,
404 not found, 409 not ready, 410 gone, 413 too large, 415 unsupported file); Redis or the database
out of reach answers 503. HTTP-level refusals (401 token, 429 rate limit) stay HTTPExceptions in
their dependencies.

A wrong method on an API path answers 405 with ``Allow``; an unknown ``/api/...`` path answers
404 here instead of falling through to the dashboard mounted at ``/``.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from redis.exceptions import RedisError
from starlette.exceptions import HTTPException as StarletteHTTPException

from workers.core.errors import HeadscopeError
from workers.store.engine import StoreUnavailable

logger = logging.getLogger(__name__)


class FieldProblem(BaseModel):
    """One problem with one field of a request."""

    field: str = Field(
        ..., description="dotted path of the field, e.g. options.layer; empty: the whole body"
    )
    problem: str = Field(..., description="what is wrong, in words fit to show a user")


class ErrorBody(BaseModel):
    """The body of every error response."""

    detail: str = Field(..., description="what went wrong and, where it helps, what to do")


class ValidationErrorBody(ErrorBody):
    """A request that does not fit its schema: the sentence plus one item per problem."""

    errors: list[FieldProblem] = Field(default_factory=list)


ERROR_DESCRIPTIONS = {
    400: "the request cannot be processed as sent",
    401: "a write without the API token the server needs",
    404: "unknown id or path",
    405: "method not allowed on this path (see the Allow header)",
    409: "the target is not ready yet",
    410: "gone: what this refers to is no longer stored",
    413: "too large (upload, view or storage quota)",
    415: "unsupported file type",
    429: "too many writes from this client; retry after Retry-After seconds",
    503: "the job queue or the workers are unavailable; try again shortly",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for a route: 422 with the validation body plus ``codes``."""
    out: dict[int | str, dict[str, Any]] = {
        422: {
            "model": ValidationErrorBody,
            "description": "invalid request: detail plus one item per problem",
        },
    }
    for code in codes:
        out[code] = {"model": ErrorBody, "description": ERROR_DESCRIPTIONS.get(code, "error")}
    return out


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


def install(app: FastAPI) -> None:
    """The exception handlers: every error body is ``ErrorBody`` / ``ValidationErrorBody``."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        detail, items = readable_errors(list(exc.errors()))
        return JSONResponse({"detail": detail, "errors": items}, status_code=422)

    @app.exception_handler(HeadscopeError)
    async def _user_error(request: Request, exc: HeadscopeError) -> JSONResponse:
        status = int(getattr(exc, "status", 422))
        body: dict[str, Any] = {"detail": str(exc)}
        if status == 422:
            body["errors"] = []
        return JSONResponse(body, status_code=status)

    @app.exception_handler(RedisError)
    async def _redis_down(request: Request, exc: RedisError) -> JSONResponse:
        logger.warning("Redis error: %s", exc)
        return JSONResponse(
            {"detail": "the job queue (Redis) is unreachable; try again shortly"}, status_code=503
        )

    @app.exception_handler(StoreUnavailable)
    async def _database_down(request: Request, exc: StoreUnavailable) -> JSONResponse:
        logger.warning("store unavailable: %s", exc)
        return JSONResponse({"detail": f"{exc}; try again shortly"}, status_code=503)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else "the request was refused"
        body: dict[str, Any] = {"detail": detail}
        if exc.status_code == 422:
            body["errors"] = []
        return JSONResponse(
            body, status_code=exc.status_code, headers=getattr(exc, "headers", None)
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error on %s %s", request.method, request.url.path)
        return JSONResponse(
            {"detail": "internal error; the server log has the details"}, status_code=500
        )


def add_catch_all(app: FastAPI, routers: list[APIRouter]) -> None:
    """``/api/...`` paths no route takes: 405 + Allow for a known path, else 404 (after the API
    routers, before the dashboard's mount at ``/``)."""
    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE"]

    @app.api_route("/api/{rest:path}", methods=methods, include_in_schema=False)
    async def _no_route(request: Request, rest: str) -> JSONResponse:
        allowed: set[str] = set()
        for router in routers:
            for route in router.routes:
                if route.path_regex.fullmatch(request.url.path):  # type: ignore[attr-defined]
                    allowed |= set(getattr(route, "methods", ()))
        if allowed:
            allow = ", ".join(sorted(allowed))
            return JSONResponse(
                {
                    "detail": f"{request.method} is not allowed on {request.url.path}; allowed: {allow}"
                },
                status_code=405,
                headers={"Allow": allow},
            )
        return JSONResponse(
            {"detail": f"no API endpoint at {request.url.path}; see /docs"}, status_code=404
        )


def declare(app: FastAPI) -> None:
    """Make ``/openapi.json`` declare the error bodies the server sends, on every operation.

    Every operation gets 422 (``ValidationErrorBody``: FastAPI's default would declare pydantic's
    list) and 503 (Redis unreachable); writes also get 401 (token) and 429 (rate limit). Codes a
    route declares itself (``responses=error_responses(404, ...)``) get ``ErrorBody`` as well.
    """
    from fastapi.openapi.utils import get_openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        comps = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in (FieldProblem, ErrorBody, ValidationErrorBody):
            comps[model.__name__] = model.model_json_schema(
                ref_template="#/components/schemas/{model}"
            )
        comps.pop("HTTPValidationError", None)
        comps.pop("ValidationError", None)
        ref = {"$ref": "#/components/schemas/ErrorBody"}
        vref = {"$ref": "#/components/schemas/ValidationErrorBody"}
        for item in schema.get("paths", {}).values():
            for method, op in item.items():
                responses = op.setdefault("responses", {})
                codes = {"422", "503"} | (
                    {"401", "429"} if method in ("post", "put", "patch", "delete") else set()
                )
                for code in codes | {c for c in responses if c[:1] in "45"}:
                    desc = responses.get(code, {}).get("description") or ERROR_DESCRIPTIONS.get(
                        int(code), "error"
                    )
                    body = vref if code == "422" else ref
                    responses[code] = {
                        "description": desc,
                        "content": {"application/json": {"schema": body}},
                    }
                    if code == "429":
                        responses[code]["headers"] = {
                            "Retry-After": {
                                "description": "seconds to wait",
                                "schema": {"type": "integer"},
                            }
                        }
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
