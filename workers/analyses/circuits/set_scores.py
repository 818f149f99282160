"""Edge scores and faithfulness on a task data set (docs/circuits.md, "Circuits on a task data set";
SPEC 14, after MIB's circuit-localisation track, Mueller et al. 2025).

Examples of equal token length run together (``Prepared.groups``): their clean and corrupted runs in
one batch, their EAP-IG gradient runs as rows ``example x step`` of one batch, a hook per reader group
turning the rows' gradients into *per-example* scores at once (so a bootstrap can reweight them with no
forward). An example's score is section 12's EAP / EAP-IG score *not* divided by its own
``m_C - m_K``; the set's score divides their sum once by the summed differences (``set_scores``).

The evaluation runs each held-out example's edge-patched runs (``SplitModel.patched``: the edges
outside a circuit take the corrupted run's values), one row per circuit, and
``f = (M(circuit) - M(empty)) / (M(full) - M(empty))`` with M the mean of ``m_e`` over the examples.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from workers.analyses.circuits.edges import frozen
from workers.analyses.circuits.graph import Plain, SplitModel
from workers.analyses.circuits.patch_plan import patched_sparse, plan
from workers.analyses.circuits.spec import edge_rows
from workers.analyses.circuits.tasks import Example
from workers.core.errors import CancelledError, HeadscopeError
from workers.core.memory import ModelFacts
from workers.core.progress import Progress, no_progress
from workers.models.adapters import encode

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel

MIB_SIZES = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
Stop = Callable[[], bool] | None


@dataclass
class Prepared:
    """A set's examples for one model: each clean/corrupted ``X[0]`` [n, d], the answer ids, and the
    examples grouped by token length (with one layer-argument list per length)."""

    model: SplitModel
    x0_c: list[torch.Tensor]
    x0_k: list[torch.Tensor]
    answer: list[int]
    wrong: list[int]
    groups: dict[int, list[int]]  # token length -> example indices
    kwargs: dict[int, list[dict[str, Any]]]

    def chunks(self, index: Sequence[int], size: int) -> list[list[int]]:
        """``index`` cut into runs of equal length of at most ``size`` examples (by length, then order)."""
        by: dict[int, list[int]] = {}
        for i in index:
            by.setdefault(int(self.x0_c[i].shape[0]), []).append(int(i))
        return [v[s : s + size] for _, v in sorted(by.items()) for s in range(0, len(v), size)]


def prepare(
    loaded: LoadedModel, examples: Sequence[Example], model: SplitModel | None = None
) -> Prepared:
    from workers.analyses.causal.views import token_id

    model = model or SplitModel(loaded)
    x0_c, x0_k, groups, kwargs = [], [], {}, {}
    for i, ex in enumerate(examples):
        c, k = encode(loaded, ex.clean), encode(loaded, ex.corrupted)
        if c.n != k.n:
            raise HeadscopeError(
                f"example {i + 1}: the clean text has {c.n} tokens and the corrupted text {k.n}"
            )
        xc, kw = model.capture(c)
        xk, _ = model.capture(k)
        x0_c.append(xc)
        x0_k.append(xk)
        groups.setdefault(c.n, []).append(i)
        kwargs.setdefault(c.n, kw)
    answer = [token_id(loaded, ex.answer) for ex in examples]
    wrong = [token_id(loaded, ex.wrong) for ex in examples]
    return Prepared(model, x0_c, x0_k, answer, wrong, groups, kwargs)


def _metric(logits: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    rows = torch.arange(logits.shape[0], device=logits.device)
    return logits[rows, a] - logits[rows, b]


def _ids(p: Prepared, idx: Sequence[int], which: list[int]) -> torch.Tensor:
    return torch.as_tensor([which[i] for i in idx], device=p.x0_c[0].device)


@torch.no_grad()
def plain_runs(p: Prepared, idx: Sequence[int]) -> tuple[Plain, Plain]:
    """The corrupted and the clean runs of examples ``idx`` (one length), each a batch of rows."""
    n = p.x0_c[idx[0]].shape[0]
    x0 = torch.stack([p.x0_k[i] for i in idx] + [p.x0_c[i] for i in idx])
    run = p.model.plain(x0, p.kwargs[n])
    B = len(idx)
    parts = (run.writers, run.resid, run.mid, run.logits)
    return Plain(*(t[:B] for t in parts)), Plain(*(t[B:] for t in parts))


def metrics(p: Prepared, index: Sequence[int], rows: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """``m_e`` of the clean and of the corrupted run of every example of ``index`` (in that order)."""
    out: dict[int, tuple[float, float]] = {}
    for idx in p.chunks(index, rows):
        k, c = plain_runs(p, idx)
        a, b = _ids(p, idx, p.answer), _ids(p, idx, p.wrong)
        mc, mk = _metric(c.logits, a, b).double(), _metric(k.logits, a, b).double()
        for j, i in enumerate(idx):
            out[i] = (float(mc[j]), float(mk[j]))
    return np.asarray([out[i][0] for i in index]), np.asarray([out[i][1] for i in index])


def example_scores(
    p: Prepared,
    index: Sequence[int],
    *,
    steps: int,
    progress: Progress = no_progress,
    should_stop: Stop = None,
) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """Per-example raw scores [len(index), n_edges] (float64; EAP-IG over ``steps``, not divided by any
    difference) with ``m_C`` and ``m_K`` of each example. Rows ``example x step`` of one length run as
    one batch (as many as ``edge_rows`` allows); the hooks add each row's score to its example's."""
    g = p.model.graph
    facts = ModelFacts.of(p.model.loaded)
    where = {int(i): j for j, i in enumerate(index)}
    dev = p.x0_c[0].device
    scores = torch.zeros(len(index), g.n_edges, dtype=torch.float64, device=dev)
    sh, sf, sl = g.blocks(scores)
    m_c, m_k = np.zeros(len(index)), np.zeros(len(index))
    done = 0
    for idx in p.chunks(index, 8):
        n = p.x0_c[idx[0]].shape[0]
        k, c = plain_runs(p, idx)
        a, b = _ids(p, idx, p.answer), _ids(p, idx, p.wrong)
        for j, i in enumerate(idx):
            m_c[where[i]] = float(_metric(c.logits, a, b)[j])
            m_k[where[i]] = float(_metric(k.logits, a, b)[j])
        delta = c.writers - k.writers  # [E, W, n, d]
        rows = [(e, s) for e in range(len(idx)) for s in range(steps)]
        per = max(1, edge_rows(facts, n)[0])
        for start in range(0, len(rows), per):
            if should_stop is not None and should_stop():
                raise CancelledError("circuits on a set")
            part = rows[start : start + per]
            ex = torch.as_tensor([e for e, _ in part], device=dev)
            # an example's steps share its delta: their gradients are summed before the product
            ue, inv = torch.unique(ex, return_inverse=True)
            dst = torch.as_tensor([where[idx[e]] for e in ue.tolist()], device=dev)
            alpha = torch.as_tensor([s / steps for _, s in part], dtype=delta.dtype, device=dev)
            x0k = torch.stack([p.x0_k[idx[e]] for e, _ in part])
            x0c = torch.stack([p.x0_c[idx[e]] for e, _ in part])
            x0 = (x0k + alpha[:, None, None] * (x0c - x0k)).requires_grad_(True)
            flat = delta[ue].reshape(len(ue), delta.shape[1], -1)  # [U, W, n*d]

            def hook(
                kind: str,
                layer: int,
                grad: torch.Tensor,
                flat: Any = flat,
                dst: Any = dst,
                inv: Any = inv,
                n: int = n,
            ) -> None:
                U = flat.shape[0]
                grad = grad.new_zeros(U, *grad.shape[1:]).index_add_(0, inv, grad)
                if kind == "heads":  # [U, 3, H, n, d]
                    up = g.up_heads(layer)
                    got = torch.bmm(
                        grad.reshape(U, 3 * g.n_heads, -1), flat[:, :up].transpose(1, 2)
                    )
                    sh[layer].index_add_(0, dst, got.reshape(U, 3, g.n_heads, up).double())
                elif kind == "ff":  # [U, n, d]
                    up = g.up_ff(layer)
                    got = torch.bmm(flat[:, :up], grad.reshape(U, -1, 1))[..., 0]
                    sf[layer].index_add_(0, dst, got.double())
                else:  # [U, d] at the last position
                    last = flat.reshape(U, flat.shape[1], n, -1)[:, :, -1]
                    sl.index_add_(0, dst, torch.bmm(last, grad[..., None])[..., 0].double())

            with torch.enable_grad(), frozen(p.model.loaded.model):
                run = p.model.plain(x0, p.kwargs[n], hooks=hook)
                m = _metric(run.logits, a[ex], b[ex])
                torch.autograd.grad(m.sum(), [x0])
            at = done + len(idx) * min(len(rows), start + per) / len(rows)
            progress(at / len(index), f"scores: examples {done + 1}-{done + len(idx)} of {len(index)}, "
                     f"{min(len(rows), start + per)}/{len(rows)} gradient rows")  # fmt: skip
        done += len(idx)
        progress(done / len(index), f"scores: {done}/{len(index)} examples")
    return scores / steps, m_c, m_k


def set_scores(
    raw: torch.Tensor, m_c: np.ndarray, m_k: np.ndarray, weights: np.ndarray | None = None
) -> np.ndarray:
    """The set's scores [n_edges]: the (weighted) sum of per-example scores over the (weighted) sum of
    ``m_C - m_K`` (SPEC 14: the mean over the mean difference)."""
    w = np.ones(len(m_c)) if weights is None else np.asarray(weights, dtype=np.float64)
    diff = float(w @ (m_c - m_k))
    if diff == 0:
        raise HeadscopeError(
            "the metric is the same on the clean and the corrupted texts: nothing to restore"
        )
    out = torch.as_tensor(w, dtype=raw.dtype, device=raw.device) @ raw
    return np.asarray(out.cpu().numpy() / diff, dtype=np.float64)


def size_of(k: float, n_edges: int) -> int:
    """MIB's circuit size: the ceiling of ``k`` times the edge count (at least 1)."""
    return max(1, min(n_edges, math.ceil(k * n_edges - 1e-9)))


