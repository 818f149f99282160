"""The FastAPI application: API routers under ``/api``, OpenAPI docs at ``/docs``, the Dash app at ``/``.

Never imports torch (tests/test_layering.py checks it): jobs run in worker processes.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from types import ModuleType
from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, JSONResponse
from redis import Redis

from backend import errors, quota
from backend.api import analyses, checkpoints, corpora, health, models, pe, shares, task_sets
from backend.api import compare as compare_api
from backend.config import Settings, get_settings
from backend.queue import JobQueue
from backend.store import SchemaOutOfDate, Store, StoreUnavailable
from workers.core.errors import TooLargeError
from workers.queue import keys as protocol

logger = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 3600.0


class BodyTooLarge(TooLargeError):
    def __init__(self, limit: int):
        super().__init__(f"the upload is larger than the {limit:,}-byte limit")


class UploadLimit:
    """ASGI middleware: stop reading an upload body once it passes the limit (413)."""

    def __init__(self, app: Any, *, limit: int, paths: tuple[str, ...]):
        self.app, self.limit, self.paths = app, limit, paths

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return
        slack = 64 * 1024  # multipart headers and boundaries around the file
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit + slack:
            detail = str(BodyTooLarge(self.limit))
            await JSONResponse({"detail": detail}, status_code=413)(scope, receive, send)
            return
        seen = 0

        async def limited() -> dict:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit + slack:
                raise BodyTooLarge(self.limit)
            return message

        await self.app(scope, limited, send)


def mount_frontend(app: FastAPI, *, api_base_url: str) -> None:
    """Mount the Dash app at ``/`` (after the API routes) via a2wsgi, or a placeholder page.

    Dash runs as a WSGI app in a2wsgi's thread pool, so its callbacks can call this API over HTTP
    without blocking the event loop (Dash's native FastAPI mode would).
    """
    from a2wsgi import WSGIMiddleware

    try:
        from frontend.app import create_dash_app
    except ModuleNotFoundError as exc:
        if exc.name not in ("frontend.app", "frontend"):
            raise
        logger.warning("frontend.app not found: serving a placeholder page at /")

        @app.get("/", response_class=HTMLResponse, include_in_schema=False)
        def placeholder() -> str:
            return (
                "<!doctype html><title>headscope</title><h1>headscope</h1>"
                "<p>The dashboard is not installed in this build. The API is running: "
                '<a href="/docs">/docs</a>.</p>'
            )

        return
    dash_app = create_dash_app(api_base_url)
    app.mount("/", WSGIMiddleware(dash_app.server))  # type: ignore[arg-type]


def create_app(
    settings: Settings | None = None,
    *,
    redis: Redis | None = None,
    frontend: bool = True,
    api_base_url: str | None = None,
    background: bool = True,
    store: Store | None = None,
) -> FastAPI:
    """The application. ``background`` runs the reaper (abandoned jobs) and the result sweeper.

    At start-up the store is prepared (SQLite migrated; PostgreSQL must be at the current schema,
    else the app refuses to start and names ``headscope migrate``); a database that cannot be
    reached yet is only logged: requests get 503 until it answers.
    """
    settings = settings or get_settings()
    conn = redis or Redis.from_url(settings.redis_url or "redis://127.0.0.1:6379/0")
    store = store or Store(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        try:
            store.prepare()
        except SchemaOutOfDate:
            raise
        except StoreUnavailable as exc:
            logger.warning("starting without the database: %s", exc)
        tickers = []
        if background:
            tickers = [
                protocol.Ticker(
                    lambda: protocol.reap_abandoned(conn),
                    interval_s=settings.reaper_interval_s,
                    name="reaper",
                ).start(),
                protocol.Ticker(
                    lambda: quota.sweep(store, settings),
                    interval_s=SWEEP_INTERVAL_S,
                    name="sweeper",
                ).start(),
            ]
        yield
        for t in tickers:
            t.stop()

    app = FastAPI(
        title="headscope",
        description="Look inside transformer models: analyses run in queued workers; see docs/api.md.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.redis = conn
    app.state.store = store
    app.state.queue = JobQueue(conn, store, settings)

    errors.install(app)  # every error's translation to HTTP, the 503s included

    if settings.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type"],
        )
    app.add_middleware(
        UploadLimit,
        limit=settings.max_upload_bytes,
        paths=("/api/checkpoints", "/api/corpora", "/api/task-sets"),
    )
    routers: tuple[ModuleType, ...] = (health, models, analyses, checkpoints, pe, shares, corpora)
    routers += (compare_api, task_sets)  # docs/compare.md, docs/circuits.md
    for module in routers:
        app.include_router(module.router)
    errors.add_catch_all(app, [m.router for m in routers])
    if frontend:
        base = api_base_url or settings.api_base_url
        mount_frontend(app, api_base_url=base)
    errors.declare(app)
    return app
