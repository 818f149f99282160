"""The store of results, share links and checkpoints: ``workers.store`` (SQLAlchemy; SQLite or
PostgreSQL), re-exported here for the API.

It lives under ``workers`` so that the workers, which write results and read checkpoints
through it, import nothing from the backend; it imports no torch.
"""

from __future__ import annotations

from workers.store import SHARE_ID, SchemaOutOfDate, Store, StoreUnavailable, atomic_write

__all__ = ["SHARE_ID", "SchemaOutOfDate", "Store", "StoreUnavailable", "atomic_write"]
