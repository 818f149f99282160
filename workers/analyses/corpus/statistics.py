"""Per-head statistics of one layer's attention over a padded batch (docs/corpus.md).

The pure part of the corpus analysis: given one layer's maps ``[batch, head, query, key]`` and which
positions of each text are kept, the per-text sums and counts of every statistic, the per-head top
(query, key) pairs, and the histograms of per-text means. ``workers.analyses.corpus.run`` runs the texts
and calls ``LayerAccumulator.update`` from the attention hook, so no map outlives its layer.

Kept tokens: every real token, or every non-special one (``keep_special=False``). Statistics are
over the kept sequence: with specials dropped, each query's weights over its kept visible keys are
renormalised to sum to 1, and "previous", "first" and distances count kept positions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

STATISTICS: tuple[str, ...] = (
    "entropy",
    "entropy_normalised",
    "sink",
    "previous",
    "self",
    "distance",
    "induction",
    "duplicate",
)
HIST_BINS = 20


def hist_range(stat: str, *, max_tokens: int) -> tuple[float, float]:
    """The fixed range of a statistic's histogram of per-text means."""
    if stat == "entropy":
        return 0.0, math.log(max(2, max_tokens))
    if stat == "distance":
        return 0.0, float(max(1, max_tokens - 1))
    return 0.0, 1.0


