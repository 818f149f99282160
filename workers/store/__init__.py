"""The store every API replica and worker shares: SQLAlchemy 2 over SQLite or PostgreSQL.

Not part of the analysis core (no torch): the backend and the queue service
(``workers.queue.reporter``) both import it, so neither depends on the other. ``Store(settings)`` is the one interface; see ``core``.
"""

from workers.store.core import SHARE_ID, Store
from workers.store.engine import SchemaOutOfDate, StoreUnavailable, database_url, describe
from workers.store.files import atomic_write

__all__ = [
    "SHARE_ID",
    "SchemaOutOfDate",
    "Store",
    "StoreUnavailable",
    "atomic_write",
    "database_url",
    "describe",
]
