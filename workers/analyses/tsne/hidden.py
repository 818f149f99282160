"""Standard t-SNE of hidden states (docs/analyses.md#t-sne-of-hidden-states): token states of one text, or the multi-token
embeddings of a list of short texts (thesis Def. 4.1)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import numpy as np

from workers.analyses.tsne import TSNEOptions, embed_affinities, select_indices
from workers.analyses.tsne.affinities import perplexity_affinities
from workers.core.progress import Progress


@dataclass
class HiddenTSNEResult:
    """Standard t-SNE of one point set per layer."""

    layers: list[int]
    kept: np.ndarray  # indices of the points embedded
    embedding: np.ndarray  # [layer, point, 2]
    kl: np.ndarray  # [layer]
    kl_restarts: np.ndarray  # [layer, restart]
    perplexity: float  # the perplexity used (capped at (n - 1) / 3)
    tsne_s: float
    engine: str


def affinities_of_states(
    x: np.ndarray, *, perplexity: float, threads: int | None = None
) -> np.ndarray:
    """``perplexity_affinities`` of each point set ``x[l]`` ([L, m, d] -> [L, m, m]), ``threads`` sets at
    once (default: torch's thread count). Each set's P is computed by the same code on one thread, so
    the result does not depend on ``threads``; numpy's ``exp`` and sums release the GIL, so on two cores
    two threads take ~half the time of one (SmolLM2's 31 states at 452 tokens: seconds, single-threaded,
    between the gallery and the hidden-state maps)."""
    if threads is None:
        import torch

        threads = torch.get_num_threads()
    one = partial(perplexity_affinities, perplexity=perplexity)
    if threads <= 1 or len(x) <= 1:
        return np.stack([one(xl) for xl in x])
    with ThreadPoolExecutor(
        max_workers=min(threads, len(x)), thread_name_prefix="affinities"
    ) as pool:
        return np.stack(list(pool.map(one, x)))


def states_tsne(
    states: np.ndarray,
    *,
    layers: int | str | list[int] | None = None,
    keep: np.ndarray | None = None,
    perplexity: float = 20.0,
    options: TSNEOptions | None = None,
    progress: Progress | None = None,
) -> HiddenTSNEResult:
    """Standard (perplexity-based) t-SNE of ``states[l]`` for each chosen layer.

    Args:
        states: [state, point, dim] (state 0 = embedding output).
        layers: a state index, a list, or ``all``.
        keep: boolean mask [point]; False points are left out.
    """
    ls = select_indices(layers, states.shape[0], "layer")
    kept = (
        np.arange(states.shape[1]) if keep is None else np.flatnonzero(np.asarray(keep, dtype=bool))
    )
    x = states[ls][:, kept].astype(np.float64)  # [L, m, d]
    p = affinities_of_states(x, perplexity=perplexity)
    opts = options or TSNEOptions()
    if opts.init == "pca" and len(ls) > 1:
        # each layer has its own PCA start: embed layer by layer
        parts = [embed_affinities(p[i], options=opts, x=x[i]) for i in range(len(ls))]
        emb = np.stack([r.embedding for r in parts])
        kl = np.concatenate([r.kl for r in parts])
        klr = np.concatenate([r.kl_restarts for r in parts])
        secs, engine = sum(r.tsne_s for r in parts), opts.engine
    else:
        res = embed_affinities(
            p, options=opts, x=x[0] if opts.init == "pca" else None, progress=progress
        )
        emb, kl, klr, secs, engine = res.embedding, res.kl, res.kl_restarts, res.tsne_s, res.engine
    n = len(kept)
    return HiddenTSNEResult(
        layers=ls,
        kept=kept,
        embedding=emb,
        kl=kl,
        kl_restarts=klr,
        perplexity=min(perplexity, (n - 1) / 3.0),
        tsne_s=secs,
        engine=engine,
    )
