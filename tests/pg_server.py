"""A real PostgreSQL server for tests and benchmarks (Debian's ``postgresql`` package).

``initdb`` refuses to run as root, so as root the server runs as ``nobody`` (``runuser``) on a data
directory that user owns; it listens on a free loopback port and a private socket directory and
is stopped with ``pg_ctl stop`` (by its data directory, never by name).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path


def pg_bin() -> Path | None:
    """The newest ``/usr/lib/postgresql/<ver>/bin`` with ``initdb`` and ``pg_ctl``, or None."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3])
    )
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """initdb + pg_ctl start in a fresh temporary directory; ``url()`` gives a new database."""

    def __init__(self, *, fsync: bool = False):
        binaries = pg_bin()
        if binaries is None:
            raise RuntimeError(
                "PostgreSQL is not installed (Debian: apt-get install postgresql; "
                "scripts/system-deps.sh does it)"
            )
        self.bin = binaries
        self.fsync = fsync
        self.base = Path(tempfile.mkdtemp(prefix="headscope-pg-"))
        self.base.chmod(0o755)  # nobody must reach its data dir below
        self.data = self.base / "data"
        self.sock = self.base / "sock"
        self.log = self.base / "server.log"
        self.port = _free_port()
        self.as_user = ["runuser", "-u", "nobody", "--"] if os.geteuid() == 0 else []

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*self.as_user, *args], capture_output=True, text=True, timeout=120)

    def init(self) -> PostgresServer:
        for d in (self.data, self.sock):
            d.mkdir(mode=0o700)
        self.log.touch()
        if self.as_user:
            for p in (self.data, self.sock, self.log):
                shutil.chown(p, "nobody")
        out = self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "headscope",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        if out.returncode != 0:
            raise RuntimeError(f"initdb failed: {out.stderr[-2000:]}")
        return self

    def start(self) -> PostgresServer:
        opts = f"-p {self.port} -k {self.sock} -c listen_addresses=127.0.0.1 -c max_connections=200"
        if not self.fsync:
            opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        out = self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-o",
            opts,
            "-w",
            "-t",
            "60",
            "start",
        )
        if out.returncode != 0:
            raise RuntimeError(
                f"pg_ctl start failed: {out.stderr[-1000:]}\n{self.log.read_text()[-2000:]}"
            )
        return self

    def stop(self) -> None:
        """Stop the server (fast shutdown: open connections are cut)."""
        if (self.data / "postmaster.pid").exists():
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://headscope@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh empty database; its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=headscope dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)
