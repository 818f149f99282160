"""Service settings: ``workers.core.settings``, which the workers share, re-exported for the backend."""

from __future__ import annotations

from workers.core.settings import Settings, get_settings

__all__ = ["Settings", "get_settings"]
