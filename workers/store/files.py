"""Small file helpers the store and ``headscope serve`` share."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and a rename (never half a file)."""
    tmp = temp_beside(path)
    with open(tmp, "wb") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def temp_beside(path: Path) -> Path:
    """A fresh temporary name in ``path``'s directory (same file system: rename is atomic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
