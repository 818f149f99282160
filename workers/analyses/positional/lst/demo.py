"""Copy the PE of finished LST runs into the shipped demo set (``workers/data/pe_demo``).

Only the PE (and a learned PE's initial value) travels: a few KB per model instead of the 5 MB
checkpoint. numpy and safetensors only.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from workers.models.checkpoints import read_tensor

logger = logging.getLogger(__name__)


def export_demo(
    runs: list[dict[str, str]], *, dest: str | Path | None = None
) -> list[dict[str, Any]]:
    """Write ``<id>.safetensors`` and ``index.json`` for ``runs`` (``{"id", "name", "description", "dir"}``)."""
    from safetensors.numpy import save_file

    from workers.data.pe_demo import DEMO_DIR

    out = Path(dest) if dest is not None else DEMO_DIR
    entries = []
    for run in runs:
        src = Path(run["dir"])
        config = json.loads((src / "config.json").read_text())
        metrics = json.loads((src / "metrics.json").read_text())
        tensors = {
            "pe": read_tensor(src / "model.safetensors", config["pe_tensor"]).astype(np.float32)
        }
        if config.get("pe_init_tensor"):
            tensors["pe_init"] = read_tensor(
                src / "model.safetensors", config["pe_init_tensor"]
            ).astype(np.float32)
        file = f"{run['id']}.safetensors"
        save_file(tensors, str(out / file), metadata={"pe_tensor": "pe"})
        entries.append({
            "id": run["id"], "name": run["name"], "description": run["description"], "file": file,
            "config": config,
            "final": {k: metrics[k][-1] for k in ("train_accuracy", "val_accuracy", "train_loss", "val_loss")},
            "val_accuracy": metrics["val_accuracy"], "train_accuracy": metrics["train_accuracy"],
            "seconds": metrics["seconds"][-1],
        })  # fmt: skip
        logger.info("demo %s <- %s", run["id"], src)
    (out / "index.json").write_text(json.dumps({"demos": entries}, indent=1) + "\n")
    return entries
