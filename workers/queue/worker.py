"""The worker process: an RQ ``SimpleWorker`` (no fork), so loaded models stay in memory across jobs.

Run it as ``headscope worker`` (or ``python -m workers.queue.worker``) with ``REDIS_URL`` set. Besides the
jobs it keeps a heartbeat key alive (``hs:worker:{name}``; the API's health and reaper read it),
reaps jobs whose worker died, and publishes the demo checkpoints for ``GET /api/checkpoints``.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any

from redis import Redis

from workers.core.jsonable import dumps
from workers.core.settings import WORKER_OPENMP_ENV
from workers.queue import keys as protocol
from workers.queue.recycle import RecyclingWorker

logger = logging.getLogger(__name__)
DEVICE_LOST_EXIT = 3  # a job left the GPU unusable: the supervisor starts a fresh worker


def publish_demos(conn: Redis) -> int:
    """Store the shipped demo checkpoints with their candidate tensors in Redis; return the count."""
    try:
        from workers.data.pe_demo import demo_checkpoints
        from workers.models.checkpoints import list_candidates
    except ModuleNotFoundError as exc:
        logger.info("no demo checkpoints in this build (%s)", exc.name)
        return 0
    from workers.core.jsonable import jsonable

    demos: list[dict[str, Any]] = []
    for demo in demo_checkpoints():
        try:
            cands = sorted(
                jsonable(list_candidates(demo["path"])), key=lambda c: -float(c.get("score") or 0)
            )
        except Exception:
            logger.warning("demo checkpoint %s is unreadable", demo.get("id"), exc_info=True)
            continue
        entry = {k: v for k, v in demo.items() if k != "path"}
        demos.append({**entry, "candidates": cands, "default": cands[0]["name"] if cands else None})
    conn.set(protocol.DEMOS_KEY, dumps(demos))
    return len(demos)


def quiet_openmp_waits() -> bool:
    """OpenMP threads that sleep while they wait (``workers.core.settings.WORKER_OPENMP_ENV``, unless the
    environment says otherwise): set before torch and numba load their OpenMP runtime, which reads it
    once. False (and a warning) when one was already loaded, so the setting came too late."""
    for var, value in WORKER_OPENMP_ENV.items():
        os.environ.setdefault(var, value)
    late = [m for m in ("torch", "numba") if m in sys.modules]
    if late:
        logger.warning(
            "%s loaded before the worker set %s: its OpenMP threads keep the default wait policy",
            " and ".join(late),
            ", ".join(WORKER_OPENMP_ENV),
        )
    return not late


def run_worker(
    *,
    redis_url: str,
    name: str | None = None,
    queues: tuple[str, ...] = protocol.QUEUES,
    preload: tuple[str, ...] = (),
    burst: bool = False,
    verbose: bool = False,
) -> int:
    """Serve jobs until SIGTERM/SIGINT (warm shutdown: the current job finishes first); exit status
    ``DEVICE_LOST_EXIT`` when a job left the device unusable."""
    from workers.core.settings import get_settings
    from workers.models.allocator import keep_freed_memory

    quiet_openmp_waits()
    logging.getLogger("headscope.progress").setLevel(logging.INFO)  # a line per step of each job
    keep_freed_memory()  # freed tensors' blocks are reused within a job; give_back() returns them after it

    settings = get_settings()
    conn = Redis.from_url(redis_url)
    name = name or protocol.new_worker_name()
    info: dict[str, Any] = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "queues": list(queues),
        "started": time.time(),
        "ready": False,  # True once models are preloaded and jobs are taken
    }
    beats = 0

    def tick() -> None:
        nonlocal beats
        protocol.beat(conn, name, ttl_s=settings.worker_ttl_s, info=info)
        beats += 1
        if beats % max(1, round(settings.reaper_interval_s / settings.worker_heartbeat_s)) == 0:
            protocol.reap_abandoned(conn)

    protocol.beat(conn, name, ttl_s=settings.worker_ttl_s, info=info)
    ticker = protocol.Ticker(tick, interval_s=settings.worker_heartbeat_s, name="heartbeat").start()
    try:
        import workers.engine.pipeline  # noqa: F401 (torch and the core imported before the first job)
        from workers.analyses.tsne import chain, engines
        from workers.analyses.tsne.engines import device_report
        from workers.models.loader import default_device

        # check before serving: each t-SNE engine this device may use runs a small problem against
        # the CPU engine (in a child process); what fails is not used, and health says why
        engines.start_worker_engines(
            default_device(), engines=settings.tsne_engines, fault=settings.tsne_fault
        )
        info["device"] = device_report()

        if preload:
            from workers.analyses.tsne.engines import warm_up
            from workers.engine.pipeline import warm_up as warm_up_model
            from workers.models import load_model

            logger.info("fast t-SNE kernels ready in %.1f s", warm_up())
            for model in preload:
                loaded = load_model(model)
                logger.info("preloaded %s on %s", model, loaded.device)
                try:  # the first request then runs as fast as later ones
                    logger.info("%s warmed up in %.1f s", model, warm_up_model(loaded))
                except Exception:
                    logger.warning(
                        "warm-up of %s failed; its first request will be slower",
                        model,
                        exc_info=True,
                    )
        try:
            publish_demos(conn)
        except Exception:
            logger.warning("could not publish the demo checkpoints", exc_info=True)
        info["ready"] = True
        protocol.beat(conn, name, ttl_s=settings.worker_ttl_s, info=info)
        worker = rq_worker(redis_url, queues, name)
        worker.max_rss_mb = float(settings.worker_max_rss_mb)

        def device_lost(why: str) -> None:
            info["ready"] = False
            info["device"] = device_report()
            protocol.beat(conn, name, ttl_s=settings.worker_ttl_s, info=info)
            protocol.note_device_lost(conn, name, why)

        worker.on_device_lost = device_lost
        worker.settle()  # what it holds from now on (modules, preloaded models): out of every job's collection
        logger.info("worker %s (pid %d) listening on %s", name, os.getpid(), ", ".join(queues))
        worker.work(
            burst=burst,
            logging_level="INFO" if verbose else "WARNING",
            with_scheduler=False,
            max_jobs=settings.worker_max_jobs or None,
        )
        if chain.lost():
            return DEVICE_LOST_EXIT
    finally:
        gc.unfreeze()  # the interpreter's exit then frees the frozen objects as usual
        ticker.stop()
        try:
            conn.delete(protocol.worker_key(name))
        except Exception:
            logger.debug("could not remove the heartbeat of %s", name, exc_info=True)
    return 0


def rq_worker(redis_url: str, queues: Sequence[str], name: str) -> RecyclingWorker:
    """The RQ worker, on a Redis client of its own that no other code has used.

    RQ waits for a job in a blocking pop of up to ``dequeue_timeout`` (405 s) and lengthens the
    client's socket timeout for it (``connection_timeout``), but by editing the connection pool's
    settings: only connections made afterwards get it. redis-py 8 gives every connection a 5 s
    timeout by default, so on the heartbeat's client (connections made while the worker loaded its
    models) a pop found no job within 5 s, raised ``TimeoutError``, and RQ quit ("Redis connection
    timeout, quitting..."): a worker left idle for 5 s, as after a killed worker's part, was gone.
    """
    conn = Redis.from_url(redis_url)
    return RecyclingWorker(
        [protocol.queue(conn, q) for q in queues],
        connection=conn,
        name=name,
        serializer=protocol.SERIALIZER,
    )


def healthy_here(conn: Redis) -> bool:
    """A live, ready worker with this host name (a container's healthcheck)."""
    host = socket.gethostname()
    return any(
        w.get("host") == host and w.get("ready") for w in protocol.live_workers(conn).values()
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--redis-url", default=None, help="default: $REDIS_URL")
    parser.add_argument("--name", default=None, help="worker name (default host.pid.random)")
    parser.add_argument(
        "--queues",
        default=",".join(protocol.QUEUES),
        help=f"comma-separated, in priority order; short-job workers: {protocol.SHORT_QUEUE}",
    )
    parser.add_argument(
        "--preload", action="append", default=[], help="load this catalogue model at start"
    )
    parser.add_argument("--burst", action="store_true", help="exit when the queues are empty")
    parser.add_argument(
        "--check",
        action="store_true",
        help="healthcheck: exit 0 if a worker on this host is alive and ready, else 1",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="headscope worker", description="Run a headscope worker.")
    add_arguments(parser)
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    return run_from_args(args)


def run_from_args(args: argparse.Namespace) -> int:
    from workers.core.settings import get_settings

    redis_url = args.redis_url or get_settings().redis_url
    if not redis_url:
        print("headscope worker: error: set REDIS_URL or pass --redis-url", file=sys.stderr)
        return 2
    if args.check:
        return 0 if healthy_here(Redis.from_url(redis_url, socket_timeout=5)) else 1
    return run_worker(
        redis_url=redis_url,
        name=args.name,
        queues=tuple(q for q in args.queues.split(",") if q),
        preload=tuple(args.preload),
        burst=args.burst,
        verbose=getattr(args, "verbose", False),
    )


if __name__ == "__main__":
    sys.exit(main())
