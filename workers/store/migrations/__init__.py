"""Alembic migration scripts of the store (run through ``workers.store.migrate``)."""
