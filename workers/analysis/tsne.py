"""t-SNE engines for precomputed P (docs/analyses.md).

Affinities, initialisation and optimisation are separate, as in openTSNE:
``initial_embedding`` (spectral / random / pca) -> ``optimize_batched`` or the openTSNE engine ->
``kl_divergence`` (exact, float64, the same for both engines).

Both engines run openTSNE's schedule: ``early_exaggeration_iter`` steps with exaggeration 12 and
momentum 0.5, then ``n_iter`` steps with momentum 0.8; delta-bar-delta gains; gradient without the
factor 4 and ``learning_rate="auto"`` = n / exaggeration (equal to the classic n/48 then n/4).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import torch

from workers.analysis.affinities import head_affinities, kl_divergence
from workers.analysis.progress import Progress, no_progress, scaled
from workers.errors import HeadscopeError, OutOfRangeError

logger = logging.getLogger(__name__)

Engine = Literal["fast", "batched", "opentsne"]
ENGINES = ("fast", "batched", "opentsne")
INITS = ("spectral", "random", "pca")


@dataclass(frozen=True)
class TSNEOptions:
    """Knobs of one t-SNE run; defaults are openTSNE's (250 + 750 iterations).

    The ``fast`` engine takes the iteration counts as upper bounds (see ``fast_tsne``).
    """

    engine: str = "fast"
    n_iter: int = 750
    early_exaggeration_iter: int = 250
    early_exaggeration: float = 12.0
    learning_rate: float | None = None  # None: "auto", n / exaggeration
    initial_momentum: float = 0.5
    final_momentum: float = 0.8
    init: str = "spectral"  # restart 0; restarts 1.. use random inits seeded seed + r
    restarts: int = 1
    seed: int = 0
    theta: float = 0.5  # Barnes-Hut accuracy (openTSNE engine)
    n_jobs: int = 1  # openTSNE threads
    device: str | None = None  # batched/fast engines: None = cuda if available else cpu
    dtype: str = "float32"  # batched engine (and fast on torch) compute dtype; KL is always float64
    max_step_norm: float | None = 5.0  # openTSNE's default: clip each point's step to this length

    def validate(self) -> TSNEOptions:
        if self.engine not in ENGINES:
            raise HeadscopeError(f"unknown t-SNE engine {self.engine!r}; use one of {', '.join(ENGINES)}")
        if self.init not in INITS:
            raise HeadscopeError(f"unknown init {self.init!r}; use one of {', '.join(INITS)}")
        if not 1 <= self.restarts <= 100:
            raise OutOfRangeError(f"restarts must be between 1 and 100, got {self.restarts}")
        if not 0 <= self.n_iter <= 10000 or not 0 <= self.early_exaggeration_iter <= 10000:
            raise OutOfRangeError("iteration counts must be between 0 and 10000")
        return self


@dataclass
class TSNEResult:
    """Embeddings of a batch of P matrices, best restart each."""

    embedding: np.ndarray  # [batch, n, 2]
    kl: np.ndarray  # [batch], exact KL of the returned embedding
    kl_restarts: np.ndarray  # [batch, restarts]
    tsne_s: float  # seconds in t-SNE alone (init + optimisation + KL)
    engine: str
    extra: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------- initialisation


def _rescale(y: np.ndarray, target_std: float = 1e-4) -> np.ndarray:
    std = y[..., :, :1].std(axis=-2, keepdims=True)
    return y / np.where(std > 0, std, 1.0) * target_std


def spectral_init(p: np.ndarray, *, seed: int = 0) -> np.ndarray:
    """openTSNE's spectral start (diffusion map of P), batched: [..., n, n] -> [..., n, 2]."""
    return finish_spectral(spectral_vectors(p), seed=seed)


