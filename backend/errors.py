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
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from redis.exceptions import RedisError
from starlette.exceptions import HTTPException as StarletteHTTPException

from workers.core.errors import HeadscopeError, problem_of, readable, readable_errors  # noqa: F401 - re-exported
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