def top_masks(order: np.ndarray, sizes: Sequence[int], n_edges: int) -> np.ndarray:
    """Masks [len(sizes), n_edges] (bool) of the first ``size`` edges of ``order``."""
    masks = np.zeros((len(sizes), n_edges), dtype=bool)
    for r, s in enumerate(sizes):
        masks[r, order[:s]] = True
    return masks


@torch.no_grad()
def patched_metrics(
    p: Prepared,
    index: Sequence[int],
    masks: np.ndarray,
    *,
    progress: Progress = no_progress,
    should_stop: Stop = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``m_e`` of every example of ``index`` in the edge-patched run of every mask row: [rows,
    examples]; with each example's clean and corrupted ``m_e``. Only what can move the logits runs
    (``patch_plan``): a circuit pruned to nothing is the corrupted run, every edge the clean run."""
    g = p.model.graph
    assert g.n_edges == masks.shape[1]
    facts = ModelFacts.of(p.model.loaded)
    dtype = p.x0_c[0].dtype
    dev = p.x0_c[0].device
    coupled = any(part.post_attn is not None for part in p.model.parts)
    how = plan(g, np.asarray(masks, dtype=bool), coupled)
    mask_t = torch.as_tensor(how.masks, dtype=dtype, device=dev)
    active_t = torch.as_tensor(how.active, device=dev)
    last_t = torch.as_tensor(how.last, device=dev)
    todo = [int(r) for r in how.order if not (how.empty[r] or how.full[r])]
    out = np.zeros((masks.shape[0], len(index)))
    m_c, m_k = np.zeros(len(index)), np.zeros(len(index))
    where = {int(i): j for j, i in enumerate(index)}
    done = 0
    work: dict[str, torch.Tensor] = {}  # the evaluation's large arrays, reused (patch_plan.buffer)
    for idx in p.chunks(index, 8):
        n = p.x0_c[idx[0]].shape[0]
        k, c = plain_runs(p, idx)
        a, b = _ids(p, idx, p.answer), _ids(p, idx, p.wrong)
        mc, mk = _metric(c.logits, a, b), _metric(k.logits, a, b)
        per = max(1, edge_rows(facts, n)[2])
        for j, i in enumerate(idx):
            col = where[i]
            m_c[col], m_k[col] = float(mc[j]), float(mk[j])
            out[how.empty, col], out[how.full, col] = m_k[col], m_c[col]
            base = Plain(*(t[j : j + 1] for t in (k.writers, k.resid, k.mid, k.logits)))
            for start in range(0, len(todo), per):
                if should_stop is not None and should_stop():
                    raise CancelledError("circuits on a set")
                rows = torch.as_tensor(todo[start : start + per], device=dev)
                logits = patched_sparse(
                    p.model,
                    base,
                    p.x0_c[i],
                    mask_t[rows],
                    active_t[rows],
                    p.kwargs[n],
                    ids=[p.answer[i], p.wrong[i]],
                    last=last_t[rows],
                    work=work,
                )
                got = logits[:, 0] - logits[:, 1]
                out[todo[start : start + per], col] = got.double().cpu().numpy()
            done += 1
            progress(
                done / len(index),
                f"evaluation: {done}/{len(index)} examples, {masks.shape[0]} circuits each",
            )
    return out, m_c, m_k


def faithfulness(patched: np.ndarray, m_c: np.ndarray, m_k: np.ndarray) -> np.ndarray:
    """``(M(circuit) - M(empty)) / (M(full) - M(empty))`` per mask row, M the mean over examples."""
    full, empty = float(m_c.mean()), float(m_k.mean())
    if full == empty:
        raise HeadscopeError(
            "the held-out examples' clean and corrupted metrics have the same mean"
        )
    return np.asarray((patched.mean(axis=1) - empty) / (full - empty), dtype=np.float64)


def area(ks: Sequence[float], fs: Sequence[float]) -> float:
    """The trapezoid sum ``sum (k_{i+1} - k_i)(f_i + f_{i+1})/2`` over consecutive sizes."""
    k, f = np.asarray(ks, dtype=np.float64), np.asarray(fs, dtype=np.float64)
    return float(np.sum(np.diff(k) * (f[1:] + f[:-1]) / 2))


def cpr(ks: Sequence[float], fs: Sequence[float]) -> float:
    """MIB's CPR: the area under the faithfulness curve (edges ranked by signed score; higher is better)."""
    return area(ks, fs)


def cmd(ks: Sequence[float], fs: Sequence[float]) -> float:
    """MIB's CMD: the area of ``|1 - f|`` (edges ranked by |score|; nearer 0 is better)."""
    return area(ks, np.abs(1 - np.asarray(fs, dtype=np.float64)))


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    sa, sb = set(a.tolist()), set(b.tolist())
    return len(sa & sb) / max(1, len(sa | sb))


def stability(
    raw: torch.Tensor,
    m_c: np.ndarray,
    m_k: np.ndarray,
    sizes: Sequence[int],
    *,
    resamples: int,
    seed: int,
) -> list[tuple[float, float]]:
    """Per size: the mean and sd over ``resamples`` bootstrap resamples of the discovery examples (with
    replacement, as weights on the per-example scores) of the Jaccard of the resample's top-|score|
    circuit with the full set's."""
    n = raw.shape[0]
    full = np.argsort(-np.abs(set_scores(raw, m_c, m_k)), kind="stable")
    rng = np.random.default_rng(seed)
    got = np.zeros((resamples, len(sizes)))
    for b in range(resamples):
        w = rng.multinomial(n, np.full(n, 1.0 / n)).astype(np.float64)
        order = np.argsort(-np.abs(set_scores(raw, m_c, m_k, w)), kind="stable")
        got[b] = [jaccard(full[:s], order[:s]) for s in sizes]
    sd = got.std(axis=0, ddof=1) if resamples > 1 else np.zeros(len(sizes))
    return [(float(m), float(s)) for m, s in zip(got.mean(axis=0), sd, strict=True)]
