"""FastAPI dependencies: the settings, Redis, the store and the queue held by the app, the token."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request
from redis import Redis

from backend.config import Settings
from backend.queue import JobQueue
from backend.store import Store


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_redis(request: Request) -> Redis:
    return request.app.state.redis


def get_store(request: Request) -> Store:
    return request.app.state.store


def get_queue(request: Request) -> JobQueue:
    return request.app.state.queue


def require_token(
    settings: Annotated[Settings, Depends(get_settings)],
    authorization: Annotated[str | None, Header()] = None,
) -> None:
    """Write endpoints: with ``HEADSCOPE_API_TOKEN`` set, ask for ``Authorization: Bearer <token>``."""
    if not settings.api_token:
        return
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip(), settings.api_token):
        raise HTTPException(
            401,
            "this server needs an API token for writes: send Authorization: Bearer <token>",
            headers={"WWW-Authenticate": "Bearer"},
        )


def require_write(
    request: Request,
    settings: Annotated[Settings, Depends(get_settings)],
    authorization: Annotated[str | None, Header()] = None,
) -> None:
    """Every write: the token (if configured), then the client's rate limit (backend/ratelimit.py)."""
    from backend.ratelimit import check_write_rate

    require_token(settings, authorization)
    check_write_rate(request)


SettingsDep = Annotated[Settings, Depends(get_settings)]
RedisDep = Annotated[Redis, Depends(get_redis)]
StoreDep = Annotated[Store, Depends(get_store)]
QueueDep = Annotated[JobQueue, Depends(get_queue)]
WriteAccess = Depends(require_write)
