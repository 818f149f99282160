"""Many circuits' edge-patched runs of one example, computing only what can move the logits
(docs/circuits.md, "Circuits on a task data set", the evaluation's cost).

``SplitModel.patched`` gives every reader the input ``x_v^K + sum over in-circuit edges u -> v of
(u* - u_K)`` and recomputes every node. Two exact facts make most of that unnecessary:

- a node whose in-circuit incoming edges all come from nodes that did not change reads exactly the
  corrupted run's inputs, so its output is the corrupted run's (its change ``u* - u_K`` is zero);
- a node from which no in-circuit path leads to the logits cannot move them.

So a circuit gives the same logits as its edges on a path from the input to the logits
(``edges.prune``); only those edges' targets (the **active** nodes) run, each reader's mix sums the
changes of the active writers only (a sparse mix: few columns for a small circuit), and a layer runs
only for the rows (circuits) with an active node in it. A circuit with no such path is the corrupted
run itself and every edge is the clean run: neither runs. Rows are sorted by their count of active
nodes so a batch holds circuits of like cost.

More exact savings: the attention norm's gain is folded into the q/k/v weights (``Fold``), so the 3H
copies of a reader's input are multiplied once and scaled per position after (no normed copies);
each reader's input is written in one pass (the corrupted stream plus the mix); nothing runs before
the first position where the clean input differs, every change being zero there in a causal model
(the heads take the corrupted run's q/k/v at those positions); the changes' array is not
zero-filled (each node's slot is written once, zero where the node does not run); a copy whose mix
is empty (no in-circuit edge into that q, k or v) takes the corrupted run's projection, computed
once per layer, instead of its own; a feed-forward with no in-circuit path to the logits through a
key or value runs at the last position only (``last_only``); and the logits are computed for the
metric's two tokens only.

And what is not arithmetic: a layer's heads and its feed-forward take one mix over the writers below
the layer (one pass over the changes instead of two; the feed-forward adds its own layer's heads'
changes after), the changes are written in place run by run of rows (``spans``), and the large
arrays are buffers reused from call to call (``buffer``), not pages mapped and zeroed anew; the
sparse mix adds its product into the buffer holding the base (no temporary product).
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from workers.analyses.circuits.graph import Graph, Parts, Plain, SplitModel
from workers.analyses.circuits.patch_work import buffer, spans
from workers.models.precision import norm_gain

DENSE = 0.1  # above this share of in-circuit edges a row's mix is a dense product (measured)


@dataclass
class Plan:
    """Masks [R, n_edges] (bool) pruned to the edges on a path from the input to the logits, each row's
    active writers [R, n_writers] (the input always: it is the clean one), which rows are the corrupted
    run (no edge left) and which the clean run (every edge), an order of rows by cost, and which active
    writers reach the logits only at the last position ``last`` [R, n_writers] (``last_only``)."""

    masks: np.ndarray
    active: np.ndarray
    empty: np.ndarray
    full: np.ndarray
    order: np.ndarray
    last: np.ndarray


def last_only(
    graph: Graph, masks: np.ndarray, active: np.ndarray, coupled: bool = False
) -> np.ndarray:
    """Which ``active`` writers [R, n_writers] of the pruned circuits ``masks`` [R, n_edges] have no
    in-circuit path to the logits through a key or value: a query's, a feed-forward's and the logits'
    inputs at a position move only that position, so such a writer moves the logits (read at the last
    position) only through its own last position; its change elsewhere can be anything."""
    R, W, H = masks.shape[0], graph.n_writers, graph.n_heads
    heads, ffs, _, _ = graph.starts
    need = np.zeros((R, W), dtype=bool)  # reaches the logits through a key or value: every position
    for layer in range(graph.n_layers - 1, -1, -1):
        f, h0 = graph.ff(layer), graph.head(layer, 0)
        up_f, up_h = graph.up_ff(layer), graph.up_heads(layer)
        m_f = masks[:, ffs[layer] : ffs[layer] + up_f]
        need[:, :up_f] |= m_f & need[:, f : f + 1]
        m_h = masks[:, heads[layer] : ffs[layer]].reshape(R, 3, H, up_h)
        q_need = need[:, h0 : h0 + H]
        if coupled:  # the heads share a norm: one head's change at a position is all of theirs
            q_need = q_need | q_need.any(1, keepdims=True)
        need[:, :up_h] |= m_h[:, 1:].any((1, 2)) | (m_h[:, 0] & q_need[:, :, None]).any(1)
    return active & ~need


def paths(
    graph: Graph, src: np.ndarray, tgt: np.ndarray, coupled: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Over the nodes (writers, then the logits): which the input's change reaches through the edges
    ``src -> tgt``, and which reach the logits through them. ``coupled``: a layer's heads share their
    branch's norm (Gemma 2/3), so a change of one head changes them all."""
    nodes, H = graph.n_writers + 1, graph.n_heads
    reach = np.zeros(nodes, dtype=bool)
    reach[0] = True
    order = np.argsort(tgt, kind="stable")
    bounds = np.searchsorted(tgt[order], np.arange(nodes + 1))
    for v in range(1, nodes):
        seg = order[bounds[v] : bounds[v + 1]]
        reach[v] = bool(reach[src[seg]].any()) if len(seg) else False
        if coupled and v < graph.n_writers and (v - 1) % (H + 1) == H - 1:  # a layer's last head
            reach[v - H + 1 : v + 1] = reach[v - H + 1 : v + 1].any()
    back = np.zeros(nodes, dtype=bool)
    back[-1] = True
    order = np.argsort(src, kind="stable")
    bounds = np.searchsorted(src[order], np.arange(nodes + 1))
    for u in range(nodes - 2, -1, -1):
        seg = order[bounds[u] : bounds[u + 1]]
        back[u] = bool(back[tgt[seg]].any()) if len(seg) else False
        if coupled and u > 0 and (u - 1) % (H + 1) == 0:  # a layer's first head
            back[u : u + H] = back[u : u + H].any()
    return reach, back