def repeat_keys(ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """For each position i: the most recent earlier copy p < i - 1 of token ``ids[i]`` (``dup``) and
    the position after it, p + 1 (``ind``); -1 where there is none. ``[1, 2, 1, 2]`` -> dup ``[-1, -1,
    0, 1]``, ind ``[-1, -1, 1, 2]``."""
    n = len(ids)
    dup = np.full(n, -1, dtype=np.int64)
    last: dict[int, int] = {}
    for i in range(n):
        if i >= 2:
            last[ids[i - 2]] = i - 2
        p = last.get(ids[i])
        if p is not None:
            dup[i] = p
    ind = np.where(dup >= 0, dup + 1, -1)
    return dup, ind


@dataclass
class KeptBatch:
    """Where each text's kept tokens sit in a padded batch, and its repeated-token keys.

    Shapes: ``idx``, ``valid``, ``dup``, ``ind`` [batch, kept] (kept: the longest kept sequence);
    ``text_ids`` [batch] (each row's index in the corpus). ``offset``: every row keeps a contiguous
    run of positions starting there (specials only at the ends, the usual case), so the kept maps
    are a slice of the batch's maps; None: they are gathered.
    """

    idx: torch.Tensor  # positions in the padded row (0 where not valid)
    valid: torch.Tensor  # bool
    dup: torch.Tensor  # kept index of the earlier copy, -1 none
    ind: torch.Tensor  # kept index after the earlier copy, -1 none
    text_ids: torch.Tensor
    offset: int | None
    dropped: bool  # some real token of some row is not kept: rows are renormalised over kept keys

    @classmethod
    def build(
        cls,
        ids: list[list[int]],
        keep: list[list[bool]],
        text_ids: list[int],
        *,
        device: torch.device,
    ) -> KeptBatch:
        kept_pos = [[p for p, k in enumerate(row) if k] for row in keep]
        m = max(1, max(len(p) for p in kept_pos))
        idx = np.zeros((len(ids), m), dtype=np.int64)
        valid = np.zeros((len(ids), m), dtype=bool)
        dup = np.full((len(ids), m), -1, dtype=np.int64)
        ind = np.full((len(ids), m), -1, dtype=np.int64)
        for b, pos in enumerate(kept_pos):
            idx[b, : len(pos)] = pos
            valid[b, : len(pos)] = True
            d, i = repeat_keys([ids[b][p] for p in pos])
            dup[b, : len(pos)], ind[b, : len(pos)] = d, i
        starts = {p[0] for p in kept_pos if p}
        contiguous = all(p == list(range(p[0], p[0] + len(p))) for p in kept_pos if p)
        offset = next(iter(starts)) if contiguous and len(starts) == 1 else None
        dropped = any(not all(row) for row in keep)
        t = lambda a: torch.as_tensor(a, device=device)  # noqa: E731
        return cls(
            t(idx),
            t(valid),
            t(dup),
            t(ind),
            t(np.asarray(text_ids, dtype=np.int64)),
            offset,
            dropped,
        )

    def n_keys(self, *, causal: bool) -> torch.Tensor:
        """[batch, query]: how many kept keys each kept query sees (0 for padding)."""
        n = self.valid.sum(1, keepdim=True)
        if causal:
            n = torch.minimum(n, torch.arange(1, self.valid.shape[1] + 1, device=n.device)[None])
        return torch.where(self.valid, n, 0)


def kept_maps(weights: torch.Tensor, kept: KeptBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The maps over kept tokens ``[batch, head, kept, kept]``, zero at keys that are not kept, and
    each row's total over its kept keys [batch, head, kept] (None: nothing dropped, rows sum to 1).

    Weights at padding and at future keys of a decoder are exactly zero already (the mask adds the
    dtype's minimum), so only dropped special tokens need masking.
    """
    b, h, _, _ = weights.shape
    m = kept.idx.shape[1]
    if kept.offset is not None:
        a = weights[:, :, kept.offset : kept.offset + m, kept.offset : kept.offset + m]
    else:
        rows = kept.idx[:, None, :, None].expand(b, h, m, weights.shape[3])
        a = weights.gather(2, rows).gather(3, kept.idx[:, None, None, :].expand(b, h, m, m))
    if not kept.dropped:
        return a, None
    a = a * kept.valid[:, None, None, :].to(a.dtype)
    return a, a.sum(-1)


def query_statistics(
    a: torch.Tensor, total: torch.Tensor | None, kept: KeptBatch, *, causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every statistic of every query, from ``kept_maps``' maps and row totals (each value is of the
    row renormalised to sum to 1): values [statistic, batch, head, kept query] in ``STATISTICS``
    order, and the queries each applies to [statistic, batch, kept query]."""
    m = a.shape[-1]
    valid = kept.valid
    pos = torch.arange(m, device=a.device)
    tiny = torch.finfo(a.dtype).tiny
    prev = a.new_zeros(a.shape[:3])
    prev[..., 1:] = torch.diagonal(a, offset=-1, dim1=2, dim2=3)
    if causal:  # keys j <= i: sum_j a_ij (i - j) = i * sum_j a_ij - sum_j a_ij j
        row = a.new_ones(a.shape[:3]) if total is None else total
        dist = pos.to(a.dtype) * row - torch.matmul(a, pos.to(a.dtype)[:, None])[..., 0]
    else:
        dist = (a * (pos[:, None] - pos[None, :]).abs().to(a.dtype)).sum(-1)
    shape = (a.shape[0], a.shape[1], m, 1)
    ind = a.gather(3, kept.ind.clamp_min(0)[:, None, :, None].expand(shape))[..., 0]
    dup = a.gather(3, kept.dup.clamp_min(0)[:, None, :, None].expand(shape))[..., 0]
    linear = torch.stack([a[..., 0], prev, torch.diagonal(a, dim1=2, dim2=3), dist, ind, dup])
    ent = -torch.special.xlogy(a, a).sum(-1)
    if total is not None:  # -sum (a/t) ln(a/t) = -(1/t) sum a ln a + ln t
        inv = 1.0 / total.clamp_min(tiny)
        linear = linear * inv
        ent = ent * inv + torch.log(total.clamp_min(tiny))
    n_keys = kept.n_keys(causal=causal)
    ent_norm = ent / torch.log(n_keys.clamp_min(2).to(a.dtype))[:, None]
    values = torch.cat([ent[None], ent_norm[None], linear])  # STATISTICS order
    later = valid & (pos >= 1)[None]
    applies = torch.stack(
        [
            valid,
            n_keys >= 2,
            later,
            later,
            valid,
            valid,
            valid & (kept.ind >= 0),
            valid & (kept.dup >= 0),
        ]
    )
    return values, applies


class LayerAccumulator:
    """Sums, counts, histograms and top pairs of every head of every layer, over batches.

    Totals are float64 on the CPU: ``sums[stat]`` [layer, head], ``counts[stat]`` [layer] (the same
    queries for every head), ``hist[stat]`` [layer, head, bin]; top pairs [layer, head, k] as
    weights and (text, query position, key position).
    """

    def __init__(
        self,
        *,
        n_layers: int,
        n_heads: int,
        statistics: tuple[str, ...],
        causal: bool,
        max_tokens: int,
        top_k: int = 20,
        exclude_sink_self: bool = True,
    ):
        self.statistics = statistics
        self.causal = causal
        self.max_tokens = max_tokens
        self.top_k = top_k
        self.exclude_sink_self = exclude_sink_self
        self.sums = {s: np.zeros((n_layers, n_heads)) for s in statistics}
        self.counts = {s: np.zeros(n_layers, dtype=np.int64) for s in statistics}
        self.hist = {
            s: np.zeros((n_layers, n_heads, HIST_BINS), dtype=np.int64) for s in statistics
        }
        self.top_w = np.full((n_layers, n_heads, top_k), -1.0)
        self.top_at = np.full((n_layers, n_heads, top_k, 3), -1, dtype=np.int64)  # text, query, key
        self.kept: KeptBatch | None = None

    def update(self, layer: int, weights: torch.Tensor) -> None:
        """Fold one layer's maps [batch, head, query, key] of the current batch (``self.kept``) in."""
        kept = self.kept
        assert kept is not None, "set .kept to the batch's KeptBatch before the forward"
        a, total = kept_maps(weights.detach(), kept)
        values, applies = query_statistics(a, total, kept, causal=self.causal)
        pick = [STATISTICS.index(s) for s in self.statistics]
        values, applies = values[pick], applies[pick]
        text_sum = (
            (values * applies[:, :, None].to(values.dtype)).sum(-1).double().cpu().numpy()
        )  # [stat, batch, head]
        text_n = applies.sum(-1).cpu().numpy()  # [stat, batch]
        for si, stat in enumerate(self.statistics):
            self.sums[stat][layer] += text_sum[si].sum(0)
            self.counts[stat][layer] += int(text_n[si].sum())
            self._histogram(stat, layer, text_sum[si], text_n[si])
        if self.top_k:
            self._top_pairs(layer, a, total, kept)

    def _histogram(self, stat: str, layer: int, text_sum: np.ndarray, text_n: np.ndarray) -> None:
        has = text_n > 0
        if not has.any():
            return
        means = text_sum[has] / text_n[has, None]  # [text, head]
        lo, hi = hist_range(stat, max_tokens=self.max_tokens)
        bins = np.clip(((means - lo) / (hi - lo) * HIST_BINS).astype(np.int64), 0, HIST_BINS - 1)
        n_heads = bins.shape[1]
        flat = (np.arange(n_heads)[None] * HIST_BINS + bins).reshape(-1)
        self.hist[stat][layer] += np.bincount(flat, minlength=n_heads * HIST_BINS).reshape(
            n_heads, HIST_BINS
        )

    def _top_pairs(
        self, layer: int, a: torch.Tensor, total: torch.Tensor | None, kept: KeptBatch
    ) -> None:
        b, h, m, _ = a.shape
        n_keys = kept.n_keys(causal=self.causal)
        # a query with one key says nothing (its weight is 1); padding rows are not queries
        scale = (n_keys >= 2).to(a.dtype)[:, None].expand(b, h, m)
        if total is not None:
            scale = scale / total.clamp_min(torch.finfo(a.dtype).tiny)
        score = a * scale[..., None]  # [batch, head, query, key]
        if self.exclude_sink_self:
            score.diagonal(dim1=2, dim2=3).zero_()
            score[..., 0] = 0.0
        k = min(self.top_k, m * m)
        w, where = score.reshape(b, h, m * m).topk(k, dim=2)  # per text, then across texts
        w, where = w.permute(1, 0, 2).reshape(h, b * k), where.permute(1, 0, 2).reshape(h, b * k)
        row = torch.arange(b, device=a.device).repeat_interleave(k)[None].expand(h, b * k)
        k2 = min(self.top_k, b * k)
        w, pick = w.topk(k2, dim=1)
        where, row = where.gather(1, pick).cpu().numpy(), row.gather(1, pick).cpu().numpy()
        w = w.double().cpu().numpy()
        qi, ki = where // m, where % m
        idx = kept.idx.cpu().numpy()
        at = np.stack([kept.text_ids.cpu().numpy()[row], idx[row, qi], idx[row, ki]], axis=-1)
        all_w = np.concatenate([self.top_w[layer], np.where(w > 0, w, -1.0)], axis=1)
        all_at = np.concatenate([self.top_at[layer], at], axis=1)
        for head in range(h):  # weight descending, then text, query, key ascending
            order = np.lexsort(
                (all_at[head, :, 2], all_at[head, :, 1], all_at[head, :, 0], -all_w[head])
            )
            keep = order[: self.top_k]
            self.top_w[layer, head] = all_w[head, keep]
            self.top_at[layer, head] = all_at[head, keep]

    def means(self) -> dict[str, np.ndarray]:
        """Each statistic's mean over its queries, [layer, head] (NaN where it applies to none)."""
        out = {}
        for stat in self.statistics:
            n = self.counts[stat][:, None].astype(np.float64)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[stat] = np.where(n > 0, self.sums[stat] / np.maximum(n, 1), np.nan)
        return out
