"""``GET /api/health``: Redis and the database reachable, workers alive."""

from __future__ import annotations

import logging

from fastapi import APIRouter
from redis.exceptions import RedisError

from backend.deps import RedisDep, StoreDep
from backend.store import StoreUnavailable
from workers.queue import keys as protocol

logger = logging.getLogger(__name__)
router = APIRouter(tags=["health"])


@router.get("/api/health")
def health(conn: RedisDep, store: StoreDep) -> dict:
    """``ok`` when Redis and the database answer and a worker is alive, else ``degraded``."""
    try:
        conn.ping()
        workers = protocol.live_workers(conn)
        queued = {name: protocol.queue(conn, name).count for name in protocol.QUEUES}
        losses = protocol.device_losses(conn)
        redis_ok = True
    except RedisError as exc:
        logger.warning("health: Redis unreachable: %s", exc)
        workers, queued, losses, redis_ok = {}, {}, [], False
    try:
        store.ping()
        database_ok = True
    except StoreUnavailable as exc:
        logger.warning("health: %s", exc)
        database_ok = False
    status = "ok" if redis_ok and database_ok and workers else "degraded"
    return {
        "status": status,
        "redis": redis_ok,
        "database": database_ok,
        "workers": len(workers),
        "ready": sum(
            bool(w.get("ready")) for w in workers.values()
        ),  # models preloaded, taking jobs
        "worker_names": sorted(workers),
        # what each worker computes on (its models and the fast t-SNE engine that passed its start's
        # self-check, with what failed and why), from its heartbeat
        "devices": {name: w.get("device") for name, w in sorted(workers.items())},
        "queued": queued,
        # workers that ended themselves after a GPU error left their device unusable, newest first
        "device_lost": losses,
    }
