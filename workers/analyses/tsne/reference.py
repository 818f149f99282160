"""The reference engines: ``batched`` (exact, all heads at once in plain torch, the fixed 250 + 750
schedule) and ``opentsne`` (Barnes-Hut, head by head, as the thesis ran it).

Both run openTSNE's schedule: ``early_exaggeration_iter`` steps with exaggeration 12 and momentum
0.5, then ``n_iter`` steps with momentum 0.8; delta-bar-delta gains; gradient without the factor 4
and ``learning_rate="auto"`` = n / exaggeration (equal to the classic n/48 then n/4).
"""

from __future__ import annotations

import numpy as np
import torch

from workers.analyses.tsne.affinities import kl_divergence
from workers.analyses.tsne.initialization import initial_embedding
from workers.analyses.tsne.options import TSNEOptions
from workers.core.progress import Progress, no_progress, scaled
from workers.models.devices import resolve_device


def optimize_batched(
    p: torch.Tensor,
    y: torch.Tensor,
    *,
    options: TSNEOptions,
    progress: Progress | None = None,
) -> torch.Tensor:
    """Exact t-SNE gradient descent on a batch of heads at once.

    Args:
        p: [B, n, n] joint probabilities.
        y: [B, n, 2] start.
    Returns:
        [B, n, 2] final embedding.
    """
    progress = progress or no_progress
    n = p.shape[-1]
    y = y.clone()
    update = torch.zeros_like(y)
    gains = torch.ones_like(y)
    phases = [
        (options.early_exaggeration_iter, options.early_exaggeration, options.initial_momentum),
        (options.n_iter, 1.0, options.final_momentum),
    ]
    total = max(1, sum(ph[0] for ph in phases))
    done = 0
    for steps, exaggeration, momentum in phases:
        lr = options.learning_rate if options.learning_rate is not None else n / exaggeration
        pe = p * exaggeration
        for _ in range(steps):
            sq = (y * y).sum(-1)
            # 1 + |y_i - y_j|^2 in one fused pass, then the Student-t kernel in place
            w = torch.baddbmm(
                sq[..., :, None] + sq[..., None, :], y, y.transpose(-1, -2), alpha=-2.0
            )
            w.clamp_min_(0.0).add_(1.0).reciprocal_()
            w.diagonal(dim1=-2, dim2=-1).zero_()  # [B, n, n]
            z = w.sum(dim=(-2, -1), keepdim=True)
            pq = torch.mul(pe, w).sub_(w.mul_(w).div_(z))  # (P - W/Z) * W, reusing w's memory
            grad = pq.sum(-1, keepdim=True) * y - pq @ y
            flipped = torch.sign(update) != torch.sign(grad)
            gains = torch.where(flipped, gains + 0.2, gains * 0.8 + 0.01)
            update = momentum * update - lr * gains * grad
            if options.max_step_norm is not None:
                norm = update.norm(dim=-1, keepdim=True)
                update = update * (options.max_step_norm / norm.clamp_min(1e-12)).clamp_max(1.0)
            y = y + update
            y = y - y.mean(dim=-2, keepdim=True)
            done += 1
            if done % 50 == 0:
                progress(done / total, f"t-SNE iteration {done}/{total}")
    return y


def run_batched(
    p: np.ndarray, *, options: TSNEOptions, x: np.ndarray | None, progress: Progress
) -> tuple[np.ndarray, np.ndarray]:
    """The ``batched`` engine as ``embed_affinities`` calls it: p [B, n, n] -> (embeddings
    [restart, B, n, 2], exact KL [restart, B]); heads go through ``optimize_batched`` in chunks
    of about 128 MiB."""
    dev = resolve_device(options.device)
    dtype = torch.float64 if options.dtype == "float64" else torch.float32
    batch, n = p.shape[0], p.shape[-1]
    chunk = max(1, (1 << 25) // (n * n))  # keep each [chunk, n, n] tensor near 128 MiB in float32
    emb = np.zeros((options.restarts, batch, n, 2))
    kls = np.zeros((options.restarts, batch))
    steps = options.restarts * ((batch + chunk - 1) // chunk)
    step = 0
    # P entries below 1e-20 are zeroed for the forces (not for the KL): their float32 products
    # with W are denormal and slow (docs/tsne.md, "The fast engine"); the mass removed is
    # < n^2 * 1e-20
    p_forces = np.where(p < 1e-20, 0.0, p) if dtype == torch.float32 else p
    for r in range(options.restarts):
        y0 = initial_embedding(p, init=options.init, seed=options.seed, restart=r, x=x)
        for s in range(0, batch, chunk):
            pt = torch.as_tensor(p_forces[s : s + chunk], device=dev, dtype=dtype)
            yt = torch.as_tensor(y0[s : s + chunk], device=dev, dtype=dtype)
            yt = optimize_batched(
                pt, yt, options=options, progress=scaled(progress, step / steps, (step + 1) / steps)
            )
            emb[r, s : s + chunk] = yt.double().cpu().numpy()
            step += 1
        kls[r] = kl_divergence(p, emb[r])
    return emb, kls


def run_opentsne(
    p: np.ndarray, *, options: TSNEOptions, x: np.ndarray | None, progress: Progress
) -> tuple[np.ndarray, np.ndarray]:
    """The ``opentsne`` engine as ``embed_affinities`` calls it: p [B, n, n] -> (embeddings
    [restart, B, n, 2], exact KL [restart, B]), one openTSNE Barnes-Hut run per head and restart."""
    import scipy.sparse as sp
    from openTSNE import TSNE
    from openTSNE.affinity import PrecomputedAffinities

    batch, n = p.shape[0], p.shape[-1]
    emb = np.zeros((options.restarts, batch, n, 2))
    kls = np.zeros((options.restarts, batch))
    for r in range(options.restarts):
        y0 = initial_embedding(p, init=options.init, seed=options.seed, restart=r, x=x)
        for b in range(batch):
            tsne = TSNE(
                n_components=2,
                n_iter=options.n_iter,
                early_exaggeration_iter=options.early_exaggeration_iter,
                early_exaggeration=options.early_exaggeration,
                learning_rate=options.learning_rate
                if options.learning_rate is not None
                else "auto",
                initial_momentum=options.initial_momentum,
                final_momentum=options.final_momentum,
                negative_gradient_method="bh",
                max_step_norm=options.max_step_norm,
                theta=options.theta,
                n_jobs=options.n_jobs,
                random_state=options.seed + r,
                verbose=False,
            )
            aff = PrecomputedAffinities(sp.csr_matrix(p[b]), normalize=False)
            emb[r, b] = np.asarray(tsne.fit(affinities=aff, initialization=y0[b].copy()))
            progress(
                (r * batch + b + 1) / (options.restarts * batch), f"openTSNE head {b + 1}/{batch}"
            )
        kls[r] = kl_divergence(p, emb[r])
    return emb, kls
