"""Information flow routes (SPEC 12; Ferrando & Voita 2024, the LLM Transparency Tool's graph): which
earlier token states each state was built from, from one forward of one text (docs/circuits.md).

Each layer l updates position i twice; each update is an exact sum of parts:

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

Cost: one forward; each layer's importances are computed in its forward hook, by query chunks of at
most ``CHUNK_BYTES`` (never ``[n, n, d]`` per head), keeping only the entries ≥ τ.

Notebook use::

    from workers.analysis.information_flow import information_flow
    flow = information_flow(m, encode(m, "The Eiffel Tower is in the city of"), threshold=0.04)
    flow["edges"]       # [{"source": "X11_3", "target": "A11_8", "kind": "attention", "importance": 0.31,
                        #   "heads": [...], ...}, ...]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from workers.analysis.decomposition.model import LayerParts, batch_inputs, ln_stats, locate
from workers.analysis.interventions import _layers
from workers.analysis.progress import Progress, no_progress
from workers.errors import HeadscopeError, OutOfRangeError
from workers.models.adapters import Encoded, attention_modules

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel

DEFAULT_THRESHOLD = 0.04
FLOW_OPTIONS: dict[str, Any] = {"threshold": DEFAULT_THRESHOLD}  # the pipeline's defaults
CHUNK_BYTES = 64 * 2**20  # one chunk's [key, query, d] parts
CAPTURE = "headscope_flow"


@dataclass
class LayerRecord:
    """One layer's tensors from the forward (batch row 0). ``value`` [H, n, dh] per query head,
    ``weights`` [H, n, n]; the rest [n, d]: ``x`` the layer's input X[l], ``o`` the attention output
    as the output projection returns it, ``ff`` the feed-forward output as it joins the stream (after
    a post-norm), ``out`` X[l+1] (before the final norm); BERT's post-LayerNorms' inputs and ``mid``."""

    x: torch.Tensor | None = None
    value: torch.Tensor | None = None
    weights: torch.Tensor | None = None
    o: torch.Tensor | None = None
    ff: torch.Tensor | None = None
    out: torch.Tensor | None = None
    ln_attn_in: torch.Tensor | None = None
    ln_ff_in: torch.Tensor | None = None
    mid: torch.Tensor | None = None


@dataclass
class Step:
    """One update's parts for every query: ``resid`` [n, d], ``bias`` [n, d]; the attention step's
    token parts ``scale_i ⊙ Σ_h a^h_ij u^h_j`` from ``u`` [H, n, d] (``v^h_j W_O^h``, centred under a
    LayerNorm) and ``scale`` [n, d] (None: 1); the feed-forward step's ``ff`` [n, d]."""

    resid: torch.Tensor
    bias: torch.Tensor
    u: torch.Tensor | None = None
    weights: torch.Tensor | None = None
    scale: torch.Tensor | None = None
    ff: torch.Tensor | None = None

    def tokens(self, i0: int, i1: int, keys: int) -> torch.Tensor:
        """[key, query, d]: the token parts of queries i0..i1-1 from keys 0..keys-1."""
        assert self.u is not None and self.weights is not None
        a = self.weights[:, i0:i1, :keys].permute(2, 1, 0)  # [key, query, H]
        z = torch.bmm(a, self.u[:, :keys].transpose(0, 1))  # [key, query, d]
        return z if self.scale is None else z * self.scale[None, i0:i1]

    def heads(self, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        """[edge, H, d]: each head's share of the parts (i[e], j[e])."""
        assert self.u is not None and self.weights is not None
        z = self.weights[:, i, j].T[..., None] * self.u[:, j].transpose(0, 1)  # [edge, H, d]
        return z if self.scale is None else z * self.scale[i][:, None]


@dataclass
class LayerFlow:
    """One layer's importances: dense per query ``[n]`` for the residual, bias and feed-forward parts;
    the attention token parts ≥ τ sparse as (``rows``, ``cols``, ``values``, ``heads`` [edge, H])."""

    attn_resid: torch.Tensor
    attn_bias: torch.Tensor
    ff: torch.Tensor
    ff_resid: torch.Tensor
    ff_bias: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor
    values: torch.Tensor
    heads: torch.Tensor
    by_row: dict[int, list[int]] = field(default_factory=dict)


def _centre(t: torch.Tensor) -> torch.Tensor:
    return t - t.mean(-1, keepdim=True)


def _scale(ln: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return ln_stats(ln, x[None])[0][0]  # [n, d]: the norm's g / s, frozen at the model's own s


def attention_step(rec: LayerRecord, la: LayerParts, n_heads: int) -> Step:
    """The attention update's parts (see the module docstring)."""
    assert rec.value is not None and rec.x is not None and rec.o is not None
    d = la.w_o.shape[1]
    dh = rec.value.shape[-1]
    w_o = la.w_o.detach().reshape(n_heads, dh, d).to(rec.value.dtype)
    u = torch.bmm(rec.value, w_o)  # [H, n, d]
    n = rec.x.shape[0]
    bias = la.b_o.detach().to(u.dtype).expand(n, d)
    if la.ln_attn is not None:  # BERT: LN(x + o) = P(x) + Σ P(z) + P(b_O) + b, P(t) = g ⊙ (t - mean t) / s
        assert rec.ln_attn_in is not None
        scale = _scale(la.ln_attn, rec.ln_attn_in)
        ln_b = la.ln_attn.bias.detach() if la.ln_attn.bias is not None else torch.zeros_like(bias[0])
        return Step(scale * _centre(rec.x), scale * _centre(bias) + ln_b, _centre(u), rec.weights, scale)
    if la.post_attn is not None:  # Gemma 2/3: RMS-norm of the attention output alone, g / rms(o) frozen
        scale = _scale(la.post_attn, rec.o)
        return Step(rec.x, scale * bias, u, rec.weights, scale)
    return Step(rec.x, bias, u, rec.weights, None)


def ff_step(rec: LayerRecord, la: LayerParts) -> Step:
    """The feed-forward update's parts: the residual (the attention step's sum), the feed-forward output."""
    assert rec.ff is not None and rec.out is not None
    if la.ln_ff is not None:  # BERT: LN(mid + f) = P(mid) + P(f) + b
        assert rec.ln_ff_in is not None and rec.mid is not None
        scale = _scale(la.ln_ff, rec.ln_ff_in)
        ln_b = la.ln_ff.bias.detach() if la.ln_ff.bias is not None else torch.zeros_like(rec.ff[0])
        return Step(scale * _centre(rec.mid), ln_b.expand_as(rec.ff), ff=scale * _centre(rec.ff))
    return Step(rec.out - rec.ff, torch.zeros_like(rec.ff), ff=rec.ff)


def proximity(whole: torch.Tensor, parts: torch.Tensor) -> torch.Tensor:
    """``max(0, ‖y‖₁ − ‖y − z‖₁)`` of parts [..., k, d] (or [k, ..., d] via broadcasting) of wholes [..., d]."""
    return (whole.abs().sum(-1) - (whole - parts).abs().sum(-1)).clamp(min=0)


def _chunk(n: int, d: int, itemsize: int) -> int:
    return max(1, min(n, CHUNK_BYTES // max(1, 3 * n * d * itemsize)))


def layer_flow(rec: LayerRecord, la: LayerParts, n_heads: int, *, threshold: float, causal: bool) -> LayerFlow:
    """The importances of one layer's two updates for every query; token parts kept where ≥ ``threshold``."""
    att = attention_step(rec, la, n_heads)
    n, d = att.resid.shape
    rows, cols, vals, heads = [], [], [], []
    a_res, a_bias = torch.zeros(n, dtype=att.resid.dtype), torch.zeros(n, dtype=att.resid.dtype)
    c = _chunk(n, d, att.resid.element_size())
    for i0 in range(0, n, c):
        i1 = min(n, i0 + c)
        keys = i1 if causal else n
        z = att.tokens(i0, i1, keys)  # [key, query, d]
        y = att.resid[i0:i1] + z.sum(0) + att.bias[i0:i1]  # [query, d]: the sum of the parts
        p_tok = proximity(y[None], z).T  # [query, key]
        p_res, p_bias = proximity(y, att.resid[i0:i1]), proximity(y, att.bias[i0:i1])
        total = p_tok.sum(1) + p_res + p_bias
        total = torch.where(total > 0, total, torch.ones_like(total))
        imp = p_tok / total[:, None]
        a_res[i0:i1], a_bias[i0:i1] = (p_res / total).cpu(), (p_bias / total).cpu()
        qi, kj = torch.nonzero(imp >= threshold, as_tuple=True)
        if len(qi):
            zh = att.heads(qi + i0, kj)  # [edge, H, d]
            ph = proximity(y[qi][:, None], zh)  # [edge, H]
            fallback = zh.abs().sum(-1)
            ph = torch.where(ph.sum(1, keepdim=True) > 0, ph, fallback)
            w = imp[qi, kj]
            shares = w[:, None] * ph / ph.sum(1, keepdim=True).clamp(min=torch.finfo(ph.dtype).tiny)
            rows.append((qi + i0).cpu())
            cols.append(kj.cpu())
            vals.append(w.cpu())
            heads.append(shares.cpu())
    ffs = ff_step(rec, la)
    assert ffs.ff is not None
    parts = torch.stack([ffs.resid, ffs.ff, ffs.bias], dim=1)  # [n, 3, d]
    p = proximity((ffs.resid + ffs.ff + ffs.bias)[:, None], parts)
    p = p / torch.where(p.sum(1) > 0, p.sum(1), torch.ones_like(p[:, 0]))[:, None]
    empty = torch.zeros(0, dtype=torch.long)
    flow = LayerFlow(
        a_res, a_bias, p[:, 1].cpu(), p[:, 0].cpu(), p[:, 2].cpu(),
        torch.cat(rows) if rows else empty, torch.cat(cols) if cols else empty,
        torch.cat(vals) if vals else torch.zeros(0), torch.cat(heads) if heads else torch.zeros(0, n_heads),
    )  # fmt: skip
    for e, i in enumerate(flow.rows.tolist()):
        flow.by_row.setdefault(i, []).append(e)
    return flow


# ------------------------------------------------------------------------------------ the forward


def _capturing(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor | None, *args: Any, **kwargs: Any) -> Any:
    """The attention function while recording: the module's own, its values and weights handed on."""
    out = module._hs_flow_inner(module, query, key, value, attention_mask, *args, **kwargs)
    sink = getattr(module, "_hs_flow_sink", None)
    if sink is not None:
        groups = query.shape[1] // value.shape[1]
        sink(value.repeat_interleave(groups, dim=1) if groups > 1 else value, out[1])
    return out


@contextmanager
def _recording(loaded: LoadedModel, records: list[LayerRecord]) -> Iterator[None]:
    """Within the block, a forward fills one ``LayerRecord`` per layer (row 0 of the batch)."""
    from transformers.masking_utils import AttentionMaskInterface, eager_mask
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface

    AttentionInterface.register(CAPTURE, _capturing)
    AttentionMaskInterface.register(CAPTURE, eager_mask)
    arch = locate(loaded)
    config = loaded.model.config
    before = config._attn_implementation
    modules = attention_modules(loaded)
    handles: list[Any] = []

    def put(layer: int, name: str) -> Callable[[torch.Tensor], None]:
        def keep(t: torch.Tensor) -> None:
            setattr(records[layer], name, t[0])

        return keep

    def out_hook(k: Callable[[torch.Tensor], None]) -> Callable[..., None]:
        return lambda m, a, out: k(_first(out))

    def in_hook(k: Callable[[torch.Tensor], None]) -> Callable[..., None]:
        return lambda m, a: k(a[0])

    def sink(kv: Callable[[torch.Tensor], None], kw: Callable[[torch.Tensor], None]) -> Callable[..., None]:
        return lambda v, w: (kv(v), kw(w))

    def layer_in(k: Callable[[torch.Tensor], None]) -> Callable[..., None]:
        return lambda m, args, kwargs: k(args[0] if args else kwargs["hidden_states"])

    for layer, (module, la) in enumerate(zip(modules, arch.layers, strict=True)):
        own = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
        module._hs_flow_inner = ALL_ATTENTION_FUNCTIONS.get_interface(before, own)
        module._hs_flow_sink = sink(put(layer, "value"), put(layer, "weights"))
        handles.append(la.context_module.register_forward_hook(out_hook(put(layer, "o"))))
        ff_source = la.post_ff if la.post_ff is not None else la.ff_module
        handles.append(ff_source.register_forward_hook(out_hook(put(layer, "ff"))))
        if la.ln_attn is not None and la.ln_ff is not None:
            handles.append(la.ln_attn.register_forward_pre_hook(in_hook(put(layer, "ln_attn_in"))))
            handles.append(la.ln_attn.register_forward_hook(out_hook(put(layer, "mid"))))
            handles.append(la.ln_ff.register_forward_pre_hook(in_hook(put(layer, "ln_ff_in"))))
    for layer, block in enumerate(_layers(loaded)[2]):
        handles.append(block.register_forward_pre_hook(layer_in(put(layer, "x")), with_kwargs=True))
    config._attn_implementation = CAPTURE
    try:
        yield
    finally:
        config._attn_implementation = before
        for h in handles:
            h.remove()
        for module in modules:
            for name in ("_hs_flow_inner", "_hs_flow_sink"):
                if hasattr(module, name):
                    delattr(module, name)


def _first(out: Any) -> torch.Tensor:
    return out[0] if isinstance(out, tuple) else out


def run_layers(loaded: LoadedModel, encoded: Encoded, on_layer: Callable[[int, LayerRecord], None]) -> None:
    """One forward of ``encoded``; ``on_layer(l, record)`` as each layer finishes (the record is then
    dropped, so one layer's tensors are alive at a time)."""
    records = [LayerRecord() for _ in range(loaded.n_layers)]
    handles = []
    for layer, block in enumerate(_layers(loaded)[2]):
        def done(m: Any, a: Any, out: Any, layer: int = layer) -> None:
            records[layer].out = _first(out)[0]
            on_layer(layer, records[layer])
            records[layer] = LayerRecord()

        handles.append(block.register_forward_hook(done))
    try:
        with _recording(loaded, records), torch.inference_mode():
            loaded.model(**batch_inputs(loaded, [encoded]))
    finally:
        for h in handles:
            h.remove()


def layer_steps(loaded: LoadedModel, encoded: Encoded) -> list[dict[str, Any]]:
    """Every layer's two updates, dense (small models; checks and notebooks): ``attention`` and
    ``feedforward`` (``Step``s), ``tokens`` [query, key, d] and ``heads`` [query, key, H, d] (the
    attention step's token parts, per head), the model's own ``mid`` (A[l]) and ``out`` (X[l+1])."""
    arch = locate(loaded)
    steps: list[dict[str, Any]] = []

    def on_layer(layer: int, rec: LayerRecord) -> None:
        att, ffs = attention_step(rec, arch.layers[layer], loaded.n_heads), ff_step(rec, arch.layers[layer])
        n = att.resid.shape[0]
        i, j = (t.reshape(-1) for t in torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij"))
        assert rec.out is not None and rec.ff is not None
        mid = rec.mid if rec.mid is not None else rec.out - rec.ff
        steps.append({"attention": att, "feedforward": ffs, "tokens": att.tokens(0, n, n).transpose(0, 1),
                      "heads": att.heads(i, j).reshape(n, n, loaded.n_heads, -1), "mid": mid, "out": rec.out})

    run_layers(loaded, encoded, on_layer)
    return steps


# ------------------------------------------------------------------------------------- the graph


def _parallel(loaded: LoadedModel) -> bool:
    return loaded.arch is not None and loaded.arch.layout == "gpt_neox" and bool(
        loaded.config.get("use_parallel_residual", True))


def _graph(flows: list[LayerFlow], position: int, threshold: float, *, parallel: bool) -> tuple[list, list]:
    """Nodes and edges ≥ ``threshold`` on a path down from ``X[L]_position`` (module docstring)."""
    L = len(flows)
    edges: list[dict[str, Any]] = []
    nodes: dict[str, dict[str, Any]] = {}

    def node(kind: str, layer: int, pos: int) -> str:
        nid = f"{kind}{layer}_{pos}"
        nodes.setdefault(nid, {"id": nid, "kind": {"X": "state", "A": "attention", "M": "feedforward"}[kind],
                               "layer": layer, "position": pos})
        return nid

    def edge(kind: str, layer: int, src: str, dst: str, frm: int, to: int, w: float, **extra: Any) -> None:
        edges.append({"source": src, "target": dst, "kind": kind, "layer": layer, "from": frm, "to": to,
                      "importance": float(w), **extra})

    node("X", L, position)
    states = {position}
    for layer in reversed(range(L)):
        f = flows[layer]
        ff, ff_resid, attn_resid = f.ff.tolist(), f.ff_resid.tolist(), f.attn_resid.tolist()
        mids: set[int] = set()
        below: set[int] = set()
        for i in sorted(states):
            top = node("X", layer + 1, i)
            if ff[i] >= threshold:
                reader = node("X", layer, i) if parallel else node("A", layer, i)
                (below if parallel else mids).add(i)
                edge("ff-input", layer, reader, node("M", layer, i), i, i, ff[i])
                edge("feedforward", layer, node("M", layer, i), top, i, i, ff[i])
            if ff_resid[i] >= threshold:
                mids.add(i)
                edge("residual", layer, node("A", layer, i), top, i, i, ff_resid[i])
        for i in sorted(mids):
            mid = node("A", layer, i)
            nodes[mid]["bias"] = float(f.attn_bias[i])
            for e in f.by_row.get(i, []):
                j = int(f.cols[e])
                below.add(j)
                edge("attention", layer, node("X", layer, j), mid, j, i, f.values[e],
                     heads=[float(h) for h in f.heads[e]])
            if attn_resid[i] >= threshold:
                below.add(i)
                edge("residual", layer, node("X", layer, i), mid, i, i, attn_resid[i])
        states = below
    return list(nodes.values()), edges


def default_position(loaded: LoadedModel, n: int) -> int:
    """The prediction's position for a decoder (the last), the first token ([CLS]) for an encoder."""
    return n - 1 if loaded.causal else 0


def information_flow(
    loaded: LoadedModel,
    encoded: Encoded,
    *,
    position: int | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """SPEC 12's information-flow graph of ``encoded`` from ``position`` (None: ``default_position``).

    Keys: ``position``, ``threshold``, ``parallel_residual``, ``nodes`` [{id, kind, layer, position}],
    ``edges`` [{source, target, kind, layer, from, to, importance, heads?}], ``n_candidate_edges``
    (attention parts ≥ τ at any position), ``timings``; docs/results.md.
    """
    progress = progress or no_progress
    if not 0.0 < threshold < 1.0:
        raise HeadscopeError(f"threshold {threshold} must lie strictly between 0 and 1")
    n = encoded.n
    p = default_position(loaded, n) if position is None else int(position)
    if not 0 <= p < n:
        raise OutOfRangeError(f"position {p} is out of range: the text has positions 0-{n - 1}")
    arch = locate(loaded)
    flows: list[LayerFlow] = []
    start = time.perf_counter()

    def on_layer(layer: int, rec: LayerRecord) -> None:
        flows.append(layer_flow(rec, arch.layers[layer], loaded.n_heads, threshold=threshold, causal=loaded.causal))
        progress(0.95 * (layer + 1) / loaded.n_layers, f"information flow: layer {layer + 1}/{loaded.n_layers}")

    run_layers(loaded, encoded, on_layer)
    nodes, edges = _graph(flows, p, threshold, parallel=_parallel(loaded))
    progress(1.0, "information flow done")
    return {
        "position": p,
        "threshold": threshold,
        "parallel_residual": _parallel(loaded),
        "nodes": nodes,
        "edges": edges,
        "n_candidate_edges": int(sum(len(f.values) for f in flows)),
        "timings": {"flow_s": time.perf_counter() - start},
    }


def flow_section(ctx: Any) -> dict[str, Any]:
    """The pipeline's ``information-flow`` section (options ``position``, ``threshold``)."""
    o = ctx.options
    return information_flow(ctx.loaded, ctx.encoded, position=o.get("position"),
                            threshold=float(o.get("threshold", DEFAULT_THRESHOLD)), progress=ctx.progress)
