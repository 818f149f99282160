"""Compare finished LST runs the way the paper does (section 3.3, Fig. 3): how close each PE is to
the 2d-fixed ground truth, before and after training, and how close each model's attention maps
are to a reference model's on the same validation puzzles.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from workers.analyses.positional.encodings import (
    affinity,
    attention_agreement,
    clustering,
    distance_matrix,
    grid_partition,
    make_reference,
    modularity,
    pe_report,
)
from workers.analyses.positional.lst.puzzles import SIZE, Puzzles, make_dataset
from workers.analyses.positional.lst.train import PE_INIT_TENSOR, attention_maps, load_run
from workers.models.checkpoints import read_tensor

logger = logging.getLogger(__name__)


def pe_summary(E: np.ndarray) -> dict[str, Any]:
    """Distances of one PE to 2d-fixed, and its modularity / clustering by grid rows and columns."""
    n, d = E.shape
    R = make_reference("2d-fixed", n=n, d=d, grid=(SIZE, SIZE))
    rep = pe_report(E, reference=R, partition=None)
    W = affinity(distance_matrix(E))
    out = {
        k: rep[k]
        for k in ("procrustes_distance", "procrustes_distance_normalised", "distance_correlation")
    }
    out["norm"] = float(np.linalg.norm(E))
    for kind in ("rows", "columns"):
        part = grid_partition(kind, (SIZE, SIZE))
        out[f"modularity_{kind}"] = modularity(W, part)
        out[f"clustering_{kind}"] = clustering(W, part)[0]
    return out


def compare_runs(
    runs: list[str | Path], *, reference_run: str | Path | None = None, n_puzzles: int = 500
) -> dict[str, Any]:
    """One row per run: its accuracies, its PE against 2d-fixed (after and, for a learned PE,
    before training), and its attention agreement with ``reference_run`` on validation puzzles."""
    datasets: dict[tuple[int, int, int], Puzzles] = {}

    def validation(cfg: Any) -> Puzzles:
        key = (cfg.n_train, cfg.n_val, cfg.data_seed)
        if key not in datasets:
            datasets[key] = make_dataset(n_train=cfg.n_train, n_val=cfg.n_val, seed=cfg.data_seed)[
                1
            ]
        return datasets[key].subset(np.arange(min(n_puzzles, len(datasets[key]))))

    ref_maps = None
    if reference_run is not None:
        ref_model, ref_cfg = load_run(reference_run)
        ref_val = validation(ref_cfg)
        ref_maps = attention_maps(ref_model, ref_val)  # [layer, puzzle, head, query, key]
    rows = []
    for run in runs:
        run = Path(run)
        model, cfg = load_run(run)
        metrics = json.loads((run / "metrics.json").read_text())
        row: dict[str, Any] = {
            "run": str(run),
            "pe": cfg.pe,
            "sigma": cfg.sigma if cfg.pe == "learned" else None,
            "epochs": len(metrics["epoch"]),
            "seconds": metrics["seconds"][-1],
            "train_accuracy": metrics["train_accuracy"][-1],
            "val_accuracy": metrics["val_accuracy"][-1],
            "val_accuracy_by_vectors": {
                k: v[-1] for k, v in metrics["val_accuracy_by_vectors"].items()
            },
            "pe_final": pe_summary(model.pe.detach().numpy().astype(np.float64)),
            "pe_init": None,
            "attention": None,
        }
        if cfg.pe == "learned":
            row["pe_init"] = pe_summary(
                read_tensor(run / "model.safetensors", PE_INIT_TENSOR).astype(np.float64)
            )
        if ref_maps is not None:
            val = validation(cfg)
            if len(val) == ref_maps.shape[1] and np.array_equal(val.tokens, ref_val.tokens):
                maps = attention_maps(model, val)
                agree = attention_agreement(maps, ref_maps)
                per_layer = [
                    attention_agreement(maps[layer], ref_maps[layer]) for layer in range(len(maps))
                ]
                row["attention"] = {
                    "cosine": agree["cosine"],
                    "jsd": agree["jsd"],
                    "cosine_per_layer": [a["cosine"] for a in per_layer],
                    "jsd_per_layer": [a["jsd"] for a in per_layer],
                    "n_puzzles": len(val),
                }
            else:
                logger.warning(
                    "%s was trained on other puzzles than the reference run; no attention comparison",
                    run,
                )
        rows.append(row)
    return {"reference_run": str(reference_run) if reference_run else None, "runs": rows}
