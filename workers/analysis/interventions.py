"""Ablation and activation patching of attention heads and the residual stream (docs/causal.md).

A head's output ``z_{l,h}`` is its slice of the input to the layer's output projection (``W_O``).
Every intervened run starts at the layer it changes: the clean (or corrupted) stream ``X[l]`` is fed
as ``inputs_embeds`` to the model with its layer list cut to ``layers[l:]`` (``from_layer``), so the
layers below are not run again, and runs that start at the same layer go as one batch. A causal
decoder's position t depends only on tokens up to t, so a map read at one position runs the text
only up to it.

Notebook use::

    from workers.analysis.interventions import ablation, patching
    abl = ablation(m, enc, heads=None, mode="mean")      # every head in turn: abl["map"] [L][H]
    pat = patching(m, encode(m, clean), encode(m, corrupted))
    pat["residual"]                                    # [L+1][n] restored fraction of the logit difference
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from workers.analysis.causal import (
    Stream,
    TargetSpec,
    head_of,
    resolve_target,
    stream,
    token_id,
    token_str,
)
from workers.analysis.decomposition.model import locate
from workers.analysis.progress import Progress, no_progress
from workers.errors import HeadscopeError
from workers.models.adapters import Encoded
from workers.models.families import resolve

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel

logger = logging.getLogger(__name__)

ROW_TOKENS = 4096  # patching: tokens of one batch of patched runs (rows x length)
HeadValues = dict[int, list[tuple[int, int, torch.Tensor]]]  # layer -> [(batch row, head, value [n|1, dh])]


@contextmanager
def from_layer(loaded: LoadedModel, start: int) -> Iterator[None]:
    """Within the block ``loaded.model(inputs_embeds=X)`` runs layers ``start..L-1`` on ``X`` (the
    stream ``X[start]``) and the final norm; GPT-2's position embedding, added to ``inputs_embeds``
    by its forward, is zeroed (it is already in ``X``). The block swaps the model's layer list, so it
    must not overlap another forward of the same loaded model (a worker runs one job at a time)."""
    fam = loaded.arch
    assert fam is not None
    parent_path, _, attr = fam.layers.rpartition(".")
    parent = resolve(loaded.model, parent_path) if parent_path else loaded.model
    full = getattr(parent, attr)
    setattr(parent, attr, torch.nn.ModuleList(list(full)[start:]))
    handles = []
    if fam.layout == "gpt2":
        handles.append(loaded.model.wpe.register_forward_hook(lambda m, a, out: torch.zeros_like(out)))
    try:
        yield
    finally:
        setattr(parent, attr, full)
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

        def hook(module: torch.nn.Module, args: tuple[Any, ...], items: list[Any] = items) -> tuple[Any, ...]:
            z = args[0].clone()  # [b, n, head*head_dim]
            for row, head, value in items:
                z[row, :, head * dh : (head + 1) * dh] = value[: z.shape[1]]
            return (z, *args[1:])

        handles.append(arch.layers[layer].context_module.register_forward_pre_hook(hook))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


@torch.inference_mode()
def run_from(loaded: LoadedModel, start: int, x: torch.Tensor, values: HeadValues | None = None) -> torch.Tensor:
    """Logits [b, n, vocabulary] of the stream ``x`` [b, n, d] at ``X[start]`` run to the end, with
    the head outputs ``values`` replaced (layer indices are the model's own)."""
    mask = torch.ones(x.shape[:2], dtype=torch.long, device=x.device)
    with replace_heads(loaded, values or {}), from_layer(loaded, start):  # heads located on the whole list
        out = loaded.model(inputs_embeds=x, attention_mask=mask)
    return head_of(loaded).logits(out.last_hidden_state)


def _head_slice(run: Stream, layer: int, head: int, dh: int) -> torch.Tensor:
    return run.contexts[layer][:, head * dh : (head + 1) * dh]  # [n, dh]


def _score(logits: torch.Tensor, a: np.ndarray, b: np.ndarray | None, positions: np.ndarray) -> torch.Tensor:
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
) -> dict[str, Any]:
    """docs/causal.md: ablation: replace head outputs by zero or by their mean over this text's positions.

    ``heads``: a set ablated together (``effect`` [n]: the change of the target's log-probability per
    position; ``[]`` changes nothing), or None for every head in turn (``map`` [L][H]: the change at
    ``position``, default the last). A pair target ``[a, b]`` reports the change of ``l[a] - l[b]``.
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
    out: dict[str, Any] = {"mode": mode, "target": a, "target_b": b,
                           "target_tokens": [token_str(loaded, i) for i in a], "base": base_all.cpu().numpy()}
    if heads is not None:
        for layer, head in heads:
            if not (0 <= layer < L and 0 <= head < H):
                raise HeadscopeError(f"head L{layer}H{head} is out of range: {loaded.name} has layers 0-{L - 1}, heads 0-{H - 1}")
        start = min((layer for layer, _ in heads), default=0)
        values: HeadValues = {}
        for layer, head in heads:
            values.setdefault(layer, []).append((0, head, value(layer, head)))
        logits = run_from(loaded, start, run.states[start][None], values)
        out.update(heads=[list(h) for h in heads], effect=(_score(logits, a, b, np.arange(n))[0] - base_all).cpu().numpy())
        progress(1.0, "ablation done")
        return out
    p = n - 1 if position is None else int(position)
    if not 0 <= p < n:
        raise HeadscopeError(f"position {p} is out of range: the text has positions 0-{n - 1}")
    # a causal decoder's position p sees tokens 0..p only: run that much
    base_p = _score(run_from(loaded, 0, run.states[0][None, : p + 1]), a, b, np.asarray([p]))[0, 0]
    grid = np.zeros((L, H))
    for layer in range(L):
        x = run.states[layer][None, : p + 1].expand(H, -1, -1)
        logits = run_from(loaded, layer, x, {layer: [(h, h, value(layer, h)) for h in range(H)]})
        grid[layer] = (_score(logits, a, b, np.asarray([p]))[:, 0] - base_p).cpu().numpy()
        progress((layer + 1) / L, f"ablation: layer {layer + 1}/{L}, every head")
    out.update(map=grid, position=p)
    return out


@torch.inference_mode()
def patching(
    loaded: LoadedModel,
    clean: Encoded,
    corrupted: Encoded,
    *,
    target: TargetSpec = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """docs/causal.md: activation patching from the clean run C into the corrupted run K (same length).

    Metric ``m = l[a] - l[b]`` at the last position (defaults: a = C's top prediction, b = K's).
    ``residual`` [L+1][n]: ``X[l]_t`` taken from C; ``heads`` [L][H]: ``z_{l,h}`` at every position
    taken from C; each reported as ``(m_patched - m_K) / (m_C - m_K)``.
    """
    progress = progress or no_progress
    if clean.n != corrupted.n:
        raise HeadscopeError(
            f"the clean text has {clean.n} tokens and the corrupted text {corrupted.n}; patching needs the same length"
        )
    rc, rk = stream(loaded, clean), stream(loaded, corrupted)
    n, L, H = clean.n, loaded.n_layers, loaded.n_heads
    dh = rc.contexts[0].shape[-1] // H
    if target is None:
        ia, ib = int(rc.logits[-1].argmax()), int(rk.logits[-1].argmax())
        if ia == ib:
            raise HeadscopeError(
                f"the clean and the corrupted text both predict {token_str(loaded, ia)!r} at the last position; "
                f"name a target pair [a, b] to compare"
            )
    elif isinstance(target, list | tuple) and len(target) == 2:
        ia, ib = token_id(loaded, target[0]), token_id(loaded, target[1])
    else:
        raise HeadscopeError("patching needs a target pair [a, b] (or none: the two texts' top predictions)")

    def metric(logits: torch.Tensor) -> np.ndarray:  # logits [rows, n, vocabulary] -> [rows]
        last = logits[:, -1].double()
        return (last[:, ia] - last[:, ib]).cpu().numpy()

    m_c, m_k = float(metric(rc.logits[None])[0]), float(metric(rk.logits[None])[0])
    if m_c == m_k:
        raise HeadscopeError("the metric is the same on both texts: nothing to restore")
    steps, done = (L + 1) + L, 0
    residual = np.zeros((L + 1, n))
    rows = max(1, ROW_TOKENS // n)  # patched runs per batch
    for layer in range(L + 1):
        for t0 in range(0, n, rows):
            idx = torch.arange(t0, min(n, t0 + rows), device=rk.states.device)
            x = rk.states[layer][None].repeat(len(idx), 1, 1)  # row i: position t0 + i from the clean run
            x[torch.arange(len(idx)), idx] = rc.states[layer][idx]
            residual[layer, t0 : t0 + len(idx)] = (metric(run_from(loaded, layer, x)) - m_k) / (m_c - m_k)
        done += 1
        progress(done / steps, f"patching: residual stream at layer {layer}/{L}")
    heads = np.zeros((L, H))
    for layer in range(L):
        x = rk.states[layer][None].expand(H, -1, -1)
        values = {layer: [(h, h, _head_slice(rc, layer, h, dh)) for h in range(H)]}
        heads[layer] = (metric(run_from(loaded, layer, x, values)) - m_k) / (m_c - m_k)
        done += 1
        progress(done / steps, f"patching: heads of layer {layer + 1}/{L}")
    return {
        "residual": residual,
        "heads": heads,
        "metric_clean": m_c,
        "metric_corrupted": m_k,
        "a": ia,
        "b": ib,
        "a_token": token_str(loaded, ia),
        "b_token": token_str(loaded, ib),
        "corrupted_tokens": corrupted.tokens,
        "corrupted_ids": corrupted.input_ids,
    }