def spectral_vectors(p: np.ndarray) -> np.ndarray:
    """The diffusion-map coordinates behind ``spectral_init``, before sign and scale."""
    pt = torch.as_tensor(p, dtype=torch.float64)
    d = pt.sum(dim=-1).clamp_min(1e-300)
    dis = d.rsqrt()
    m = pt * dis[..., :, None] * dis[..., None, :]
    evals, evecs = torch.linalg.eigh(m)  # ascending
    vals = evals[..., -3:].flip(-1)  # the 3 largest, decreasing
    vecs = (evecs[..., -3:].flip(-1) * dis[..., :, None]) * vals[..., None, :]
    return vecs[..., :, 1:3].cpu().numpy()


def finish_spectral(y: np.ndarray, *, seed: int, index: np.ndarray | None = None) -> np.ndarray:
    """Sign, scale and jitter of a spectral start ``[..., n, 2]`` (shared by every engine).

    The jitter of batch element ``b`` is drawn for index ``b``, or ``index[b]`` when given (a
    subset of a batch, e.g. the heads of one length, keeps each head's jitter)."""
    # a deterministic sign: the largest-magnitude coordinate of each axis is positive
    idx = np.abs(y).argmax(axis=-2, keepdims=True)
    sign = np.sign(np.take_along_axis(y, idx, axis=-2))
    y = _rescale(y * np.where(sign == 0, 1.0, sign))
    flat = y.reshape(-1, *y.shape[-2:])
    heads = range(flat.shape[0]) if index is None else np.asarray(index).tolist()
    jitter = np.stack([_normal(seed, b, flat.shape[-2:]) for b in heads])
    return y + 1e-6 * jitter.reshape(y.shape)  # 1 % of the std, so coinciding points separate


def _normal(seed: int, index: int, shape: tuple[int, ...]) -> np.ndarray:
    """Standard normal draws for batch element ``index``: independent of the batch's size."""
    return np.random.default_rng([seed, index]).normal(0.0, 1.0, size=shape)


def random_init(batch: int, n: int, *, seed: int) -> np.ndarray:
    """Isotropic Gaussian start with std 1e-4: [batch, n, 2]."""
    return _rescale(np.stack([_normal(seed, b, (n, 2)) for b in range(batch)]))


def pca_init(x: np.ndarray) -> np.ndarray:
    """First two principal components of the data, scaled to std 1e-4: [n, 2]."""
    xc = np.asarray(x, dtype=np.float64) - np.mean(x, axis=0)
    u, s, _ = np.linalg.svd(xc, full_matrices=False)
    return _rescale(u[:, :2] * s[:2])


def initial_embedding(
    p: np.ndarray, *, init: str, seed: int, restart: int, x: np.ndarray | None = None
) -> np.ndarray:
    """The start of restart ``restart`` for a batch [B, n, n] of P: [B, n, 2]."""
    batch, n = p.shape[0], p.shape[-1]
    if restart > 0 or init == "random":
        return random_init(batch, n, seed=seed + restart)
    if init == "pca":
        if x is None:
            raise HeadscopeError("pca initialisation needs the data points; use spectral for attention")
        return np.broadcast_to(pca_init(x), (batch, n, 2)).copy()
    return spectral_init(p, seed=seed)


# ---------------------------------------------------------------------------- batched engine


def _device(name: str | None) -> torch.device:
    """``name``, else the worker's device (``workers.devices.resolve_device``)."""
    from workers.devices import resolve_device

    return resolve_device(name)


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
            w = torch.baddbmm(sq[..., :, None] + sq[..., None, :], y, y.transpose(-1, -2), alpha=-2.0)
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