def plan(graph: Graph, masks: np.ndarray, coupled: bool = False) -> Plan:
    """The plan of the circuits ``masks`` [R, n_edges] (bool); the same for every example.
    ``coupled``: the model's heads of a layer share a norm (``paths``)."""
    R, E = masks.shape
    pruned = np.zeros_like(masks, dtype=bool)
    active = np.zeros((R, graph.n_writers), dtype=bool)
    active[:, 0] = True
    for r in range(R):
        flat = np.flatnonzero(masks[r])
        if len(flat) == 0:
            continue
        src, tgt, _ = graph.edges_of(flat)
        reach, back = paths(graph, src, tgt, coupled)
        live = reach & back
        keep = reach[src] & live[tgt]
        pruned[r, flat[keep]] = True
        active[r] = live[:-1]
    full = masks.all(axis=1)
    empty = ~pruned.any(axis=1) & ~full
    order = np.argsort(active.sum(axis=1), kind="stable")
    return Plan(pruned, active, empty, full, order, last_only(graph, pruned, active, coupled))


@dataclass
class Fold:
    """A layer's q, k and v weights [3H, dh, d] with the attention norm's gain folded in, so the 3H
    copies of a reader's input need only their own scale (a number per position) after the product:
    ``w`` (gain * W), ``c`` (LayerNorm: ``w`` summed over d, the mean's term), ``b`` [3H, dh] (the
    projections' bias plus W times the norm's bias)."""

    w: torch.Tensor
    c: torch.Tensor | None
    b: torch.Tensor
    eps: float


def _fold(part: Parts) -> Fold:
    ln = part.ln_attn
    w = torch.cat([part.wq, part.wk, part.wv])
    b = torch.cat([part.bq, part.bk, part.bv])
    wg = w * norm_gain(ln) if getattr(ln, "weight", None) is not None else w
    if isinstance(ln, torch.nn.LayerNorm):
        if ln.bias is not None:
            b = b + torch.einsum("hed,d->he", w, ln.bias)
        return Fold(wg, wg.sum(-1), b, ln.eps)
    return Fold(wg, None, b, getattr(ln, "variance_epsilon", getattr(ln, "eps", 1e-6)))


