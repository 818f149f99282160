"""The ``lasf`` analysis: what each semantic field of a LasF layer relates in one text (docs/lasf.md).

``lasf_section(base, lasf, text, options)`` runs the base model (MiniLM) up to the replaced layer,
the LasF layer on its output, and returns per field: Psi and the weights applied to S, Phi, the
max-relation row (thesis Def. 4.2 applied to fields), a t-SNE map, each field's share of the output,
the R^2 lost when it is ablated, its Spearman correlation with each head of the replaced layer,
and the specialisation table of ``workers.analyses.lasf.specialisation`` (computed once per model).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from workers.analyses.tsne import TSNEOptions, embed_affinities
from workers.analyses.tsne.affinities import conditional_from_distances, head_affinities
from workers.core.errors import HeadscopeError
from workers.core.progress import Progress, no_progress

logger = logging.getLogger(__name__)


@dataclass
class LasFModel:
    """A loaded LasF layer and its checkpoint config."""

    name: str
    module: Any  # workers.analyses.lasf.module.LasF, eval mode
    config: dict[str, Any]


_cache: dict[tuple[str, float], LasFModel] = {}
_spec_cache: dict[str, dict[str, Any]] = {}
_lock = threading.Lock()


def load_lasf(path: str | Path, *, name: str) -> LasFModel:
    """Read, validate and build a LasF checkpoint (cached per file and modification time)."""
    from workers.analyses.lasf.checkpoint import build_module, read_checkpoint

    p = Path(path)
    key = (str(p.resolve()), p.stat().st_mtime if p.exists() else 0.0)
    with _lock:
        if key not in _cache:
            ck = read_checkpoint(p)
            _cache[key] = LasFModel(name, build_module(ck), ck.config)
        return _cache[key]


def _r2(pred: np.ndarray, true: np.ndarray) -> float:
    sst = float(((true - true.mean(0)) ** 2).sum())
    return 1.0 - float(((pred - true) ** 2).sum()) / sst if sst > 0 else float("nan")


def _ranks_offdiag(mats: np.ndarray) -> np.ndarray:
    """Per matrix [k, m, m]: the ranks of its off-diagonal entries, centred and unit-norm."""
    from scipy.stats import rankdata

    m = mats.shape[-1]
    off = ~np.eye(m, dtype=bool)
    r = rankdata(mats[:, off], axis=1)
    r = r - r.mean(1, keepdims=True)
    norm = np.linalg.norm(r, axis=1, keepdims=True)
    return np.divide(r, norm, out=np.zeros_like(r), where=norm > 0)


def field_affinities(
    weights: np.ndarray, psi: np.ndarray, *, mode: str, perplexity: float
) -> np.ndarray:
    """t-SNE P per field [N_s, m, m]: stable mode from the weights exactly as docs/analyses.md#attention-head-t-sne does for a
    head; paper mode from the distances Psi by perplexity calibration (the Gaussian rule of docs/analyses.md#t-sne-of-hidden-states with
    Psi as the distance)."""
    if mode == "stable":
        return head_affinities(weights)
    out = []
    for d in psi:
        pc = conditional_from_distances(d.astype(np.float64) ** 2, perplexity=perplexity)
        p = (pc + pc.T) / (2.0 * len(d))
        np.fill_diagonal(p, 0.0)
        out.append(p / p.sum())
    return np.stack(out)


def lasf_section(
    run: Any, lasf: LasFModel, *, keep: np.ndarray | None, tsne: TSNEOptions, perplexity: float = 20.0,
    progress: Progress = no_progress, attention: np.ndarray | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The ``lasf`` result section for one base-model run (``workers.models.ModelRun``).

    ``attention``: the replaced layer's maps [head, n, n] when the run was streamed (it then holds no
    attentions); by default ``run.attentions[replaced_layer]``.
    """
    cfg = lasf.config
    layer = int(cfg["replaced_layer"])
    x = torch.from_numpy(np.asarray(run.hidden_states[layer], dtype=np.float32))  # [n, D]
    y_true = np.asarray(run.hidden_states[layer + 1], dtype=np.float64)  # MiniLM's own last layer
    n = x.shape[0]
    kept = np.arange(n) if keep is None else np.flatnonzero(keep)
    if len(kept) < 4:
        raise HeadscopeError(f"the lasf analysis needs at least 4 tokens, got {len(kept)}")
    ix = np.ix_(kept, kept)
    with torch.no_grad():
        it = lasf.module.internals(x)
        y = it["y"][0].double().numpy()
        n_fields = lasf.module.n_fields
        ablated = []
        for f in range(n_fields):
            scale = torch.ones(n_fields)
            scale[f] = 0.0
            ya = lasf.module.internals(x, field_scale=scale)["y"][0].double().numpy()
            ablated.append(_r2(ya[kept], y_true[kept]))
        per_field = (
            (it["O"][0].double() @ lasf.module.L_Y.detach().double()).norm(dim=-1).numpy()
        )  # [N_s, n]
    progress(0.2, "fields computed")
    psi = it["psi"][0].double().numpy()[(slice(None), *ix)]  # [N_s, m, m]
    weights = it["weights"][0].double().numpy()[(slice(None), *ix)]
    phi = it["phi"][0].double().numpy()
    phi_norm = phi / np.maximum(phi.sum(1, keepdims=True), 1e-12)
    m = len(kept)
    off = ~np.eye(m, dtype=bool)
    max_rel = np.where(off[None], weights, -np.inf).max(axis=1)  # [N_s, m]: max over queries i != j
    share = per_field[:, kept] / np.maximum(per_field[:, kept].sum(0, keepdims=True), 1e-12)
    r2_full = _r2(y[kept], y_true[kept])
    att_all = run.attentions[layer] if attention is None else attention
    att = np.asarray(att_all, dtype=np.float64)[(slice(None), *ix)]  # [head, m, m]
    fvh = _ranks_offdiag(weights) @ _ranks_offdiag(att).T  # Spearman's rho [field, head]
    start = time.perf_counter()
    P = field_affinities(weights, psi, mode=cfg["mode"], perplexity=perplexity)
    res = embed_affinities(
        P, options=tsne, progress=lambda f, msg: progress(0.2 + 0.6 * f, f"field t-SNE: {msg}")
    )
    tsne_s = time.perf_counter() - start
    r = lambda a: np.round(a, 6).tolist()  # noqa: E731
    return {
        "mode": cfg["mode"],
        "kernel": cfg["kernel"],
        "residual": cfg.get("residual", "none"),
        "n_fields": n_fields,
        "sizes": cfg["sizes"],
        "replaced_layer": layer,
        "kept": kept.tolist(),
        "psi": r(psi),  # [field][query][key]
        "weights": r(weights),  # [field][query][key], what O multiplies S by
        "phi": r(phi),  # [field][field], Eq. 6
        "phi_norm": r(phi_norm),  # rows summing to 1 (what stable mode mixes with)
        "max_relation": r(max_rel),  # [field][token]
        "field_tsne": {
            "embedding": r(res.embedding),  # [field][token][2]
            "kl": r(res.kl),
            "engine": res.engine,
            "p_rule": "weights, as head t-SNE (docs/analyses.md#attention-head-t-sne)"
            if cfg["mode"] == "stable"
            else f"Psi as distances, perplexity {perplexity:g}",
        },
        "contribution": r(share),  # [field][token], each field's share of the output norm
        "ablation": r(r2_full - np.asarray(ablated)),  # [field]: R^2 lost when the field is zeroed
        "r2": r2_full,
        "r2_ablated": r(np.asarray(ablated)),
        "field_vs_head": r(fvh),  # [field][head]
        "checkpoint_metrics": cfg.get("metrics", {}).get("test"),
        "timings": {"tsne_s": tsne_s},
    }


