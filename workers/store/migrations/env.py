"""Alembic environment: runs on the connection ``workers.store.migrate`` hands over."""

from __future__ import annotations

from alembic import context

from workers.store.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - always called through workers.store.migrate
    raise RuntimeError("run migrations with `headscope migrate`")
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