def _batched(
    p: np.ndarray, *, options: TSNEOptions, x: np.ndarray | None, progress: Progress
) -> tuple[np.ndarray, np.ndarray]:
    dev = _device(options.device)
    dtype = torch.float64 if options.dtype == "float64" else torch.float32
    batch, n = p.shape[0], p.shape[-1]
    chunk = max(1, (1 << 25) // (n * n))  # keep each [chunk, n, n] tensor near 128 MiB in float32
    emb = np.zeros((options.restarts, batch, n, 2))
    kls = np.zeros((options.restarts, batch))
    steps = options.restarts * ((batch + chunk - 1) // chunk)
    step = 0
    # P entries below 1e-20 are zeroed for the forces (not for the KL): their float32 products
    # with W are denormal and cost ~100x each; the mass removed is < n^2 * 1e-20
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


# ---------------------------------------------------------------------------- openTSNE engine


def _opentsne(
    p: np.ndarray, *, options: TSNEOptions, x: np.ndarray | None, progress: Progress
) -> tuple[np.ndarray, np.ndarray]:
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
                learning_rate=options.learning_rate if options.learning_rate is not None else "auto",
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
            progress((r * batch + b + 1) / (options.restarts * batch), f"openTSNE head {b + 1}/{batch}")
        kls[r] = kl_divergence(p, emb[r])
    return emb, kls


def _fast(
    p: np.ndarray, *, options: TSNEOptions, x: np.ndarray | None, progress: Progress
) -> tuple[np.ndarray, np.ndarray, dict[str, object]]:
    from workers.analysis.fast_tsne import run_fast

    return run_fast(p, options=options, x=x, progress=progress)


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
    run = {"batched": _batched, "opentsne": _opentsne, "fast": _fast}[options.engine]
    out = run(np.ascontiguousarray(pb, dtype=np.float64), options=options, x=x, progress=progress)
    emb, kls = out[0], out[1]
    extra = out[2] if len(out) > 2 else {}  # the fast engine: which of its engines ran, and fallbacks
    best = kls.argmin(axis=0)  # [B]
    embedding = emb[best, np.arange(pb.shape[0])]
    kl = kls[best, np.arange(pb.shape[0])]
    elapsed = time.perf_counter() - start
    res = TSNEResult(embedding, kl, kls.T.copy(), elapsed, options.engine, extra=dict(extra))
    if single:
        res.embedding, res.kl, res.kl_restarts = embedding[0], kl[0:1], res.kl_restarts[0:1]
    return res


# ---------------------------------------------------------------------------- attention heads


@dataclass
class HeadTSNEResult:
    """Attention-head t-SNE of a grid of (layer, head) pairs."""

    layers: list[int]
    heads: list[int]
    kept: np.ndarray  # indices of the tokens embedded
    embedding: np.ndarray  # [layer, head, token, 2]
    kl: np.ndarray  # [layer, head]
    kl_restarts: np.ndarray  # [layer, head, restart]
    tsne_s: float
    engine: str


def select_indices(value: int | str | list[int] | None, size: int, what: str) -> list[int]:
    """``all``/None -> every index; an int or list -> checked indices (a clear error out of range)."""
    if value is None or value == "all":
        return list(range(size))
    items = [value] if isinstance(value, int | str) else list(value)
    out = []
    for item in items:
        try:
            i = int(item)
        except (TypeError, ValueError):
            raise HeadscopeError(f"{what} must be an integer or 'all', got {item!r}") from None
        if not 0 <= i < size:
            raise OutOfRangeError(f"{what} {i} is out of range: the model has {size} {what}s (0-{size - 1})")
        out.append(i)
    return out


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
        parts.append(embed_layer(a, keep=keep, options=opts, progress=scaled(progress, i / len(ls), (i + 1) / len(ls))))
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
    a: np.ndarray, *, keep: np.ndarray | None, options: TSNEOptions, progress: Progress | None = None
) -> TSNEResult:
    """t-SNE of one layer's heads: ``a`` [head, n, n] -> embedding [head, m, 2], best restart each.

    The unit of work of both the all-at-once ``head_tsne`` and the streamed pipeline, so both give
    the same maps.
    """
    p = head_affinities(a, keep=keep)  # [head, m, m]
    return embed_affinities(p, options=options, progress=progress)


def with_overrides(options: TSNEOptions, **changes: object) -> TSNEOptions:
    """A copy of ``options`` with the non-None ``changes`` applied."""
    return replace(options, **{k: v for k, v in changes.items() if v is not None})
