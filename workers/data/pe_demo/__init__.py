"""Demo PE checkpoints shipped with headscope: learned PEs of small LST models (a few KB each).

``index.json`` lists them; each ``<id>.safetensors`` holds ``pe`` [16, 160] (and ``pe_init`` for
learned PEs). They were written by ``workers.lst.demo.export_demo`` from ``headscope lst-train``
runs; docs/positional.md gives the commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DEMO_DIR = Path(__file__).resolve().parent


def demo_index() -> list[dict[str, Any]]:
    """Every entry of index.json, with training configuration and final metrics."""
    index = DEMO_DIR / "index.json"
    if not index.exists():
        return []
    return json.loads(index.read_text())["demos"]


def demo_checkpoints() -> list[dict[str, Any]]:
    """``[{"id": "demo-...", "name", "description", "path"}]`` for the dashboard's picker."""
    return [
        {
            "id": d["id"],
            "name": d["name"],
            "description": d["description"],
            "path": str(DEMO_DIR / d["file"]),
        }
        for d in demo_index()
    ]
