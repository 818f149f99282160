"""Database URLs and engines: SQLite (WAL, one file under the data dir) or PostgreSQL (psycopg 3).

``database_url(settings)`` resolves ``HEADSCOPE_DATABASE_URL`` (default
``sqlite:///<data dir>/headscope.db``); ``make_engine`` opens PostgreSQL with pool pre-ping, so a
database that went away and came back is used again without a restart.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.engine.url import URL

logger = logging.getLogger(__name__)

SQLITE_BUSY_MS = 30_000  # a writer waits this long for another writer's lock
CONNECT_TIMEOUT_S = 5


class StoreUnavailable(RuntimeError):
    """The database cannot be reached (or refused the work); the message says which and why."""


class SchemaOutOfDate(StoreUnavailable):
    """The database's schema is older (or newer) than this version's migrations."""


def database_url(settings: Any) -> str:
    """``settings.database_url`` or the SQLite file under ``settings.data_dir``."""
    url = getattr(settings, "database_url", None)
    if url:
        return str(url)
    path = (Path(settings.data_dir) / "headscope.db").resolve()
    return f"sqlite:///{path}"


def normalise(url: str) -> URL:
    """``postgresql://`` and ``postgres://`` mean psycopg 3 (not SQLAlchemy's default psycopg2)."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise ValueError(
            f"HEADSCOPE_DATABASE_URL: unsupported database {parsed.get_backend_name()!r}; "
            "use sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DB"
        )
    return parsed


def describe(url: str | URL) -> str:
    """The URL without its password, for messages and logs."""
    return normalise(
        str(url) if isinstance(url, str) else url.render_as_string(False)
    ).render_as_string(hide_password=True)


def make_engine(url: str, **kw: Any) -> Engine:
    """An engine for ``url``; SQLite in WAL mode with real (immediate) write transactions."""
    parsed = normalise(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        # a file: no server to go away, so no pre-ping round trip on every checkout
        engine = create_engine(
            parsed,
            connect_args={"timeout": SQLITE_BUSY_MS / 1000, "check_same_thread": False},
            **kw,
        )
        _sqlite_pragmas(engine)
        return engine
    return create_engine(
        parsed,
        pool_pre_ping=True,
        pool_size=10,
        max_overflow=20,
        pool_timeout=10,
        connect_args={"connect_timeout": CONNECT_TIMEOUT_S},
        **kw,
    )


def _sqlite_pragmas(engine: Engine) -> None:
    """WAL (readers never block the writer), a busy timeout, and transactions SQLAlchemy controls.

    pysqlite's own transaction handling begins late (and never for DDL); the recipe from
    SQLAlchemy's documentation turns it off and emits BEGIN itself — ``BEGIN IMMEDIATE`` for a
    connection with the ``sqlite_immediate`` option, so two writers queue instead of failing.
    """

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        immediate = conn.get_execution_options().get("sqlite_immediate", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")