_FOLDS: weakref.WeakKeyDictionary[SplitModel, list[Fold]] = weakref.WeakKeyDictionary()


def folds(model: SplitModel) -> list[Fold]:
    """Each layer's ``Fold`` of ``model`` (computed once)."""
    if model not in _FOLDS:
        with torch.inference_mode():
            _FOLDS[model] = [_fold(part) for part in model.parts]
    return _FOLDS[model]


def _project(f: Fold, x: torch.Tensor, at: torch.Tensor | slice) -> torch.Tensor:
    """The normed projections [P, n, dh] of copies ``x`` [P, n, d] read by readers ``at`` (of the 3H;
    all of them in order when a slice): one product over the un-normed copies, then a scale per
    position."""
    d = x.shape[-1]
    if f.c is not None:  # LayerNorm
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, unbiased=False, keepdim=True)
    else:
        var = torch.linalg.vector_norm(x, dim=-1, keepdim=True).square_().div_(d)
    if isinstance(at, slice):
        y = torch.bmm(x, f.w[at].transpose(1, 2))
    else:  # grouped by reader (``at`` ascending): one product per reader
        y = x.new_empty(*x.shape[:-1], f.w.shape[1])
        counts = torch.bincount(at, minlength=f.w.shape[0]).tolist()
        start = 0
        for j, c in enumerate(counts):
            if c:
                torch.matmul(x[start : start + c], f.w[j].T, out=y[start : start + c])
                start += c
    if f.c is not None:
        y = y - mean * f.c[at][:, None]
    return y * torch.rsqrt(var + f.eps) + f.b[at][:, None]


