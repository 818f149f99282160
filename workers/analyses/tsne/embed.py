"""t-SNE for precomputed P: the engine package's public entry (docs/tsne.md; the definitions:
docs/analyses.md). ``embed_affinities`` embeds P matrices with the chosen engine (``fast``,
``batched`` or ``opentsne``) and reports each one's exact KL; ``head_tsne`` and ``embed_layer``
do it for attention heads. The modules below import only downward (see ``options``).
"""

from __future__ import annotations

import time

import numpy as np

from workers.analyses.tsne.affinities import head_affinities
from workers.analyses.tsne.engines import run_fast
from workers.analyses.tsne.options import (
    HeadTSNEResult,
    TSNEOptions,
    TSNEResult,
    select_indices,
)
from workers.analyses.tsne.reference import run_batched, run_opentsne
from workers.core.errors import HeadscopeError
from workers.core.progress import Progress, no_progress, scaled


def embed_affinities(
    p: np.ndarray,
    *,
    options: TSNEOptions | None = None,
    x: np.ndarray | None = None,
    progress: Progress | None = None,
) -> TSNEResult:
    """Embed one [n, n] or a batch [B, n, n] of P matrices in 2-D, keeping the best restart.

    Args:
        p: joint probabilities (symmetric, zero diagonal, summing to 1 each).
        options: engine, schedule, restarts, seed.
        x: the data points, only for ``init="pca"``.
    """
    options = (options or TSNEOptions()).validate()
    progress = progress or no_progress
    single = p.ndim == 2
    pb = p[None] if single else p
    if pb.shape[-1] < 3:
        raise HeadscopeError(f"t-SNE needs at least 3 points, got {pb.shape[-1]}")
    start = time.perf_counter()
    run = {"batched": run_batched, "opentsne": run_opentsne, "fast": run_fast}[options.engine]
    out = run(np.ascontiguousarray(pb, dtype=np.float64), options=options, x=x, progress=progress)
    emb, kls = out[0], out[1]
    extra = (
        out[2] if len(out) > 2 else {}
    )  # the fast engine: which of its engines ran, and fallbacks
    best = kls.argmin(axis=0)  # [B]
    embedding = emb[best, np.arange(pb.shape[0])]
    kl = kls[best, np.arange(pb.shape[0])]
    elapsed = time.perf_counter() - start
    res = TSNEResult(embedding, kl, kls.T.copy(), elapsed, options.engine, extra=dict(extra))
    if single:
        res.embedding, res.kl, res.kl_restarts = embedding[0], kl[0:1], res.kl_restarts[0:1]
    return res


def head_tsne(
    attentions: np.ndarray,
    *,
    layers: int | str | list[int] | None = None,
    heads: int | str | list[int] | None = None,
    keep: np.ndarray | None = None,
    options: TSNEOptions | None = None,
    progress: Progress | None = None,
) -> HeadTSNEResult:
    """Attention-head t-SNE (docs/analyses.md#attention-head-t-sne) for the chosen layers x heads, all at once.

    Args:
        attentions: [layer, head, query, key].
        layers, heads: an index, a list, or ``all`` (default).
        keep: boolean mask [token]; False tokens (e.g. special) are left out before P is formed.
    """
    n_layers, n_heads, n = attentions.shape[:3]
    ls = select_indices(layers, n_layers, "layer")
    hs = select_indices(heads, n_heads, "head")
    kept = np.arange(n) if keep is None else np.flatnonzero(np.asarray(keep, dtype=bool))
    opts = options or TSNEOptions()
    progress = progress or no_progress
    parts = []
    for i, layer in enumerate(ls):  # layer by layer, as the streamed pipeline does (same numbers)
        a = np.asarray(attentions[layer][hs], dtype=np.float64)  # [Hs, n, n]
        parts.append(
            embed_layer(
                a,
                keep=keep,
                options=opts,
                progress=scaled(progress, i / len(ls), (i + 1) / len(ls)),
            )
        )
    m = parts[0].embedding.shape[-2]
    return HeadTSNEResult(
        layers=ls,
        heads=hs,
        kept=kept,
        embedding=np.stack([r.embedding for r in parts]).reshape(len(ls), len(hs), m, 2),
        kl=np.stack([r.kl for r in parts]).reshape(len(ls), len(hs)),
        kl_restarts=np.stack([r.kl_restarts for r in parts]).reshape(len(ls), len(hs), -1),
        tsne_s=float(sum(r.tsne_s for r in parts)),
        engine=parts[0].engine,
    )


def embed_layer(
    a: np.ndarray,
    *,
    keep: np.ndarray | None,
    options: TSNEOptions,
    progress: Progress | None = None,
) -> TSNEResult:
    """t-SNE of one layer's heads: ``a`` [head, n, n] -> embedding [head, m, 2], best restart each.

    The unit of work of both the all-at-once ``head_tsne`` and the streamed pipeline, so both give
    the same maps.
    """
    p = head_affinities(a, keep=keep)  # [head, m, m]
    return embed_affinities(p, options=options, progress=progress)
