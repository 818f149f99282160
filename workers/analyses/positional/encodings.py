"""Learned positional encodings (docs/positional.md): references, Procrustes, distance matrices, modularity.

Everything takes a PE matrix ``E`` of shape ``[position, dim]`` as numpy and returns JSON-ready
values; numpy and scipy only, so a notebook can call it as well as a worker::

    E = read_tensor("model.safetensors", "pe")
    report = pe_report(E, reference=make_reference("2d-fixed", n=16, d=160, grid=(4, 4)),
                       partition=grid_partition("rows", (4, 4)))
"""

from __future__ import annotations

import csv
import io
import logging
import math
from typing import Any, Literal

import numpy as np

from workers.analyses.positional.agreement import attention_agreement
from workers.core.errors import HeadscopeError

logger = logging.getLogger(__name__)

__all__ = [
    "affinity", "attention_agreement", "clustering", "distance_matrix", "grid_partition",
    "make_reference", "modularity", "parse_grid", "parse_partition_csv", "partition_order",
    "pca_2d", "pe_report", "pe_sweep", "procrustes", "procrustes_normalised",
]  # fmt: skip

REFERENCE_KINDS = ("1d-fixed", "2d-fixed", "random")
METRICS = ("euclidean", "cosine")
MAX_PARTITION_CSV_BYTES = 1_000_000


# --- references ---------------------------------------------------------------------------------


def sinusoid(positions: np.ndarray, d: int) -> np.ndarray:
    """Vaswani's PE: ``[pos, 2i] = sin(pos / 10000^(2i/d))``, ``[pos, 2i+1] = cos(...)``. # [n, d]"""
    pos = np.asarray(positions, dtype=np.float64)[:, None]  # [n, 1]
    two_i = np.arange(0, d, 2, dtype=np.float64)  # [ceil(d/2)]
    angle = pos / np.power(10000.0, two_i / d)  # [n, ceil(d/2)]
    pe = np.zeros((len(pos), d))
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, : d // 2])
    return pe


