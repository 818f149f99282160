"""Information flow routes (Ferrando & Voita 2024, the LLM Transparency Tool's graph): which
earlier token states each state was built from, from one forward of one text (docs/circuits.md).

Each layer l updates position i twice; each update is an exact sum of parts (``workers.analyses.circuits.flow_terms``):

- attention: ``A[l]_i = x_i + Σ_j z_ij + c_i`` with ``z_ij = Σ_h a^h_ij v^h_j W_O^h`` (``v^h_j`` the value
  head h reads at key j: from the *normalised* input the heads really read, value bias included) and
  ``c_i`` the output bias. A post-attention norm (Gemma 2/3's sandwich norm, BERT's post-LayerNorm) is a
  linear map once its scale is frozen at the model's own value (docs/decomposition.md): every part is
  mapped by it (a LayerNorm also centres each part; its bias joins ``c_i``);
- feed-forward: ``X[l+1]_i = A[l]_i + f_i (+ c_i)`` (BERT: both through its second LayerNorm, as
  above). Under GPT-NeoX's parallel residual ``A[l]_i`` is the virtual sum ``x_i + attention`` and the
  feed-forward reads ``x_i``.

The importance of a part z of a sum y is ``max(0, ‖y‖₁ − ‖y − z‖₁)``, normalised over the sum's parts
(the bias included) to sum to 1. The graph keeps the edges of importance ≥ τ on a path down from the
chosen position's last state ``X[L]_p`` (before the final norm); an attention edge j → i is split into
its heads by each head's own proximity ``max(0, ‖y‖₁ − ‖y − z^h_ij‖₁)`` (shares of the edge, summing to
it; by ``‖z^h_ij‖₁`` when no head alone is close).

Cost: one forward that keeps each layer's inputs (values, attention weights, the stream; at most
``KEEP_BYTES``), then the graph top-down, computing the attention parts only for the queries the graph
reaches (a few per layer from a decoder's last position: docs/circuits.md, "Information flow
routes"), by chunks of at most ``CHUNK_BYTES`` (never ``[n, n, d]`` per head). A text whose layers
would not fit ``KEEP_BYTES`` has every query's importances computed in each layer's forward hook
instead, keeping only the entries ≥ τ (the same graph, slower).

Notebook use::

    from workers.analyses.circuits.information_flow import information_flow
    flow = information_flow(m, encode(m, "The Eiffel Tower is in the city of"), threshold=0.04)
    flow["edges"]       # [{"source": "X11_3", "target": "A11_8", "kind": "attention", "importance": 0.31,
                        #   "heads": [...], ...}, ...]
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from workers.analyses.circuits.flow_terms import (
    LayerRecord,
    Step,
    attention_step,
    ff_step,
    run_layers,
)
from workers.analyses.circuits.spec import DEFAULT_THRESHOLD
from workers.analyses.compare.head_similarity import one_torch_thread
from workers.core.errors import HeadscopeError, OutOfRangeError
from workers.core.progress import Progress, no_progress
from workers.models.adapters import Encoded
from workers.models.sublayers import Sublayers, locate

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel

CHUNK_BYTES = 32 * 2**20  # one chunk's [key, query, d] parts
KEEP_BYTES = 1 << 30  # every layer's inputs kept for the top-down pass up to this much


@dataclass
class AttnRow:
    """Query i's attention update: the importance of its residual and bias parts, and the token parts
    ≥ τ (``cols``, ``values``, each split into ``heads`` [H])."""

    resid: float
    bias: float
    cols: list[int]
    values: list[float]
    heads: list[list[float]]


@dataclass
class LayerFlow:
    """One layer's importances: the feed-forward update's parts per query ``[n]`` and the attention
    update of the queries computed so far (``attn``: query -> ``AttnRow``)."""

    ff: list[float]
    ff_resid: list[float]
    ff_bias: list[float]
    attn: dict[int, AttnRow] = field(default_factory=dict)


def proximity(whole: torch.Tensor, parts: torch.Tensor) -> torch.Tensor:
    """``max(0, ‖y‖₁ − ‖y − z‖₁)`` of parts [..., k, d] (or [k, ..., d] via broadcasting) of wholes [..., d]."""
    return (whole.abs().sum(-1) - (whole - parts).abs().sum(-1)).clamp(min=0)


def _chunk(keys: int, d: int, itemsize: int) -> int:
    return max(1, CHUNK_BYTES // max(1, keys * d * itemsize))


def attention_rows(
    att: Step, rows: list[int], *, threshold: float, causal: bool
) -> dict[int, AttnRow]:
    """The attention update's importances for the queries ``rows`` (the token parts ≥ ``threshold``)."""
    out: dict[int, AttnRow] = {}
    n, d = att.resid.shape
    order = sorted(rows)
    c = _chunk(n, d, att.resid.element_size())
    if causal:  # a chunk of nearby queries reads keys up to its last one only
        c = min(c, max(8, n // 8))
    for k0 in range(0, len(order), c):
        chunk = order[k0 : k0 + c]
        idx = torch.tensor(chunk, device=att.resid.device)
        keys = chunk[-1] + 1 if causal else n
        z = att.tokens(idx, keys)  # [key, query, d]
        y = att.resid[idx] + z.sum(0) + att.bias[idx]  # [query, d]: the sum of the parts
        norm = y.abs().sum(-1)
        p_tok = (norm - z.sub_(y).abs_().sum(-1)).clamp_(min=0).T  # [query, key]
        p_res, p_bias = proximity(y, att.resid[idx]), proximity(y, att.bias[idx])
        total = p_tok.sum(1) + p_res + p_bias
        total = torch.where(total > 0, total, torch.ones_like(total))
        imp = p_tok / total[:, None]
        qi, kj = torch.nonzero(imp >= threshold, as_tuple=True)
        shares = (
            torch.zeros(0, att.weights.shape[0]) if att.weights is not None else torch.zeros(0, 0)
        )
        if len(qi):
            zh = att.heads(idx[qi], kj)  # [edge, H, d]
            ph = proximity(y[qi][:, None], zh)  # [edge, H]
            ph = torch.where(ph.sum(1, keepdim=True) > 0, ph, zh.abs().sum(-1))
            shares = (
                imp[qi, kj][:, None]
                * ph
                / ph.sum(1, keepdim=True).clamp(min=torch.finfo(ph.dtype).tiny)
            )
        res, bias = (p_res / total).tolist(), (p_bias / total).tolist()
        for q, i in enumerate(chunk):
            out[i] = AttnRow(res[q], bias[q], [], [], [])
        for e, (q, j) in enumerate(zip(qi.tolist(), kj.tolist(), strict=True)):
            row = out[chunk[q]]
            row.cols.append(j)
            row.values.append(float(imp[q, j]))
            row.heads.append(shares[e].tolist())
    return out


def ff_importances(rec: LayerRecord, la: Sublayers) -> tuple[list[float], list[float], list[float]]:
    """The feed-forward update's importances per query: (feed-forward, residual, bias)."""
    ffs = ff_step(rec, la)
    assert ffs.ff is not None
    parts = torch.stack([ffs.resid, ffs.ff, ffs.bias], dim=1)  # [n, 3, d]
    p = proximity((ffs.resid + ffs.ff + ffs.bias)[:, None], parts)
    p = p / torch.where(p.sum(1) > 0, p.sum(1), torch.ones_like(p[:, 0]))[:, None]
    return p[:, 1].tolist(), p[:, 0].tolist(), p[:, 2].tolist()


def layer_flow(
    rec: LayerRecord,
    la: Sublayers,
    n_heads: int,
    *,
    threshold: float,
    causal: bool,
    rows: list[int] | None = None,
) -> LayerFlow:
    """One layer's importances: the feed-forward update for every query, the attention update for
    ``rows`` (None: every query)."""
    assert rec.x is not None
    flow = LayerFlow(*ff_importances(rec, la))
    att = attention_step(rec, la, n_heads)
    flow.attn = attention_rows(
        att,
        list(range(rec.x.shape[0])) if rows is None else rows,
        threshold=threshold,
        causal=causal,
    )
    return flow


# ------------------------------------------------------------------------------------- the graph


def _parallel(loaded: LoadedModel) -> bool:
    return (
        loaded.arch is not None
        and loaded.arch.layout == "gpt_neox"
        and bool(loaded.config.get("use_parallel_residual", True))
    )


def _graph(
    flows: list[LayerFlow],
    position: int,
    threshold: float,
    *,
    parallel: bool,
    fill: Callable[[int, list[int]], None],
    progress: Progress,
) -> tuple[list, list]:
    """Nodes and edges ≥ ``threshold`` on a path down from ``X[L]_position`` (module docstring);
    ``fill(layer, queries)`` computes a layer's attention rows the graph reaches."""
    L = len(flows)
    edges: list[dict[str, Any]] = []
    nodes: dict[str, dict[str, Any]] = {}

    def node(kind: str, layer: int, pos: int) -> str:
        nid = f"{kind}{layer}_{pos}"
        nodes.setdefault(
            nid,
            {
                "id": nid,
                "kind": {"X": "state", "A": "attention", "M": "feedforward"}[kind],
                "layer": layer,
                "position": pos,
            },
        )
        return nid

    def edge(
        kind: str, layer: int, src: str, dst: str, frm: int, to: int, w: float, **extra: Any
    ) -> None:
        edges.append(
            {
                "source": src,
                "target": dst,
                "kind": kind,
                "layer": layer,
                "from": frm,
                "to": to,
                "importance": float(w),
                **extra,
            }
        )

    node("X", L, position)
    states = {position}
    for layer in reversed(range(L)):
        f = flows[layer]
        mids: set[int] = set()
        below: set[int] = set()
        for i in sorted(states):
            top = node("X", layer + 1, i)
            if f.ff[i] >= threshold:
                reader = node("X", layer, i) if parallel else node("A", layer, i)
                (below if parallel else mids).add(i)
                edge("ff-input", layer, reader, node("M", layer, i), i, i, f.ff[i])
                edge("feedforward", layer, node("M", layer, i), top, i, i, f.ff[i])
            if f.ff_resid[i] >= threshold:
                mids.add(i)
                edge("residual", layer, node("A", layer, i), top, i, i, f.ff_resid[i])
        fill(layer, sorted(mids))
        for i in sorted(mids):
            mid = node("A", layer, i)
            row = f.attn[i]
            nodes[mid]["bias"] = row.bias
            for j, w, heads in zip(row.cols, row.values, row.heads, strict=True):
                below.add(j)
                edge("attention", layer, node("X", layer, j), mid, j, i, w, heads=heads)
            if row.resid >= threshold:
                below.add(i)
                edge("residual", layer, node("X", layer, i), mid, i, i, row.resid)
        states = below
        progress((L - layer) / L, f"information flow: graph, layer {layer}")
    return list(nodes.values()), edges


def default_position(loaded: LoadedModel, n: int) -> int:
    """The prediction's position for a decoder (the last), the first token ([CLS]) for an encoder."""
    return n - 1 if loaded.causal else 0


def kept_bytes(loaded: LoadedModel, n: int) -> int:
    """Bytes of every layer's record kept for the top-down pass (``KEEP_BYTES`` bounds it)."""
    d = int(loaded.config.get("hidden_size") or loaded.config.get("n_embd") or 0)
    return loaded.n_layers * (loaded.n_heads * n * n + 10 * n * d) * loaded.dtype.itemsize


def information_flow(
    loaded: LoadedModel,
    encoded: Encoded,
    *,
    position: int | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The information-flow graph (docs/circuits.md) of ``encoded`` from ``position`` (None:
    ``default_position``).

    Keys: ``position``, ``threshold``, ``parallel_residual``, ``nodes`` [{id, kind, layer, position,
    bias?}], ``edges`` [{source, target, kind, layer, from, to, importance, heads?}], ``top_down``
    (whether only the reached queries were computed), ``timings``; docs/results.md.
    """
    progress = progress or no_progress
    if not 0.0 < threshold < 1.0:
        raise HeadscopeError(f"threshold {threshold} must lie strictly between 0 and 1")
    n = encoded.n
    p = default_position(loaded, n) if position is None else int(position)
    if not 0 <= p < n:
        raise OutOfRangeError(f"position {p} is out of range: the text has positions 0-{n - 1}")
    arch = locate(loaded)
    L, H, causal = loaded.n_layers, loaded.n_heads, loaded.causal
    top_down = kept_bytes(loaded, n) <= KEEP_BYTES
    flows: list[LayerFlow] = []
    records: list[LayerRecord] = []
    start = time.perf_counter()
    share = 0.6 if top_down else 0.9

    def on_layer(layer: int, rec: LayerRecord) -> None:
        with (
            one_torch_thread()
        ):  # the importances by query chunks: small products, as in the graph below
            if top_down:
                flows.append(LayerFlow(*ff_importances(rec, arch.layers[layer])))
                records.append(rec)
            else:
                flows.append(
                    layer_flow(rec, arch.layers[layer], H, threshold=threshold, causal=causal)
                )
        progress(share * (layer + 1) / L, f"information flow: layer {layer + 1}/{L}")

    def fill(layer: int, rows: list[int]) -> None:
        if top_down:
            with torch.inference_mode():
                att = attention_step(records[layer], arch.layers[layer], H)
                flows[layer].attn = attention_rows(att, rows, threshold=threshold, causal=causal)
            records[layer] = LayerRecord()  # not needed again

    run_layers(loaded, encoded, on_layer)
    forward_s = time.perf_counter() - start
    # the reached queries' parts come in small chunks: OpenMP's barriers cost more than a second
    # thread gives (measured: docs/circuits.md, "Information flow routes", Cost)
    with one_torch_thread():
        nodes, edges = _graph(
            flows,
            p,
            threshold,
            parallel=_parallel(loaded),
            fill=fill,
            progress=lambda f, m: progress(share + (1 - share) * f, m),
        )
    return {
        "position": p,
        "threshold": threshold,
        "parallel_residual": _parallel(loaded),
        "top_down": top_down,
        "nodes": nodes,
        "edges": edges,
        "timings": {"forward_s": forward_s, "flow_s": time.perf_counter() - start},
    }
