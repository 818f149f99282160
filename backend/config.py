"""Service settings: ``workers.settings``, which the workers share, re-exported for the backend."""

from __future__ import annotations

from workers.settings import Settings, get_settings

__all__ = ["Settings", "get_settings"]
