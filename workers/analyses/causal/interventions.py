"""Ablation and activation patching of attention heads and the residual stream (docs/causal.md).

A head's output ``z_{l,h}`` is its slice of the input to the layer's output projection (``W_O``).
Every intervened run (a ``Row``) starts at the layer it changes: the clean (or corrupted) stream
``X[l]`` is fed as ``inputs_embeds`` to the model with its layer list cut (``from_layer``), so the
layers below are not run again. Runs that start at different layers share one forward: the batch
starts with the first and the others join it at their layer (``run_rows``). A causal decoder's
position t depends only on tokens up to t, so a map read at one position runs the text only up to
it; a run that changes nothing before position t reuses the base run's keys and values there
(``Prefix``) and computes positions t.. only; and where one position is read, the last layer's
feed-forward and the unembedding run there only.

Notebook use::

    from workers.analyses.causal.interventions import ablation, patching
    abl = ablation(m, enc, heads=None, mode="mean")      # every head in turn: abl["map"] [L][H]
    pat = patching(m, encode(m, clean), encode(m, corrupted))
    pat["residual"]                                    # [L+1][n] restored fraction of the logit difference
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from workers.analyses.causal.views import (
    Stream,
    TargetSpec,
    final_norm,
    head_of,
    resolve_target,
    stream,
    token_id,
    token_str,
)
from workers.core.errors import HeadscopeError
from workers.core.progress import Progress, no_progress
from workers.models.adapters import Encoded, cache_kwarg, cache_out
from workers.models.families import resolve
from workers.models.sublayers import batch_inputs, layer_stack, locate

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel

logger = logging.getLogger(__name__)

ROW_TOKENS = 4096  # one call of intervened runs: rows x (prefix + query) tokens at its widest layer
HeadValues = dict[
    int, list[tuple[int, int, torch.Tensor]]
]  # layer -> [(batch row, head, value [n|1, dh])]


@dataclass
class Row:
    """One intervened run: the stream ``x`` [q, d] given at ``X[start]`` (``start`` = L: the last
    stream, read through the final norm only) for the query positions ``offset..offset+q-1`` (the
    positions before ``offset`` are the base run's, unchanged: their keys and values are reused),
    with head outputs replaced: ``heads`` = ((layer, head, value [q|1, dh]), ...), layer >= start."""

    start: int
    x: torch.Tensor
    heads: tuple[tuple[int, int, torch.Tensor], ...] = ()


@dataclass
class Prefix:
    """A base run's keys and values per layer ([1, kv heads, n, head dim] each): the positions an
    intervention does not change are not run again, their keys and values are read from here."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]


@torch.inference_mode()
def prefix_of(loaded: LoadedModel, encoded: Encoded) -> Prefix:
    """Run ``encoded`` once and keep every layer's keys and values (all of them: a cache made from
    the config keeps only a sliding-window layer's last window, Gemma 2/3)."""
    from transformers import DynamicCache

    out = loaded.model(
        **batch_inputs(loaded, [encoded]), use_cache=True, **{cache_kwarg(loaded): DynamicCache()}
    )
    cache = cache_out(out)
    cache = getattr(
        cache, "self_attention_cache", cache
    )  # an encoder-decoder wrapper (GPT-2 may use one)
    return Prefix([layer.keys for layer in cache.layers], [layer.values for layer in cache.layers])


@contextmanager
def _hooks(handles: list[Any]) -> Iterator[None]:
    """Remove the hook ``handles`` when the block ends."""
    try:
        yield
    finally:
        for h in handles:
            h.remove()


@contextmanager
def from_layer(loaded: LoadedModel, start: int) -> Iterator[None]:
    """Within the block ``loaded.model(inputs_embeds=X)`` runs layers ``start..L-1`` on ``X`` (the
    stream ``X[start]``) and the final norm; GPT-2's position embedding, added to ``inputs_embeds``
    by its forward, is zeroed (it is already in ``X``). The block swaps the model's layer list, so it
    must not overlap another forward of the same loaded model (a worker runs one job at a time)."""
    parent, attr, full = layer_stack(loaded)
    setattr(parent, attr, torch.nn.ModuleList(list(full)[start:]))
    config = loaded.model.config
    types = getattr(
        config, "layer_types", None
    )  # Gemma 2/3: the forward picks mask and rotary by index
    if types is not None:
        config.layer_types = list(types)[start:]
    handles = []
    if loaded.arch is not None and loaded.arch.layout == "gpt2":
        handles.append(
            loaded.model.wpe.register_forward_hook(lambda m, a, out: torch.zeros_like(out))
        )
    try:
        yield
    finally:
        setattr(parent, attr, full)
        if types is not None:
            config.layer_types = types
        for h in handles:
            h.remove()


@contextmanager
def replace_heads(loaded: LoadedModel, values: HeadValues) -> Iterator[None]:
    """Within the block, head ``h`` of layer ``l`` in batch row ``r`` outputs ``value`` (broadcast
    over positions) instead of its own ``z`` (``values[l] = [(r, h, value), ...]``)."""
    arch = locate(loaded)
    dh = arch.layers[0].w_o.shape[0] // loaded.n_heads
    handles = []
    for layer, items in values.items():
        if not items:
            continue

        def hook(
            module: torch.nn.Module, args: tuple[Any, ...], items: list[Any] = items
        ) -> tuple[Any, ...]:
            z = args[0].clone()  # [b, n, head*head_dim]
            for row, head, value in items:
                z[row, :, head * dh : (head + 1) * dh] = value[: z.shape[1]]
            return (z, *args[1:])

        handles.append(arch.layers[layer].context_module.register_forward_pre_hook(hook))
    with _hooks(handles):
        yield


@contextmanager
def _join_rows(loaded: LoadedModel, joins: dict[int, torch.Tensor]) -> Iterator[None]:
    """Within the block, the rows ``joins[l]`` [r, q, d] join the batch at the input of layer ``l``:
    runs that start at different layers share one forward from the first of them on."""
    _, _, layers = layer_stack(loaded)
    handles = []
    for layer, rows in joins.items():

        def hook(
            module: torch.nn.Module,
            args: tuple[Any, ...],
            kwargs: dict[str, Any],
            rows: torch.Tensor = rows,
        ) -> tuple[tuple[Any, ...], dict[str, Any]]:
            if args:
                return (torch.cat([args[0], rows]), *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": torch.cat([kwargs["hidden_states"], rows])}

        handles.append(layers[layer].register_forward_pre_hook(hook, with_kwargs=True))
    with _hooks(handles):
        yield


@contextmanager
def _last_feedforward_at(loaded: LoadedModel, read: torch.Tensor) -> Iterator[None]:
    """Within the block the last layer's feed-forward runs at the query positions ``read`` only (its
    output is zero elsewhere): no later layer reads the other positions, and only ``read`` is read."""
    fam = loaded.arch
    assert fam is not None
    _, _, layers = layer_stack(loaded)
    mlp = resolve(layers[-1], fam.ff_out.rpartition(".")[0])
    width: dict[str, int] = {}

    def before(module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        width["q"] = args[0].shape[1]
        return (args[0][:, read], *args[1:])

    def after(module: torch.nn.Module, args: tuple[Any, ...], out: torch.Tensor) -> torch.Tensor:
        full = out.new_zeros(out.shape[0], width["q"], out.shape[2])
        full[:, read] = out
        return full

    handles = [mlp.register_forward_pre_hook(before), mlp.register_forward_hook(after)]
    with _hooks(handles):
        yield


def _causal_mask(
    q: int, offset: int, dtype: torch.dtype, device: torch.device, window: int | None = None
) -> torch.Tensor:
    """Additive mask [1, 1, q, offset + q]: query i (position offset + i) sees keys 0..offset + i
    (``window``: only the last ``window`` of them, a sliding-window layer's view)."""
    keys = torch.arange(offset + q, device=device)
    queries = torch.arange(offset, offset + q, device=device)
    mask = torch.zeros(q, offset + q, dtype=dtype, device=device)
    hidden = keys[None, :] > queries[:, None]
    if window is not None:
        hidden |= keys[None, :] <= queries[:, None] - window
    mask[hidden] = torch.finfo(dtype).min
    return mask[None, None]


def _masks(
    loaded: LoadedModel, q: int, offset: int, dtype: torch.dtype, device: torch.device
) -> Any:
    """The attention mask the forward takes: one causal mask, or (Gemma 2/3, layers of two types) one
    per layer type, the sliding-window layers' limited to their window."""
    full = _causal_mask(q, offset, dtype, device)
    types = set(loaded.config.get("layer_types") or ())
    window = loaded.config.get("sliding_window")
    if "sliding_attention" not in types or not window:
        return full
    return {
        "full_attention": full,
        "sliding_attention": _causal_mask(q, offset, dtype, device, int(window)),
    }


@torch.inference_mode()
def run_rows(
    loaded: LoadedModel,
    rows: list[Row],
    *,
    prefix: Prefix | None = None,
    offset: int = 0,
    read: list[int] | None = None,
) -> torch.Tensor:
    """Logits [rows, len(read) or q, vocabulary] of intervened runs (see ``Row``), in one forward.

    Every row has the same query length q. Rows run from their own layer on: the forward starts at
    the first row's layer and the others join the batch at theirs (``_join_rows``). With ``offset``
    > 0 the positions before it are the ``prefix`` run's, unchanged (a causal decoder: no later
    token changes them): their keys and values are reused, not recomputed. ``read``: the query
    positions whose logits are wanted (the last layer's feed-forward runs there only); None: all.
    """
    if not rows:
        raise ValueError("no rows to run")
    L = loaded.n_layers
    q, dev, dtype = rows[0].x.shape[0], rows[0].x.device, rows[0].x.dtype
    order = sorted(range(len(rows)), key=lambda i: rows[i].start)
    ranked = [rows[i] for i in order]
    first = ranked[0].start
    at = torch.arange(q, device=dev) if read is None else torch.as_tensor(read, device=dev)
    head = head_of(loaded)
    outs: list[torch.Tensor] = []
    inner = [r for r in ranked if r.start < L]
    if inner:
        joins: dict[int, list[torch.Tensor]] = {}
        values: HeadValues = {}
        active = [0] * L  # rows in the batch at each layer's input
        for index, row in enumerate(inner):
            if row.x.shape[0] != q:
                raise ValueError(
                    f"rows of one call have the same query length ({q}), not {row.x.shape[0]}"
                )
            if row.start > first:
                joins.setdefault(row.start, []).append(row.x)
            for layer, h, value in row.heads:
                if layer < row.start:
                    raise ValueError(
                        f"row starting at layer {row.start} replaces a head of layer {layer}"
                    )
                values.setdefault(layer, []).append((index, h, value))
            for layer in range(row.start, L):
                active[layer] += 1
        x = torch.stack([r.x for r in inner if r.start == first])
        kwargs: dict[str, Any] = {
            "attention_mask": _masks(loaded, q, offset, dtype, dev),
            "position_ids": torch.arange(offset, offset + q, device=dev)[None],
            "use_cache": False,
        }
        if offset > 0:
            if prefix is None:
                raise ValueError("an offset needs the prefix run's keys and values")
            from transformers import DynamicCache

            kwargs[cache_kwarg(loaded)] = DynamicCache(
                ddp_cache_data=[
                    (None, None)
                    if layer < first
                    else (
                        prefix.keys[layer][:, :, :offset].expand(active[layer], -1, -1, -1),
                        prefix.values[layer][:, :, :offset].expand(active[layer], -1, -1, -1),
                    )
                    for layer in range(L)
                ]
            )
            kwargs["use_cache"] = True
        with (
            replace_heads(loaded, values),  # heads located on the whole layer list
            _join_rows(loaded, {layer: torch.stack(xs) for layer, xs in joins.items()}),
            _last_feedforward_at(loaded, at) if read is not None else nullcontext(),
            from_layer(loaded, first),
        ):
            out = loaded.model(inputs_embeds=x, **kwargs)
        outs.append(head.logits(out.last_hidden_state[:, at]))
    last = [r for r in ranked if r.start == L]
    if last:
        x = torch.stack([r.x for r in last])
        outs.append(head.logits(final_norm(loaded)(x)[:, at]))
    logits = torch.cat(outs)
    back = torch.empty(len(order), dtype=torch.long, device=dev)
    back[torch.as_tensor(order, device=dev)] = torch.arange(len(order), device=dev)
    return logits[back]


def run_from(
    loaded: LoadedModel,
    start: int,
    x: torch.Tensor,
    values: HeadValues | None = None,
    read: list[int] | None = None,
) -> torch.Tensor:
    """Logits [b, n (or len(read)), vocabulary] of the stream ``x`` [b, n, d] at ``X[start]`` run to
    the end, with the head outputs ``values`` replaced (layer indices are the model's own)."""
    heads: list[list[tuple[int, int, torch.Tensor]]] = [[] for _ in range(x.shape[0])]
    for layer, items in (values or {}).items():
        for row, h, value in items:
            heads[row].append((layer, h, value))
    return run_rows(
        loaded, [Row(start, x[i], tuple(heads[i])) for i in range(x.shape[0])], read=read
    )


def rows_per_call(width: int) -> int:
    """How many runs of ``width`` tokens one call takes (``ROW_TOKENS`` at most)."""
    return max(1, ROW_TOKENS // max(1, width))


def _batches(rows: list[Any], width: int) -> Iterator[list[Any]]:
    """Consecutive runs of ``rows`` with at most ``ROW_TOKENS`` tokens (``width`` each) per call."""
    size = rows_per_call(width)
    for i in range(0, len(rows), size):
        yield rows[i : i + size]


def _head_slice(run: Stream, layer: int, head: int, dh: int) -> torch.Tensor:
    return run.contexts[layer][:, head * dh : (head + 1) * dh]  # [n, dh]


def _score(
    logits: torch.Tensor, a: np.ndarray, b: np.ndarray | None, positions: np.ndarray
) -> torch.Tensor:
    """``log p(a)`` (or ``l[a] - l[b]`` for a pair) at ``positions`` of logits [rows, n, vocabulary]."""
    pos = torch.as_tensor(positions, device=logits.device)
    ta = torch.as_tensor(a[positions], device=logits.device)
    sel = logits[:, pos].double()  # [rows, p, vocabulary]
    idx = torch.arange(len(positions), device=logits.device)
    if b is None:
        return torch.log_softmax(sel, dim=-1)[:, idx, ta]
    tb = torch.as_tensor(b[positions], device=logits.device)
    return sel[:, idx, ta] - sel[:, idx, tb]


@torch.inference_mode()
def ablation(
    loaded: LoadedModel,
    encoded: Encoded,
    *,
    heads: list[tuple[int, int]] | None = None,
    mode: Literal["zero", "mean"] = "mean",
    target: TargetSpec = None,
    position: int | None = None,
    progress: Progress | None = None,
    calls: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """docs/causal.md: ablation: replace head outputs by zero or by their mean over this text's positions.

    ``heads``: a set ablated together (``effect`` [n]: the change of the target's log-probability per
    position; ``[]`` changes nothing), or None for every head in turn (``map`` [L][H]: the change at
    ``position``, default the last). A pair target ``[a, b]`` reports the change of ``l[a] - l[b]``.
    ``calls`` (every head in turn): only the forward calls ``[c0, c1)`` of the runs (the base run
    first, then each head), ``scores`` of those runs instead of ``map``: a part of a split job
    (``workers.analyses.causal.parts``), the same calls as the whole, so the same bits.
    """
    progress = progress or no_progress
    if mode not in ("zero", "mean"):
        raise HeadscopeError(f"unknown ablation {mode!r}; use zero or mean")
    run = stream(loaded, encoded)
    n, L, H = encoded.n, loaded.n_layers, loaded.n_heads
    dh = run.contexts[0].shape[-1] // H
    a, b = resolve_target(loaded, encoded, target, int(run.logits[-1].argmax()))

    def value(layer: int, head: int) -> torch.Tensor:
        z = _head_slice(run, layer, head, dh)
        return torch.zeros_like(z[:1]) if mode == "zero" else z.mean(dim=0, keepdim=True)

    base_all = _score(run.logits[None], a, b, np.arange(n))[0]  # [n]
    out: dict[str, Any] = {
        "mode": mode,
        "target": a,
        "target_b": b,
        "target_tokens": [token_str(loaded, i) for i in a],
        "target_b_tokens": None if b is None else [token_str(loaded, i) for i in b],
        "base": base_all.cpu().numpy(),
    }
    if heads is not None:
        for layer, head in heads:
            if not (0 <= layer < L and 0 <= head < H):
                raise HeadscopeError(
                    f"head L{layer}H{head} is out of range: {loaded.name} has layers 0-{L - 1}, heads 0-{H - 1}"
                )
        start = min((layer for layer, _ in heads), default=0)
        row = Row(
            start,
            run.states[start],
            tuple((layer, head, value(layer, head)) for layer, head in heads),
        )
        logits = run_rows(loaded, [row])
        out.update(
            heads=[list(h) for h in heads],
            effect=(_score(logits, a, b, np.arange(n))[0] - base_all).cpu().numpy(),
        )
        progress(1.0, "ablation done")
        return out
    p = n - 1 if position is None else int(position)
    if not 0 <= p < n:
        raise HeadscopeError(f"position {p} is out of range: the text has positions 0-{n - 1}")
    # a causal decoder's position p sees tokens 0..p only: run that much, and read p only. The base
    # (nothing ablated) goes the same way, so ablating nothing gives exactly 0.
    rows = [Row(0, run.states[0][: p + 1])] + [
        Row(layer, run.states[layer][: p + 1], ((layer, h, value(layer, h)),))
        for layer in range(L)
        for h in range(H)
    ]
    size = rows_per_call(p + 1)
    lo, hi = (0, len(rows)) if calls is None else (calls[0] * size, min(calls[1] * size, len(rows)))
    scores = np.zeros(hi - lo)
    done = 0
    for batch in _batches(rows[lo:hi], p + 1):
        logits = run_rows(loaded, batch, read=[p])
        scores[done : done + len(batch)] = (
            _score(logits, a[p : p + 1], None if b is None else b[p : p + 1], np.asarray([0]))[:, 0]
            .cpu()
            .numpy()
        )
        done += len(batch)
        progress(done / (hi - lo), f"ablation: {lo + done - 1}/{L * H} heads, each in turn")
    if calls is not None:
        out.update(scores=scores, rows=[lo, hi], position=p)
        return out
    out.update(map=(scores[1:] - scores[0]).reshape(L, H), position=p)
    return out


def pair_target(
    loaded: LoadedModel, clean_last: torch.Tensor, corrupted_last: torch.Tensor, target: TargetSpec
) -> tuple[int, int]:
    """The patching metric's pair ``(a, b)``: ``target`` [a, b], or none: the clean and the corrupted
    runs' top predictions at the last position (logits ``clean_last``/``corrupted_last`` [vocabulary])."""
    if target is None:
        ia, ib = int(clean_last.argmax()), int(corrupted_last.argmax())
        if ia == ib:
            raise HeadscopeError(
                f"the clean and the corrupted text both predict {token_str(loaded, ia)!r} at the last position; "
                f"name a target pair [a, b] to compare"
            )
        return ia, ib
    if isinstance(target, list | tuple) and len(target) == 2:
        return token_id(loaded, target[0]), token_id(loaded, target[1])
    raise HeadscopeError(
        "patching needs a target pair [a, b] (or none: the two texts' top predictions)"
    )


@torch.inference_mode()
def patching(
    loaded: LoadedModel,
    clean: Encoded,
    corrupted: Encoded,
    *,
    target: TargetSpec = None,
    progress: Progress | None = None,
    calls: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """docs/causal.md: activation patching from the clean run C into the corrupted run K (same length).

    Metric ``m = l[a] - l[b]`` at the last position (defaults: a = C's top prediction, b = K's).
    ``residual`` [L+1][n]: ``X[l]_t`` taken from C; ``heads`` [L][H]: ``z_{l,h}`` at every position
    taken from C; each reported as ``(m_patched - m_K) / (m_C - m_K)``. ``calls``: only the forward
    calls ``[c0, c1)`` (residual rows position by position, then the heads), ``cells`` [[grid, i, j,
    fraction]] instead of the grids: a part of a split job (``workers.analyses.causal.parts``).
    """
    progress = progress or no_progress
    if clean.n != corrupted.n:
        raise HeadscopeError(
            f"the clean text has {clean.n} tokens and the corrupted text {corrupted.n}; patching needs the same length"
        )
    rc, rk = stream(loaded, clean), stream(loaded, corrupted)
    n, L, H = clean.n, loaded.n_layers, loaded.n_heads
    dh = rc.contexts[0].shape[-1] // H
    ia, ib = pair_target(loaded, rc.logits[-1], rk.logits[-1], target)

    def metric(logits: torch.Tensor) -> np.ndarray:  # logits [rows, n, vocabulary] -> [rows]
        last = logits[:, -1].double()
        return (last[:, ia] - last[:, ib]).cpu().numpy()

    m_c, m_k = float(metric(rc.logits[None])[0]), float(metric(rk.logits[None])[0])
    if m_c == m_k:
        raise HeadscopeError("the metric is the same on both texts: nothing to restore")
    # before the first token that differs both runs are the same: patching there changes nothing, and
    # a patched run recomputes only the positions from the patched one on (the rest is the corrupted
    # run's, whose keys and values are reused)
    first = next(
        (
            i
            for i, (x, y) in enumerate(zip(clean.input_ids, corrupted.input_ids, strict=True))
            if x != y
        ),
        n,
    )
    prefix = prefix_of(loaded, corrupted)
    grids = {"residual": np.zeros((L + 1, n)), "heads": np.zeros((L, H))}
    # one forward call per batch: (offset, [(run, (grid, i, j) where its fraction goes)])
    plan: list[tuple[int, list[tuple[Row, tuple[str, int, int]]]]] = []
    for t in range(first, n):
        items = []
        for layer in range(L + 1):
            x = rk.states[layer][t:].clone()
            x[0] = rc.states[layer][t]
            items.append((Row(layer, x), ("residual", layer, t)))
        plan += [(t, batch) for batch in _batches(items, n)]
    plan += [
        (first, batch)
        for batch in _batches(
            [
                (
                    Row(
                        layer,
                        rk.states[layer][first:],
                        ((layer, h, _head_slice(rc, layer, h, dh)[first:]),),
                    ),
                    ("heads", layer, h),
                )
                for layer in range(L)
                for h in range(H)
            ],
            n,
        )
    ]
    chosen = plan if calls is None else plan[calls[0] : calls[1]]
    total, done, cells = sum(len(batch) for _, batch in chosen), 0, []
    for offset, batch in chosen:
        logits = run_rows(
            loaded, [row for row, _ in batch], prefix=prefix, offset=offset, read=[n - 1 - offset]
        )
        fractions = (metric(logits) - m_k) / (m_c - m_k)
        for (_, (grid, i, j)), f in zip(batch, fractions, strict=True):
            grids[grid][i, j] = f
            if calls is not None:
                cells.append([grid, i, j, float(f)])
        done += len(batch)
        progress(done / total, f"patching: {done}/{total} runs (residual stream, then heads)")
    keys = pair_keys(loaded, corrupted, ia, ib, m_c, m_k)
    return {"cells": cells, "first": first, **keys} if calls is not None else {**grids, **keys}


def pair_keys(
    loaded: LoadedModel, corrupted: Encoded, ia: int, ib: int, m_c: float, m_k: float
) -> dict[str, Any]:
    """The keys every clean/corrupted analysis reports about its metric and its corrupted text."""
    return {
        "metric_clean": m_c,
        "metric_corrupted": m_k,
        "a": ia,
        "b": ib,
        "a_token": token_str(loaded, ia),
        "b_token": token_str(loaded, ib),
        "corrupted_tokens": corrupted.tokens,
        "corrupted_ids": corrupted.input_ids,
    }
