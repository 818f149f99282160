"""Helpers for the service tests: a ``headscope serve`` subprocess, polling, process checks."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
# how long a wait may last before a test calls it a hang: a guard, never a claim about speed (the
# suite must pass on a slow or busy machine; speed is measured by tests/bench/)
HANG_S = 600.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_catalogue(path: Path, model_dirs: dict[str, Path]) -> Path:
    """An operator catalogue file (HEADSCOPE_MODELS) with the tiny models."""
    models = {
        name: {"path": str(d), "description": f"{name} (random, tests)"}
        for name, d in model_dirs.items()
    }
    path.write_text(json.dumps({"models": models}))
    return path


def service_env(data_dir: Path, catalogue: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("REDIS_URL", None)
    env.update(
        {
            "HEADSCOPE_DATA_DIR": str(data_dir),
            "HEADSCOPE_MODELS": str(catalogue),
            "PYTHONPATH": str(ROOT),
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            **extra,
        }
    )
    return env


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc), children started in new sessions included."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                parent[int(entry.name)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
    out: set[int] = set()
    frontier = [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out.update(kids)
        frontier.extend(kids)
    return out


class ServeProcess:
    """``python -m backend.cli serve`` in a subprocess, restartable on the same data dir and port."""

    def __init__(
        self, data_dir: Path, env: dict[str, str], *, workers: int, port: int | None = None
    ):
        self.data_dir = data_dir
        self.env = env
        self.workers = workers
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.log = data_dir / "serve.log"

    @classmethod
    def for_tests(
        cls, base: Path, model_dirs: dict[str, Path], *, workers: int, **env: str
    ) -> ServeProcess:
        data = base / "data"
        data.mkdir(parents=True, exist_ok=True)
        cat = write_catalogue(base / "models.json", model_dirs)
        defaults = {
            "HEADSCOPE_MAX_UPLOAD_BYTES": str(2 * 2**20),
            # the shared e2e service: no short-job worker, no rate limit (tests/test_service_fair.py
            # checks both on their own)
            "HEADSCOPE_SHORT_WORKERS": "0",
            "HEADSCOPE_RATE_LIMIT_WRITES": "0",
        }
        return cls(data, service_env(data, cat, **{**defaults, **env}), workers=workers)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, **kw: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60, **kw)

    def start(self, *, timeout_s: float = HANG_S) -> None:
        cmd = [
            sys.executable,
            "-m",
            "backend.cli",
            "serve",
            "--port",
            str(self.port),
            "--workers",
            str(self.workers),
            "--no-preload",
        ]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                cmd, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"serve exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}"
                )
            try:
                health = httpx.get(f"{self.url}/api/health", timeout=2).json()
                if health["workers"] >= self.workers:
                    return
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(
            f"serve did not become healthy in {timeout_s} s:\n{self.log.read_text()[-3000:]}"
        )

    def store(self):
        """The service's store (the database its environment names), opened from the test."""
        from backend.config import Settings
        from backend.store import Store

        return Store(
            Settings(data_dir=self.data_dir, database_url=self.env.get("HEADSCOPE_DATABASE_URL")),
            migrate=False,
        )

    def leftovers(self) -> list[str]:
        """Every checkpoint row (staged or committed), cached blob and temporary upload file."""
        from sqlalchemy import select

        from workers.store.schema import checkpoints

        store = self.store()
        try:
            with store.engine.connect() as conn:
                rows = [f"row {r}" for r in conn.execute(select(checkpoints.c.id)).scalars()]
        finally:
            store.close()
        files = [
            p.name
            for d in ("tmp", "blob-cache")
            if (self.data_dir / d).is_dir()
            for p in (self.data_dir / d).iterdir()
        ]
        return sorted(rows + files)

    def info(self) -> dict[str, Any]:
        return json.loads((self.data_dir / "serve.json").read_text())

    def stop(self, *, timeout_s: float = 30.0) -> set[int]:
        """SIGTERM serve; return the pids (serve and its descendants) still alive afterwards."""
        if self.proc is None:
            return set()
        pids = {self.proc.pid} | descendants(self.proc.pid)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.1)
        left = {p for p in pids if alive(p)}
        for p in left:  # never leave strays behind, even when the test fails
            os.kill(p, signal.SIGKILL)
        self.proc = None
        return left


def wait_done(client: httpx.Client, path: str, *, timeout_s: float = HANG_S) -> dict[str, Any]:
    """Poll ``GET path`` until the job is finished or failed."""
    deadline = time.monotonic() + timeout_s
    while True:
        resp = client.get(path)
        resp.raise_for_status()
        body = resp.json()
        if body["status"] in ("finished", "failed") or time.monotonic() > deadline:
            return body
        time.sleep(0.1)


def short_text(words: int = 30) -> str:
    """The demo text's first words: short enough for the tiny models' 64 positions."""
    from workers.data import demo_text

    return " ".join(demo_text().split()[:words])


def numbered_texts(n: int) -> list[str]:
    """``n`` distinct texts of different lengths: the shipped English sentences, numbered."""
    from workers.inputs.corpora import shipped_corpus

    base = shipped_corpus("builtin-english").texts
    return [f"{base[i % len(base)]} That was number {i}." for i in range(n)]


def put_numbered_corpus(store: Any, n: int) -> str:
    """Store ``numbered_texts(n)`` as a corpus named "numbered"; its id."""
    from workers.inputs.corpora import corpus_id

    texts = numbered_texts(n)
    cid = corpus_id(texts)
    store.put_corpus(cid, texts, meta={"id": cid, "name": "numbered", "n_texts": len(texts)})
    return cid


def assert_cancelled_and_gone(conn: Any, queue: Any, store: Any, job_id: str) -> None:
    """A cancelled split job: failed as ``cancelled`` (not the user's fault), and none of its parts'
    keys, partials, result or stored result left behind."""
    from workers.queue import keys as protocol

    state = queue.lookup(job_id)
    assert state.status == "failed" and state.error_code == "cancelled" and not state.user_error
    for key in (
        protocol.parts_key(job_id),
        protocol.done_key(job_id),
        protocol.tries_key(job_id),
        protocol.partial_key(job_id),
        protocol.result_key(job_id),
    ):
        assert not conn.exists(key), key
    assert not store.has_result(job_id)


def wait_ready(
    conn: Any, procs: list[subprocess.Popen], n: int, log: Path, *, timeout_s: float = HANG_S
) -> None:
    """Wait until ``n`` workers on ``conn`` are ready (models preloaded, taking jobs)."""
    from workers.queue import keys as protocol

    deadline = time.monotonic() + timeout_s
    while sum(w["ready"] for w in protocol.live_workers(conn).values()) < n:
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        assert all(p.poll() is None for p in procs), log.read_text()[-3000:]
        time.sleep(0.2)


def stop_all(procs: list[subprocess.Popen], *, grace_s: float = 15) -> None:
    """SIGTERM every process still running, wait ``grace_s`` each, then SIGKILL."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(grace_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