def qkv(
    f: Fold,
    xs: torch.Tensor,
    slots: torch.Tensor,
    live: torch.Tensor,
    base: torch.Tensor,
    work: dict[str, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, ...]:
    """q, k and v [B, n, H, dh] of the heads reading rows ``slots`` [B] of ``xs`` [*, K, n, d]
    (contiguous; a row's 3H copies first, K >= 3H), projecting only the ``live`` [B, 3H] (bool)
    copies; the others take ``base`` [3H, n, dh] (their mix is empty: their input is the corrupted
    run's, whose projections these are). ``work``: buffers reused between calls (``buffer``)."""
    B, k3 = live.shape
    K, n, d = xs.shape[1:]
    y = base.expand(B, -1, -1, -1).contiguous()
    j, r = torch.nonzero(live.T, as_tuple=True)  # by reader, then row
    got = buffer(work, "copies", len(j) * n * d, xs).view(len(j), n, d)
    torch.index_select(xs.view(-1, n, d), 0, slots[r] * K + j, out=got)
    y.view(B * k3, n, -1)[r * k3 + j] = _project(f, got, j)
    return tuple(y.view(B, 3, k3 // 3, n, -1).transpose(2, 3).unbind(1))


@torch.inference_mode()
def patched_sparse(
    model: SplitModel,
    base: Plain,
    x0: torch.Tensor,
    masks: torch.Tensor,
    active: torch.Tensor,
    kwargs: list[dict[str, Any]],
    *,
    ids: Sequence[int] | None = None,
    last: torch.Tensor | None = None,
    on_layer: Callable[[int], None] | None = None,
    work: dict[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Logits [R, vocabulary] at the last position of R edge-patched runs, as ``SplitModel.patched``
    gives them for ``masks`` [R, n_edges] (pruned, ``plan``), computing only the ``active`` [R,
    n_writers] (bool) nodes: ``base`` the corrupted run (one row), ``x0`` [n, d] the clean input.
    ``ids``: only those vocabulary entries [R, len(ids)] (the metric reads two). ``last`` [R,
    n_writers] (bool; ``Plan.last``): feed-forwards run only at the last position there. ``work``:
    the large arrays' buffers, reused from call to call (``buffer``; the caller's dict)."""
    g = model.graph
    R = masks.shape[0]
    Wn, N, d = base.writers.shape[1:]
    # the positions before the first where the clean input differs: every change is zero there (a
    # causal model), so mixes, feed-forwards and changes run from it on; the heads' keys and values
    # there are the corrupted run's
    differs = torch.nonzero((x0 != base.writers[0, 0]).any(-1))
    s0 = min(int(differs[0, 0]) if len(differs) else N - 1, N - 1)
    n = N - s0
    wk, rk, mk = base.writers[0, :, s0:], base.resid[0, :, s0:], base.mid[0, :, s0:]
    rk_all = base.resid[0]
    mh, mf, ml = g.blocks(masks.to(wk.dtype))
    on = active.to(wk.dtype)
    # every node's slot is written below (zero where it does not run)
    delta = buffer(work, "delta", R * Wn * n * d, wk).view(R, Wn, n, d)
    delta[:, 0] = x0[s0:] - wk[0]
    H = g.n_heads
    sparse = wk.dtype in (torch.float32, torch.float64)  # CSR products: no half kernels on CPU

    def mix(rows: torch.Tensor, m: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
        """The inputs [len(rows), k, n * d] of rows ``rows`` (ascending) of this layer's masks ``m`` [R,
        k, up]: ``base`` [k, n, d] (the corrupted run's) plus the mix over the changes, a dense product
        over the rows from the first with many in-circuit edges on (the rows go by cost: a slice, no
        copy; written straight into the result when every row from there runs here), a sparse one
        (each edge adding its source's change once) for the rows before it."""
        k, up = m.shape[1:]
        out = buffer(work, "mix", len(rows) * k * n * d, delta).view(len(rows), k, n * d)
        b = base.reshape(1, k, n * d)
        dense = (m[rows] != 0).sum((1, 2)) > DENSE * k * up
        if not sparse:
            dense[:] = True
        cut = int(rows[dense].min()) if dense.any() else R
        tail = rows >= cut  # a suffix of rows
        nt = int(tail.sum())
        lead = len(rows) - nt
        if nt:
            src = delta[cut:, :up].reshape(R - cut, up, n * d)
            if nt == R - cut:
                torch.baddbmm(b.expand(nt, k, n * d), m[cut:], src, out=out[lead:])
            else:
                every = buffer(work, "every", (R - cut) * k * n * d, delta).view(R - cut, k, n * d)
                torch.baddbmm(b.expand(R - cut, k, n * d), m[cut:], src, out=every)
                torch.index_select(every, 0, rows[tail] - cut, out=out[lead:])
        if lead:
            at = rows[:lead]
            r, j, u = torch.nonzero(m[at], as_tuple=True)
            where = torch.stack([r * k + j, at[r] * Wn + u])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # CSR is "beta"
                s = torch.sparse_coo_tensor(
                    where, m[at][r, j, u], (lead * k, R * Wn), check_invariants=False
                ).to_sparse_csr()
                out[:lead].copy_(b.expand(lead, k, n * d))
                out[:lead].view(lead * k, n * d).addmm_(s, flat)
        return out

    def put(
        rows: torch.Tensor,
        at: slice | int,
        value: torch.Tensor | None = None,
        minus: torch.Tensor | None = None,
        keep: torch.Tensor | None = None,
    ) -> None:
        """The changes ``value - minus`` (times ``keep``: which of the writers run) of rows ``rows``
        at writers ``at``; zero for the other rows. Each run of consecutive rows is written in place
        (one pass; the rows go by cost, so a layer's rows are mostly a few runs)."""
        where = spans(rows, R)
        if where is None:  # many runs: through a gathered copy
            off = torch.ones(R, dtype=torch.bool, device=delta.device)
            off[rows] = False
            delta[:, at].index_fill_(0, torch.nonzero(off)[:, 0], 0)
            if value is not None:
                value = value - minus
                if keep is not None:
                    value *= keep
                delta[:, at].index_copy_(0, rows, value)
            return
        runs, gaps = where
        for a, b in gaps:
            delta[a:b, at] = 0
        if value is None:
            return
        for i, a, b in runs:
            dst = delta[a:b, at]
            torch.sub(value[i : i + b - a], minus, out=dst)
            if keep is not None:
                dst *= keep[i : i + b - a]

    flat = delta.view(R * Wn, n * d)
    fold = folds(model)
    three = 3 * H
    for layer in range(g.n_layers):
        h0, f, up = g.head(layer, 0), g.ff(layer), g.up_heads(layer)
        on_h, on_f = active[:, h0 : h0 + H].any(1), active[:, f]
        rows = torch.nonzero(on_h | on_f)[:, 0]
        if not len(rows):
            put(rows, slice(h0, h0 + H))
            put(rows, f)
            if on_layer is not None:
                on_layer(layer)
            continue
        # one mix for the heads' 3H copies and the feed-forward's reading of the writers below the
        # layer (one pass over the changes, not two); the feed-forward adds its own layer's heads after
        m = mh[layer].reshape(R, three, up)
        both = torch.cat([m, mf[layer][:, None, :up]], 1)
        base_both = torch.cat([rk[layer].expand(three, n, d), mk[layer][None]])
        got_mix = mix(rows, both, base_both).view(len(rows), three + 1, n, d)
        slot = torch.full((R,), -1, dtype=torch.long, device=rows.device)
        slot[rows] = torch.arange(len(rows), device=rows.device)
        rows_h = torch.nonzero(on_h)[:, 0]
        if len(rows_h):
            # the corrupted run's projections at every position: the copies whose mix is empty
            # take them, and every copy before s0
            kept = _project(fold[layer], rk_all[layer].expand(three, N, d), slice(None))
            live = (m[rows_h] != 0).any(-1)
            got = qkv(fold[layer], got_mix, slot[rows_h], live, kept[:, s0:], work)
            if s0:
                pre = kept[:, :s0].reshape(1, 3, H, s0, -1).transpose(2, 3).unbind(1)
                got = tuple(
                    torch.cat([a.expand(len(rows_h), -1, -1, -1), b], 1)
                    for a, b in zip(pre, got, strict=True)
                )
            shape = got_mix.new_zeros(()).expand(len(rows_h), 3, H, N, d)
            w = model.heads(layer, shape, kwargs[layer], got)[:, :, s0:]  # [rows, H, n, d]
            keep = on[rows_h, h0 : h0 + H]
            put(
                rows_h,
                slice(h0, h0 + H),
                w,
                wk[h0 : h0 + H],
                None if bool(keep.all()) else keep[..., None, None],
            )
        else:
            put(rows_h, slice(h0, h0 + H))
        rows_f = torch.nonzero(on_f)[:, 0]
        if len(rows_f):
            x_ff = got_mix[:, three] if len(rows_f) == len(rows) else got_mix[slot[rows_f], three]
            if not g.parallel:  # its own layer's heads' changes
                hs = delta[rows_f, h0 : h0 + H].reshape(len(rows_f), H, n * d)
                x_ff.view(len(rows_f), 1, n * d).baddbmm_(mf[layer][rows_f, None, up : up + H], hs)
            one = None if last is None or n == 1 else last[rows_f, f]
            if one is None or not bool(one.any()):
                put(rows_f, f, model.ff(layer, x_ff), wk[f])
            else:  # only the last position moves the logits: the change is zero before it
                y = wk[f].expand(len(rows_f), n, d).clone()
                y[one, -1:] = model.ff(layer, x_ff[one, -1:])
                if not bool(one.all()):
                    y[~one] = model.ff(layer, x_ff[~one])
                put(rows_f, f, y, wk[f])
        else:
            put(rows_f, f)
        if on_layer is not None:
            on_layer(layer)
    x_last = rk[g.n_layers, -1] + torch.bmm(ml[:, None], delta[:, :, -1]).reshape(R, d)
    return model.logits(x_last, ids)
