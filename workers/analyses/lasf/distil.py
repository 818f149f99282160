"""``headscope lasf-train``: build the corpus, extract MiniLM's features, train, evaluate, save.

``distil(TrainConfig(), out_dir)`` returns the config it wrote (metrics included). Features can be
cached (``cache_dir``) so a second run on the same corpus skips MiniLM's forward passes.
"""

from __future__ import annotations

import json
import logging
import resource
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from workers.analyses.lasf.checkpoint import FORMAT, save_checkpoint
from workers.analyses.lasf.corpus import build_corpus
from workers.analyses.lasf.module import n_parameters
from workers.analyses.lasf.train import (
    EVAL_BATCH,
    Batch,
    TrainConfig,
    baselines,
    build_lasf,
    evaluate,
    extract_batches,
    init_output_norms,
    set_threads,
    train_models,
)
from workers.core.progress import Progress, no_progress, scaled

logger = logging.getLogger(__name__)

TEST_SENTENCES_FILE = "test_sentences.json"
CORPUS_FRACTIONS = (0.05, 0.07)  # validation, test
SUBSET_BATCHES = 5  # the first 160 test sentences: metrics a quick test can reproduce


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _features(
    loaded: Any, corpus: Any, config: TrainConfig, cache_dir: Path | None, progress: Progress
) -> dict[str, list[Batch]]:
    key = f"lasf-features-{corpus.fingerprint}-{config.max_tokens}-{config.batch_size}.pt"
    if cache_dir is not None and (cache_dir / key).exists():
        raw = torch.load(cache_dir / key, weights_only=True)  # our own file: tensors only
        return {split: [Batch(*b) for b in batches] for split, batches in raw.items()}
    out = {}
    splits = [
        ("train", corpus.train, True, config.batch_size),
        ("val", corpus.val, False, EVAL_BATCH),
        ("test", corpus.test, False, EVAL_BATCH),
    ]
    for i, (name, sentences, sort, bs) in enumerate(splits):
        out[name] = extract_batches(
            loaded, sentences, layer=config.replaced_layer, batch_size=bs, max_tokens=config.max_tokens,
            sort=sort, progress=scaled(progress, i / 3, (i + 1) / 3),
        )  # fmt: skip
    if cache_dir is not None:
        cache_dir.mkdir(parents=True, exist_ok=True)
        torch.save({s: [(b.x, b.y, b.mask) for b in bs] for s, bs in out.items()}, cache_dir / key)
    return out


def distil(
    config: TrainConfig, out_dir: str | Path, *, cache_dir: str | Path | None = None,
    progress: Progress = no_progress, threads: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Train LasF and both baselines; write the checkpoint (config with metrics) to ``out_dir``."""
    from workers.models import load_model

    config.check()
    set_threads(threads)
    wall0, cpu0 = time.perf_counter(), cpu_seconds()
    progress(0.0, "building the corpus")
    corpus = build_corpus(
        seed=config.corpus_seed, max_sentences=config.max_sentences, fractions=CORPUS_FRACTIONS
    )
    loaded = load_model(config.base_model, device="cpu")
    feats = _features(
        loaded, corpus, config, Path(cache_dir) if cache_dir else None, scaled(progress, 0.0, 0.15)
    )
    features_s = time.perf_counter() - wall0
    d = loaded.config["hidden_size"]
    lasf = build_lasf(config, d)
    models = {"lasf": lasf, **baselines(d, config.seed)}
    init_output_norms(models, feats["train"])
    history = train_models(
        models, config, feats["train"], feats["val"], progress=scaled(progress, 0.15, 0.97)
    )
    progress(0.97, "held-out metrics")
    test = {k: evaluate(m, feats["test"]) for k, m in models.items()}
    subset = {k: evaluate(m, feats["test"][:SUBSET_BATCHES]) for k, m in models.items()}
    wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0
    ck_config = {
        "format": FORMAT,
        "base_model": config.base_model,
        "replaced_layer": config.replaced_layer,
        "replaced_layer_name": f"encoder.layer.{config.replaced_layer}",
        "sizes": {"n_fields": config.n_fields, "d_in": d, "d_q": config.d_q, "d_s": config.d_s, "d_out": d},
        "mode": config.mode,
        "kernel": config.kernel,
        "residual": config.residual,
        "causal": False,
        "seed": config.seed,
        "parameters": n_parameters(lasf),
        "replaced_layer_parameters": sum(p.numel() for p in loaded.model.encoder.layer[config.replaced_layer].parameters()),
        "train": asdict(config),
        "corpus": {
            "fingerprint": corpus.fingerprint, "train": len(corpus.train), "val": len(corpus.val),
            "test": len(corpus.test), "train_tokens": int(sum(int(b.mask.sum()) for b in feats["train"])),
            "sources": ["pydoc_data.topics", "standard-library docstrings"],
        },
        "metrics": {
            "test": test, "test_subset": subset, "test_subset_sentences": SUBSET_BATCHES * EVAL_BATCH,
            "eval_batch_sentences": EVAL_BATCH, "history": history,
        },
        "timing": {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "features_wall_s": round(features_s, 1)},
    }  # fmt: skip
    out = Path(out_dir)
    save_checkpoint(lasf, ck_config, out)
    (out / TEST_SENTENCES_FILE).write_text(json.dumps(corpus.test, indent=0) + "\n")
    progress(1.0, "done")
    return ck_config
