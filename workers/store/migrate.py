"""Alembic, driven from code: apply the migrations, or check that a database is up to date.

No ``alembic.ini``: the scripts live in ``migrations/`` beside this module. Concurrent upgrades
(two replicas starting at once) queue on a lock — SQLite's write lock (``BEGIN IMMEDIATE``) or a
PostgreSQL advisory lock — and the second finds the schema already at head.
"""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy import Engine, inspect, text

from workers.store.engine import SchemaOutOfDate, describe

logger = logging.getLogger(__name__)

HEAD = "0005"  # the newest migration (tests/test_store.py checks it matches the scripts)
SCRIPTS = Path(__file__).resolve().parent / "migrations"
PG_LOCK = 0x68656164  # advisory lock id ("head")


def _config(connection=None):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(SCRIPTS))
    cfg.attributes["connection"] = connection
    return cfg


def script_head() -> str | None:
    """The head revision according to the migration scripts."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    """The database's revision; None for an empty database."""
    with engine.connect() as conn:
        return _revision_in(conn)


def upgrade(engine: Engine) -> tuple[str | None, str]:
    """Apply every pending migration; return (revision before, revision after)."""
    from alembic import command

    with engine.execution_options(sqlite_immediate=True).begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": PG_LOCK})
        before = _revision_in(conn)
        if before != HEAD:
            command.upgrade(_config(conn), "head")
            logger.info("database %s migrated from %s to %s", describe(engine.url), before, HEAD)
    return before, HEAD


def _revision_in(conn) -> str | None:
    if not inspect(conn).has_table("alembic_version"):
        return None
    return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def check(engine: Engine) -> None:
    """Raise ``SchemaOutOfDate`` (naming ``headscope migrate``) unless the schema is at head."""
    rev = current_revision(engine)
    if rev == HEAD:
        return
    where = describe(engine.url)
    if rev is None:
        raise SchemaOutOfDate(
            f"the database {where} has no headscope schema yet; run `headscope migrate` "
            "(with the same HEADSCOPE_DATABASE_URL) first"
        )
    raise SchemaOutOfDate(
        f"the database {where} is at schema revision {rev}, this version needs {HEAD}; "
        "run `headscope migrate` (with the same HEADSCOPE_DATABASE_URL) first"
    )