def make_reference(
    kind: str,
    *,
    n: int,
    d: int,
    grid: tuple[int, int] | None = None,
    sigma: float = 1.0,
    seed: int = 0,
) -> np.ndarray:
    """A reference PE ``[n, d]``: ``1d-fixed``, ``2d-fixed`` (h x w grid, row-major) or ``random``.

    1d-fixed uses positions 1..n as in the paper (A.1). 2d-fixed puts the 1d formula with d/2 in
    place of d on the row (1..h) in the first d/2 dims and on the column (1..w) in the last d/2.
    random is N(0, sigma²) drawn with ``seed``.
    """
    if n < 1 or d < 1:
        raise HeadscopeError(
            f"a reference needs n >= 1 positions and d >= 1 dims, got n={n}, d={d}"
        )
    if kind == "1d-fixed":
        return sinusoid(np.arange(1, n + 1), d)
    if kind == "2d-fixed":
        h, w = _check_grid(grid, n)
        if d % 2:
            raise HeadscopeError(
                f"2d-fixed needs an even number of dims (half rows, half columns), got {d}"
            )
        t = np.arange(n)
        rows, cols = t // w + 1, t % w + 1
        return np.concatenate([sinusoid(rows, d // 2), sinusoid(cols, d // 2)], axis=1)
    if kind == "random":
        if not sigma > 0:
            raise HeadscopeError(f"sigma must be positive, got {sigma}")
        return np.random.default_rng(seed).normal(0.0, sigma, size=(n, d))
    raise HeadscopeError(f"unknown reference {kind!r}; use one of {', '.join(REFERENCE_KINDS)}")


def _check_grid(grid: tuple[int, int] | None, n: int) -> tuple[int, int]:
    if grid is None:
        side = math.isqrt(n)
        if side * side != n:
            raise HeadscopeError(f"{n} positions do not form a square grid; give the grid as h x w")
        return side, side
    h, w = (int(g) for g in grid)
    if h < 1 or w < 1 or h * w != n:
        raise HeadscopeError(f"a {h} x {w} grid has {h * w} cells but the PE has {n} positions")
    return h, w


def parse_grid(text: str) -> tuple[int, int]:
    """``"4x4"`` -> (4, 4)."""
    try:
        h, w = (int(p) for p in text.lower().replace("×", "x").split("x"))
    except ValueError:
        raise HeadscopeError(f"bad grid {text!r}; write it as HxW, e.g. 4x4") from None
    if h < 1 or w < 1:
        raise HeadscopeError(f"bad grid {text!r}; both sides must be positive")
    return h, w


# --- Procrustes ---------------------------------------------------------------------------------


def _pad_to(a: np.ndarray, d: int) -> np.ndarray:
    return a if a.shape[1] == d else np.pad(a, ((0, 0), (0, d - a.shape[1])))


def procrustes(E: np.ndarray, R: np.ndarray) -> tuple[np.ndarray, float]:
    """E aligned onto R by the orthogonal Ω minimising ``|EΩ − R|_F``, and that distance.

    Returns ``EΩ`` ``[n, d]`` and the raw distance. When the dims differ the narrower matrix gets
    zero columns. With more dims than positions (a 512 x 4096 PE) the work happens in the
    n-dimensional row spaces, so no d x d matrix is formed.
    """
    E, R = _pair(E, R)
    n, d = E.shape
    if d <= n:
        u, _s, vt = np.linalg.svd(E.T @ R)  # [d, d]
        aligned = E @ (u @ vt)
    else:
        qe, te = np.linalg.qr(E.T)  # Eᵀ = Qe Te: [d, n] [n, n]
        qr_, tr = np.linalg.qr(R.T)
        u, _s, vt = np.linalg.svd(te @ tr.T)  # EᵀR = Qe (Te Trᵀ) Qrᵀ
        aligned = E @ qe @ u @ vt @ qr_.T  # = EΩ for every orthogonal Ω extending Qe u vt Qrᵀ
    return aligned, float(np.linalg.norm(aligned - R))


def procrustes_normalised(E: np.ndarray, R: np.ndarray) -> float:
    """``|EΩ − R|_F`` after centring both (column means) and scaling both to unit Frobenius norm.

    Lies in [0, 2]; ``d² = 2 − 2·Σσ`` where σ are the singular values of ``EᵀR`` (normalised),
    i.e. ``d² = 2 − 2·sqrt(1 − disparity)`` for scipy.spatial.procrustes' disparity.
    """
    E, R = _pair(E, R)
    Ec, Rc = E - E.mean(axis=0), R - R.mean(axis=0)
    ne, nr = np.linalg.norm(Ec), np.linalg.norm(Rc)
    if ne == 0 or nr == 0:
        raise HeadscopeError("a PE whose positions are all identical cannot be normalised")
    _, dist = procrustes(Ec / ne, Rc / nr)
    return dist


def _pair(E: np.ndarray, R: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    E, R = _matrix(E, "the PE"), _matrix(R, "the reference")
    if E.shape[0] != R.shape[0]:
        raise HeadscopeError(
            f"the PE has {E.shape[0]} positions but the reference has {R.shape[0]}; they must match"
        )
    d = max(E.shape[1], R.shape[1])
    return _pad_to(E, d), _pad_to(R, d)


def _matrix(a: Any, what: str) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] < 2 or a.shape[1] < 1:
        raise HeadscopeError(
            f"{what} must be a positions x dims matrix with >= 2 positions, got {list(a.shape)}"
        )
    if not np.all(np.isfinite(a)):
        raise HeadscopeError(f"{what} contains NaN or infinite values")
    return a


# --- distances, modularity, clustering -----------------------------------------------------------


def distance_matrix(E: np.ndarray, *, metric: str = "euclidean") -> np.ndarray:
    """``D_ij = |E_i − E_j|_2`` (or ``1 − cos``): symmetric, zero diagonal. # [n, n]"""
    E = _matrix(E, "the PE")
    if metric == "euclidean":
        sq = (E * E).sum(axis=1)
        D = np.sqrt(np.maximum(sq[:, None] + sq[None, :] - 2.0 * E @ E.T, 0.0))
    elif metric == "cosine":
        norms = np.linalg.norm(E, axis=1)
        if np.any(norms == 0):
            raise HeadscopeError(
                "cosine distance is undefined for a position whose encoding is all zeros"
            )
        U = E / norms[:, None]
        D = np.clip(1.0 - U @ U.T, 0.0, 2.0)
    else:
        raise HeadscopeError(f"unknown metric {metric!r}; use one of {', '.join(METRICS)}")
    D = (D + D.T) / 2.0
    np.fill_diagonal(D, 0.0)
    return D


def affinity(D: np.ndarray) -> np.ndarray:
    """``W = 1 − D / max(D)`` with a zero diagonal (closer positions weigh more). # [n, n]"""
    top = float(D.max())
    W = 1.0 - (D / top if top > 0 else np.zeros_like(D))
    np.fill_diagonal(W, 0.0)
    return W


def _codes(labels: Any, n: int) -> tuple[np.ndarray, list[str]]:
    labels = np.asarray(labels)
    if labels.shape != (n,):
        raise HeadscopeError(f"the partition has {labels.size} labels but the PE has {n} positions")
    values = labels if labels.dtype.kind in "iub" else labels.astype(str)
    names, codes = np.unique(values, return_inverse=True)
    return codes.astype(np.int64).reshape(n), [str(x) for x in names]


def modularity(W: np.ndarray, labels: Any) -> float | None:
    """``Q = (1/l) Σ_ij [W_ij − k_i k_j / l] δ(m_i, m_j)`` (None when W has no weight)."""
    codes, _ = _codes(labels, W.shape[0])
    k = W.sum(axis=1)  # [n]
    total = float(k.sum())
    if total <= 0:
        return None
    same = codes[:, None] == codes[None, :]  # [n, n]
    return float(((W - np.outer(k, k) / total) * same).sum() / total)


def clustering(W: np.ndarray, labels: Any) -> tuple[float | None, dict[str, float | None]]:
    """``C = mean_m (W̄_in(m) − W̄_out(m)) / W̄_in(m)`` and each module's term.

    W̄_in averages W_ij over i ≠ j both in m, W̄_out over i in m and j outside. A module with one
    position, no outside, or W̄_in = 0 has no term (None) and is left out of the mean.
    """
    codes, names = _codes(labels, W.shape[0])
    terms: dict[str, float | None] = {}
    for c, name in enumerate(names):
        inside = codes == c
        m = int(inside.sum())
        if m < 2 or m == len(codes):
            terms[name] = None
            continue
        w_in = float(W[np.ix_(inside, inside)].sum() / (m * (m - 1)))  # diagonal is zero
        w_out = float(W[np.ix_(inside, ~inside)].mean())
        terms[name] = (w_in - w_out) / w_in if w_in > 0 else None
    valid = [t for t in terms.values() if t is not None]
    return (float(np.mean(valid)) if valid else None), terms


def partition_order(labels: Any) -> list[int]:
    """Positions grouped by label (labels sorted), position order kept inside each group."""
    codes, _ = _codes(labels, len(np.asarray(labels)))
    return [int(i) for i in np.argsort(codes, kind="stable")]


def grid_partition(kind: Literal["rows", "columns"], grid: tuple[int, int]) -> np.ndarray:
    """Label of each cell of an h x w grid flattened row-major: its row, or its column. # [h*w]"""
    h, w = (int(g) for g in grid)
    if h < 1 or w < 1:
        raise HeadscopeError(f"bad grid {h} x {w}")
    t = np.arange(h * w)
    if kind == "rows":
        return t // w
    if kind == "columns":
        return t % w
    raise HeadscopeError(f"unknown grid partition {kind!r}; use rows or columns")


def parse_partition_csv(text: str, n: int) -> np.ndarray:
    """Labels ``[n]`` (strings) from CSV text with header ``position,label``, one row per position 0..n-1."""
    if len(text) > MAX_PARTITION_CSV_BYTES:
        raise HeadscopeError(f"the partition CSV is over {MAX_PARTITION_CSV_BYTES} bytes")
    rows = [r for r in csv.reader(io.StringIO(text.lstrip("\ufeff"))) if any(c.strip() for c in r)]
    if not rows or [c.strip().lower() for c in rows[0]] != ["position", "label"]:
        got = ",".join(rows[0]) if rows else "nothing"
        raise HeadscopeError(
            f"the partition CSV must start with the header 'position,label' (got {got!r})"
        )
    labels: list[str | None] = [None] * n
    seen: dict[int, int] = {}
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != 2:
            raise HeadscopeError(
                f"partition CSV line {line}: expected 2 columns (position,label), got {len(row)}"
            )
        raw, label = row[0].strip(), row[1].strip()
        try:
            pos = int(raw)
        except ValueError:
            raise HeadscopeError(
                f"partition CSV line {line}: position {raw!r} is not an integer"
            ) from None
        if not 0 <= pos < n:
            raise HeadscopeError(
                f"partition CSV line {line}: position {pos} is outside 0..{n - 1} (0-based)"
            )
        if pos in seen:
            raise HeadscopeError(
                f"partition CSV: position {pos} appears twice (lines {seen[pos]} and {line})"
            )
        if not label:
            raise HeadscopeError(f"partition CSV line {line}: empty label")
        seen[pos] = line
        labels[pos] = label
    if len(seen) != n:
        missing = [i for i, lab in enumerate(labels) if lab is None]
        raise HeadscopeError(
            f"the partition CSV has {len(seen)} positions but the PE has {n}; missing: "
            + ", ".join(map(str, missing[:10]))
            + (" ..." if len(missing) > 10 else "")
        )
    return np.array(labels, dtype=str)


# --- reports --------------------------------------------------------------------------------------


def pca_2d(X: np.ndarray, *, basis: np.ndarray | None = None) -> np.ndarray:
    """Rows of X on the top-2 principal axes of ``basis`` (default X), signs fixed. # [n, 2]

    The axes come from the smaller of the two Gram matrices (n x n or d x d), top two eigenpairs only.
    """
    from scipy.linalg import eigh

    B = X if basis is None else basis
    centre = B.mean(axis=0)
    Bc = B - centre  # [n, d]
    n, d = Bc.shape
    k = min(2, n, d)
    if d <= n:
        _, vecs = eigh(Bc.T @ Bc, subset_by_index=[d - k, d - 1])  # [d, k], ascending
        axes = vecs[:, ::-1].T  # [k, d]
    else:
        vals, vecs = eigh(Bc @ Bc.T, subset_by_index=[n - k, n - 1])  # [n, k]
        axes = (Bc.T @ vecs[:, ::-1] / np.sqrt(np.maximum(vals[::-1], 1e-300))).T
    flip = np.sign(axes[np.arange(k), np.abs(axes).argmax(axis=1)])
    axes = axes * np.where(flip == 0, 1.0, flip)[:, None]
    coords = (X - centre) @ axes.T
    if coords.shape[1] < 2:
        coords = np.pad(coords, ((0, 0), (0, 2 - coords.shape[1])))
    return coords


def _rounded(a: np.ndarray, *, digits: int = 6) -> list:
    """``a`` as nested lists with ``digits`` significant digits relative to its largest value."""
    top = float(np.abs(a).max()) if a.size else 0.0
    decimals = digits - int(math.ceil(math.log10(top))) if top > 0 else digits
    return np.round(a, max(decimals, 0)).tolist()


def _upper(D: np.ndarray) -> np.ndarray:
    return D[np.triu_indices(D.shape[0], k=1)]


def pe_report(
    E: np.ndarray,
    *,
    reference: np.ndarray | None,
    partition: np.ndarray | None,
    metric: str = "euclidean",
) -> dict[str, Any]:
    """Everything the PE view shows for one matrix, JSON-ready.

    Keys: ``shape``, ``metric``, ``procrustes_distance`` (``|EΩ − R|_F``),
    ``procrustes_distance_normalised``, ``distance_correlation`` (Pearson r of the two distance
    matrices' upper triangles), ``distance_matrix`` ``[n][n]``, ``distance_max``, ``modularity``,
    ``clustering``, ``clustering_per_module``, ``labels``, ``order``, ``coords_2d`` (PCA of E),
    ``coords_2d_aligned`` and ``reference_coords_2d`` (EΩ and R on R's principal axes). Values
    that need a reference or a partition are None without one. Matrices and coordinates are
    rounded to 6 significant digits of their largest entry (the JSON of a 512-position PE is
    ~3 MB instead of ~5 MB); the scalars are computed from the unrounded values.
    """
    E = _matrix(E, "the PE")
    n, d = E.shape
    D = distance_matrix(E, metric=metric)
    out: dict[str, Any] = {
        "shape": [n, d],
        "metric": metric,
        "procrustes_distance": None,
        "procrustes_distance_normalised": None,
        "distance_correlation": None,
        "coords_2d": _rounded(pca_2d(E)),
        "coords_2d_aligned": None,
        "reference_coords_2d": None,
        "distance_matrix": _rounded(D),
        "distance_max": float(D.max()),
        "modularity": None,
        "clustering": None,
        "clustering_per_module": None,
        "labels": None,
        "order": list(range(n)),
    }
    if reference is not None:
        R = _matrix(reference, "the reference")
        aligned, raw = procrustes(E, R)
        _, Rp = _pair(E, R)
        out["procrustes_distance"] = raw
        out["procrustes_distance_normalised"] = procrustes_normalised(E, R)
        DR = distance_matrix(R, metric=metric)
        if n > 2 and np.std(_upper(D)) > 0 and np.std(_upper(DR)) > 0:
            out["distance_correlation"] = float(np.corrcoef(_upper(D), _upper(DR))[0, 1])
        out["coords_2d_aligned"] = _rounded(pca_2d(aligned, basis=Rp))
        out["reference_coords_2d"] = _rounded(pca_2d(Rp))
    if partition is not None:
        W = affinity(D)
        codes, names = _codes(partition, n)
        c, per = clustering(W, codes)
        out["modularity"] = modularity(W, codes)
        out["clustering"] = c
        out["clustering_per_module"] = {names[int(k)]: v for k, v in per.items()}
        out["labels"] = [names[int(i)] for i in codes]
        out["order"] = partition_order(codes)
    return out


def pe_sweep(
    items: list[tuple[str, np.ndarray]],
    *,
    reference: np.ndarray | None,
    partition: np.ndarray | None,
    metric: str = "euclidean",
) -> dict[str, Any]:
    """Several PEs side by side (a σ sweep): every report, and one summary row per checkpoint."""
    reports = []
    for name, E in items:
        rep = pe_report(E, reference=reference, partition=partition, metric=metric)
        reports.append({"name": name, **rep})
    keys = ("procrustes_distance", "procrustes_distance_normalised", "distance_correlation",
            "modularity", "clustering")  # fmt: skip
    summary = [{"name": r["name"], **{k: r[k] for k in keys}} for r in reports]
    return {"checkpoints": reports, "summary": summary}