def specialisation(
    loaded: Any, lasf: LasFModel, *, n_sentences: int = 120, n_perm: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """The specialisation table of ``lasf`` on the generated probe set (cached per model)."""
    from workers.analyses.lasf.specialisation import (
        permutation_test,
        probe_sentences,
        token_relations,
    )

    key = f"{lasf.name}:{id(lasf.module)}:{n_sentences}:{n_perm}:{seed}"
    if key in _spec_cache:
        return _spec_cache[key]
    start = time.perf_counter()
    sents = probe_sentences(n_sentences, seed=seed)
    tok = loaded.tokenizer
    enc = tok(
        [s.text for s in sents], padding=True, return_offsets_mapping=True, return_tensors="pt"
    )
    offsets = enc.pop("offset_mapping").tolist()
    layer = int(lasf.config["replaced_layer"])
    with torch.no_grad():
        hs = loaded.model(
            **{k: v.to(loaded.device) for k, v in enc.items()}, output_hidden_states=True
        ).hidden_states
        it = lasf.module.internals(hs[layer].float().cpu(), enc["attention_mask"].bool())
    weights, relations, real = [], [], []
    for b, sent in enumerate(sents):
        n = int(enc["attention_mask"][b].sum())
        starts = np.cumsum([0] + [len(w) + 1 for w in sent.words])
        word_of = []
        for a, e in offsets[b][:n]:
            if e <= a:
                word_of.append(None)  # [CLS], [SEP]
                continue
            w = int(np.searchsorted(starts, a, side="right") - 1)
            word_of.append(
                w if w < len(sent.words) and a < starts[w] + len(sent.words[w]) else None
            )
        weights.append(it["weights"][b, :, :n, :n].double().numpy())
        relations.append(token_relations(sent, word_of))
        real.append(np.array([w is not None for w in word_of]))
    out = permutation_test(weights, relations, real, n_perm=n_perm, seed=seed)
    out.update(n_sentences=n_sentences, example=sents[0].text, seconds=time.perf_counter() - start)
    _spec_cache[key] = out
    return out
