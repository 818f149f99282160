"""Head similarity over word-level maps (docs/compare.md): for every head g of model A and h of
model B, the sum over (text, query word) of ``1 − JSD(W_g[u, ·], W_h[u, ·])`` in bits.

The pairwise part is the mixture's entropy. With ``p``, ``q`` the rows (renormalised over the words
visible to both), ``m = (p + q) / 2`` and ``H`` the entropy in bits, summed over counted rows r::

    Σ_r (1 − JSD_r) = R + Σ_e m_e log2 m_e + ½ Σ_r H(p_r) + ½ Σ_r H(q_r)
    Σ_e m_e log2 m_e = Σ_e (p_e + q_e) ln(p_e + q_e) / (2 ln 2) − ½ (Σ_e p_e + Σ_e q_e)

where e runs over every visible (row, key word) entry of every text. So each text only adds its
visible entries as columns of two flat matrices (``p`` [heads of A, entries], ``q`` [heads of B,
entries]); the one pairwise term, ``Σ_e x ln x`` of ``x = p[g, e] + q[h, e]``, is computed over
blocks of entries gathered across texts, in blocks small enough to stay in cache. No padding to the
longest text, and a decoder's invisible upper triangle is never touched. Notebook use::

    acc = SimilarityAccumulator(72, 270)
    acc.add(maps_a, maps_b, valid=valid, causal=True)     # per text: [heads, words, words] each
    acc.sums() / acc.rows                                  # [72, 270] mean similarity
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

LN2 = math.log(2.0)
TINY = 1e-30  # x ln x of an entry both heads give no weight: 0 (TINY ln TINY ~ 7e-29)
BLOCK_ELEMENTS = 2**19  # one [heads of A block, heads of B, entries block] float32 temporary: 2 MiB
ENTRY_BLOCK = 256  # entries per block
FLUSH_ENTRIES = 2048  # entries gathered across texts before the pairwise term runs


def visible(valid: np.ndarray, *, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """(counted query words [R], visibility [R, words]) of one text: the words both models reached,
    at or before the query word when ``causal``; query words that see fewer than two are not counted."""
    u = valid.shape[0]
    vis = valid[:, None] & valid[None, :]
    if causal:
        vis &= np.tril(np.ones((u, u), dtype=bool))
    rows = np.flatnonzero(valid & (vis.sum(axis=1) >= 2))
    return rows, vis[rows]


def entries(w: np.ndarray, rows: np.ndarray, vis: np.ndarray) -> torch.Tensor:
    """The visible entries of ``w`` [heads, words, words] at query words ``rows``, each row
    renormalised over its visible words (uniform when it has no mass there): [heads, entries]."""
    mask = torch.from_numpy(vis)  # [R, U]
    x = torch.from_numpy(np.ascontiguousarray(w[:, rows], dtype=np.float32))[:, mask]  # [heads, E]
    seg = torch.from_numpy(np.repeat(np.arange(rows.size), vis.sum(axis=1)))  # row of each entry
    total = torch.zeros(x.shape[0], rows.size).index_add_(1, seg, x)  # [heads, R]
    uniform = (1.0 / torch.from_numpy(vis.sum(axis=1).astype(np.float32)))[seg]  # [E]
    ok = (total > 0)[:, seg]
    return torch.where(ok, x / total.clamp(min=TINY)[:, seg], uniform.expand_as(x)).contiguous()


def _xlnx_sum(x: torch.Tensor) -> torch.Tensor:
    """Σ over the last axis of x ln x (x >= 0; 0 ln 0 = 0)."""
    return x.clamp_min(TINY).log_().mul_(x).sum(dim=-1)


@contextmanager
def one_torch_thread() -> Iterator[int]:
    """torch at one intra-op thread inside; yields the count it had. The pairwise blocks are small
    (2 MiB): OpenMP's barriers per block cost more than they gain, and on a loaded machine a waiting
    thread spins (measured: docs/compare.md, "Performance")."""
    had = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield had
    finally:
        torch.set_num_threads(had)


def pair_xlnx(p: torch.Tensor, q: torch.Tensor, *, threads: int = 1) -> torch.Tensor:
    """``Σ_e (p[g, e] + q[h, e]) ln(p[g, e] + q[h, e])`` for every g, h: [G, H] float64, in blocks of
    heads of A spread over ``threads`` Python threads, torch at one intra-op thread each (torch
    releases the GIL; each block is summed alone, so the result does not depend on ``threads``)."""
    step = max(1, BLOCK_ELEMENTS // max(1, q.shape[0] * ENTRY_BLOCK))

    def rows(g0: int) -> torch.Tensor:
        with torch.inference_mode():  # a thread of its own starts outside the caller's mode
            pg = p[g0 : g0 + step, None]  # [g, 1, E]
            out = torch.zeros(pg.shape[0], q.shape[0], dtype=torch.float64)
            for e0 in range(0, p.shape[1], ENTRY_BLOCK):
                x = pg[..., e0 : e0 + ENTRY_BLOCK] + q[None, :, e0 : e0 + ENTRY_BLOCK]  # [g, H, e]
                out += _xlnx_sum(x).double()
            return out

    starts = range(0, p.shape[0], step)
    with one_torch_thread():
        if threads <= 1 or len(starts) == 1:
            blocks = [rows(g0) for g0 in starts]
        else:
            with ThreadPoolExecutor(max_workers=min(threads, len(starts))) as pool:
                blocks = list(pool.map(rows, starts))
    return torch.cat(blocks) if blocks else torch.zeros(0, q.shape[0], dtype=torch.float64)


class SimilarityAccumulator:
    """Sums of ``1 − JSD`` (bits) of every head pair over texts added one at a time (``add``)."""

    def __init__(self, n_a: int, n_b: int, *, threads: int | None = None):
        self.n_a, self.n_b = n_a, n_b
        self.threads = threads or torch.get_num_threads()
        self.rows = 0  # counted (text, query word) pairs
        self._pair = torch.zeros(n_a, n_b, dtype=torch.float64)  # Σ_e x ln x, x = p + q
        self._side = [
            torch.zeros(n, dtype=torch.float64) for n in (n_a, n_b)
        ]  # Σ_e p ln p, Σ_e q ln q
        self._mass = [torch.zeros(n, dtype=torch.float64) for n in (n_a, n_b)]  # Σ_e p, Σ_e q
        self._held: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._n_held = 0

    def add(self, wa: np.ndarray, wb: np.ndarray, *, valid: np.ndarray, causal: bool) -> int:
        """Fold in one text: ``wa`` [heads of A, words, words], ``wb`` [heads of B, words, words];
        ``valid`` [words] the words both models reached; ``causal``: either model is a decoder.
        Returns the number of query words counted."""
        rows, vis = visible(valid, causal=causal)
        if rows.size == 0:
            return 0
        with one_torch_thread():  # small tensors: one thread (see one_torch_thread)
            p, q = entries(wa, rows, vis), entries(wb, rows, vis)
            for k, x in enumerate((p, q)):
                self._side[k] += _xlnx_sum(x).double()
                self._mass[k] += x.sum(dim=-1).double()
        self._held.append((p, q))
        self._n_held += p.shape[1]
        self.rows += int(rows.size)
        if self._n_held >= FLUSH_ENTRIES:
            self.flush()
        return int(rows.size)

    def flush(self) -> None:
        """Run the pairwise term over the entries held so far. The float32 blocks' sums depend on
        which entries are gathered together: a caller that flushes at fixed text boundaries (the
        comparison, at each window of texts) gets the same bits however its texts are split."""
        if not self._held:
            return
        p = torch.cat([h[0] for h in self._held], dim=1)
        q = torch.cat([h[1] for h in self._held], dim=1)
        self._held, self._n_held = [], 0
        self._pair += pair_xlnx(p, q, threads=self.threads)

    def state(self) -> dict[str, Any]:
        """The float64 sums so far (flushed), JSON-ready: what a part of a split comparison keeps."""
        self.flush()
        return {
            "rows": self.rows,
            "pair": self._pair.tolist(),
            "side": [x.tolist() for x in self._side],
            "mass": [x.tolist() for x in self._mass],
        }

    def add_state(self, state: dict[str, Any]) -> None:
        """Add another accumulator's ``state()`` (float64; added in the caller's order)."""
        self.flush()
        self.rows += int(state["rows"])
        self._pair += torch.tensor(state["pair"], dtype=torch.float64).reshape(self.n_a, self.n_b)
        for k in range(2):
            self._side[k] += torch.tensor(state["side"][k], dtype=torch.float64)
            self._mass[k] += torch.tensor(state["mass"][k], dtype=torch.float64)

    def sums(self) -> np.ndarray:
        """[heads of A, heads of B]: Σ over counted rows of ``1 − JSD`` (each term within [0, 1])."""
        self.flush()
        (sp, sq), (mp, mq) = self._side, self._mass
        mix = self._pair / (2 * LN2) - 0.5 * (mp[:, None] + mq[None])  # Σ_e m log2 m
        out = (
            self.rows + mix - (sp[:, None] + sq[None]) / (2 * LN2)
        )  # + ½ Σ_r H(p_r) + ½ Σ_r H(q_r)
        return out.clamp(0.0, float(self.rows)).numpy()


def similarity_sums(
    wa: np.ndarray, wb: np.ndarray, *, valid: np.ndarray, causal: bool
) -> tuple[np.ndarray, int]:
    """Summed ``1 − JSD`` (bits) over the query words of one text, for every pair of heads:
    ([heads of A, heads of B] sums, the number of query words counted)."""
    acc = SimilarityAccumulator(wa.shape[0], wb.shape[0])
    n = acc.add(wa, wb, valid=valid, causal=causal)
    return acc.sums(), n
