"""The edge graph of a decoder and the forward that reads it (docs/circuits.md).

Nodes that write to the residual stream ("writers"): the **input** ``X[0]`` (token embeddings, with
position embeddings and scaling where the family adds them), every **head** (l, h) — its
``z_{l,h} W_O^{(h)}`` plus its share ``b_O / H`` of the output bias, times the post-attention norm's
scale where the family has one (Gemma 2/3: the scale of the run at hand, so the heads' writes add up
to the branch's output exactly) — and every **feed-forward** (its branch's whole output). Inputs that
read the stream ("readers"): each head's **q**, **k** and **v** (per *query* head under grouped-query
attention: the key/value head's weights read that head's own copy), each feed-forward, and the
**logits** (the final norm's input). An edge u -> v exists when u writes to the stream v reads: u in
an earlier layer, or a head of layer l into the feed-forward of layer l in sequential families
(``Graph.parallel``: GPT-NeoX's attention and feed-forward of one layer read the same stream).

``SplitModel`` runs the model with every reader's input its own tensor, two ways:

- ``plain``: the ordinary forward (every reader reads the running stream, ``X[l] = sum of writers``),
  optionally differentiable, with a gradient hook per reader group (EAP's ``∂m/∂x_v``);
- ``patched``: the edge-patched run, every reader's input ``x_v^K + sum over kept edges u -> v of
  (u* - u_K)``, u* the writer's output in this run; one row per circuit, batched.

Each layer's attention runs through the model's own attention module (its rotary embeddings, q/k
norms, scaling, soft-capping and masks), with its projections swapped for stubs that return the
per-head projections of the readers' inputs and capture the heads' outputs z; the layer's keyword
arguments (mask, rotary tables) are the model's own, captured by a forward whose layers are stubs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from workers.analyses.causal.views import final_norm, head_of
from workers.core.errors import HeadscopeError
from workers.models.adapters import Encoded
from workers.models.families import resolve
from workers.models.sublayers import batch_inputs, layer_stack, ln_stats

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel

INPUTS = ("q", "k", "v")
_DROPPED = {
    "hidden_states",
    "cache",
    "layer_past",
    "past_key_values",
    "use_cache",
    "encoder_hidden_states",
    "encoder_attention_mask",
    "output_attentions",
    "self",
}


@dataclass
class Graph:
    """Writers and readers of a model with ``n_layers`` x ``n_heads`` heads, and the flat edge layout:
    per layer the heads' edges ``[q|k|v][head][upstream writer]``, then the feed-forward's
    ``[upstream writer]``; the logits' ``[writer]`` last."""

    n_layers: int
    n_heads: int
    parallel: bool

    @property
    def n_writers(self) -> int:
        return 1 + self.n_layers * (self.n_heads + 1)

    def head(self, layer: int, head: int) -> int:
        return 1 + layer * (self.n_heads + 1) + head

    def ff(self, layer: int) -> int:
        return 1 + layer * (self.n_heads + 1) + self.n_heads

    def up_heads(self, layer: int) -> int:
        """Writers the heads of ``layer`` read: the input and every node of the layers below."""
        return 1 + layer * (self.n_heads + 1)

    def up_ff(self, layer: int) -> int:
        """Writers the feed-forward of ``layer`` reads (its own layer's heads too, unless parallel)."""
        return self.up_heads(layer) + (0 if self.parallel else self.n_heads)

    @cached_property
    def starts(self) -> tuple[list[int], list[int], int, int]:
        """Flat offsets: per layer of its heads' block and its feed-forward's block; the logits'
        block; the total edge count."""
        heads, ffs, at = [], [], 0
        for layer in range(self.n_layers):
            heads.append(at)
            at += 3 * self.n_heads * self.up_heads(layer)
            ffs.append(at)
            at += self.up_ff(layer)
        return heads, ffs, at, at + self.n_writers

    @property
    def n_edges(self) -> int:
        return self.starts[3]

    def blocks(
        self, flat: torch.Tensor
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
        """Views of ``flat`` [..., n_edges]: per layer the heads' [..., 3, H, up] and the feed-forward's
        [..., up]; the logits' [..., writers]."""
        heads, ffs, logits, _ = self.starts
        lead = flat.shape[:-1]
        h = [
            flat[..., heads[i] : ffs[i]].reshape(*lead, 3, self.n_heads, self.up_heads(i))
            for i in range(self.n_layers)
        ]
        f = [flat[..., ffs[i] : ffs[i] + self.up_ff(i)] for i in range(self.n_layers)]
        return h, f, flat[..., logits:]

    def writer_id(self, w: int) -> str:
        if w == 0:
            return "input"
        layer, slot = divmod(w - 1, self.n_heads + 1)
        return f"FF{layer}" if slot == self.n_heads else f"L{layer}H{slot}"

    def nodes(self) -> list[dict[str, Any]]:
        """Every node in forward order (docs/results.md, ``edge-attribution``)."""
        out: list[dict[str, Any]] = [{"id": "input", "kind": "input", "layer": -1, "head": None}]
        for layer in range(self.n_layers):
            out += [
                {"id": f"L{layer}H{h}", "kind": "head", "layer": layer, "head": h}
                for h in range(self.n_heads)
            ]
            out.append({"id": f"FF{layer}", "kind": "feedforward", "layer": layer, "head": None})
        return [*out, {"id": "logits", "kind": "logits", "layer": self.n_layers, "head": None}]

    def edges_of(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For flat edge indices: the source writer, the target node (writer index of the head or
        feed-forward; ``n_writers`` for the logits) and the input (0 q, 1 k, 2 v, -1 none)."""
        heads, ffs, logits, _ = self.starts
        index = np.asarray(index, dtype=np.int64)
        src = np.zeros_like(index)
        tgt = np.full_like(index, self.n_writers)
        inp = np.full_like(index, -1)
        at_logits = index >= logits
        src[at_logits] = index[at_logits] - logits
        bounds = np.asarray(heads + [logits])
        layer = np.searchsorted(bounds, index, side="right") - 1
        for i in np.unique(layer[~at_logits]).tolist():
            sel = (layer == i) & ~at_logits
            rel = index[sel] - heads[i]
            up = self.up_heads(i)
            in_ff = index[sel] >= ffs[i]
            kind, rest = np.divmod(rel, self.n_heads * up)
            hh, uu = np.divmod(rest, up)
            s = np.where(in_ff, index[sel] - ffs[i], uu)
            t = np.where(in_ff, self.ff(i), 1 + i * (self.n_heads + 1) + hh)
            src[sel], tgt[sel], inp[sel] = s, t, np.where(in_ff, -1, kind)
        return src, tgt, inp

    def counts(self) -> dict[str, int]:
        per_head = sum(self.n_heads * self.up_heads(i) for i in range(self.n_layers))
        return {
            "q": per_head,
            "k": per_head,
            "v": per_head,
            "feedforward": sum(self.up_ff(i) for i in range(self.n_layers)),
            "logits": self.n_writers,
        }


class _Stub(torch.nn.Module):
    """Stands in for a module during a call: records its input, returns ``value`` (or its input)."""

    def __init__(self, value: torch.Tensor | None = None):
        super().__init__()
        self.value = value
        self.seen: torch.Tensor | None = None

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        self.seen = x
        return self.value if self.value is not None else x


class _Layer(torch.nn.Module):
    """Stands in for a decoder layer during the capture forward: keeps the keyword arguments its
    attention will need and its input (``X[0]`` at layer 0), and passes the stream through."""

    def __init__(self, real: torch.nn.Module, sink: list[Any]):
        super().__init__()
        self.signature = inspect.signature(real.forward)
        self.sink = sink

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        bound = self.signature.bind(*args, **kwargs).arguments
        extra = {}
        for name, param in self.signature.parameters.items():
            if param.kind is inspect.Parameter.VAR_KEYWORD and name in bound:
                extra = bound.pop(name)
        hidden = bound["hidden_states"]
        keep = {k: v for k, v in {**bound, **extra}.items() if k not in _DROPPED}
        self.sink.append((hidden, keep))
        return hidden


@dataclass
class Parts:
    """One layer's pieces for the split forward (weights per query head, modules as the model has them)."""

    attn: torch.nn.Module
    ln_attn: torch.nn.Module
    ln_ff: torch.nn.Module
    mlp: torch.nn.Module
    post_attn: torch.nn.Module | None
    post_ff: torch.nn.Module | None
    wq: torch.Tensor  # [H, dh, d]
    wk: torch.Tensor  # [H, dh, d] (the key/value head's weights repeated per query head)
    wv: torch.Tensor
    bq: torch.Tensor  # [H, dh]
    bk: torch.Tensor
    bv: torch.Tensor
    wo: torch.Tensor  # [H, dh, d]
    bo: torch.Tensor  # [d]
    stubs: dict[str, str] = field(
        default_factory=dict
    )  # projection attribute -> how its output is laid out


def _bias(module: torch.nn.Module, rows: int, like: torch.Tensor) -> torch.Tensor:
    b = getattr(module, "bias", None)
    return b if b is not None else torch.zeros(rows, dtype=like.dtype, device=like.device)


def _parts(loaded: LoadedModel, layer: torch.nn.Module) -> Parts:
    fam = loaded.arch
    assert fam is not None
    H, kv = loaded.n_heads, max(1, loaded.n_kv_heads or loaded.n_heads)
    attn = resolve(layer, fam.attention)
    out = resolve(layer, fam.out_proj)
    if fam.layout == "gpt2":  # Conv1D: x @ W + b, W [d, 3d]
        w = attn.c_attn.weight
        d = w.shape[0]
        dh = d // H
        b = _bias(attn.c_attn, 3 * d, w)
        qkv = [w[:, i * d : (i + 1) * d].T.reshape(H, dh, d) for i in range(3)]
        bqkv = [b[i * d : (i + 1) * d].reshape(H, dh) for i in range(3)]
        wo = out.weight.reshape(H, dh, d)
        norms = (layer.ln_1, layer.ln_2, layer.mlp, None, None)
        stubs = {"c_attn": "cat"}
    elif fam.layout == "gpt_neox":  # fused per head: [H, (q, k, v), dh] rows
        w = attn.query_key_value.weight
        d = w.shape[1]
        dh = w.shape[0] // (3 * H)
        b = _bias(attn.query_key_value, 3 * H * dh, w).reshape(H, 3, dh)
        qkv = [w.reshape(H, 3, dh, d)[:, i] for i in range(3)]
        bqkv = [b[:, i] for i in range(3)]
        wo = out.weight.T.reshape(H, dh, d)
        norms = (layer.input_layernorm, layer.post_attention_layernorm, layer.mlp, None, None)
        stubs = {"query_key_value": "per_head"}
    else:  # llama layout: q/k/v projections (Phi-3: fused), o_proj
        d = out.weight.shape[0]
        dh = out.weight.shape[1] // H
        if hasattr(attn, "qkv_proj"):
            w = attn.qkv_proj.weight
            b = _bias(attn.qkv_proj, w.shape[0], w)
            cuts = [0, H * dh, (H + kv) * dh, (H + 2 * kv) * dh]
            ws = [w[cuts[i] : cuts[i + 1]] for i in range(3)]
            bs = [b[cuts[i] : cuts[i + 1]] for i in range(3)]
            stubs = {"qkv_proj": "cat"}
        else:
            mods = [attn.q_proj, attn.k_proj, attn.v_proj]
            ws = [m.weight for m in mods]
            bs = [_bias(m, m.weight.shape[0], m.weight) for m in mods]
            stubs = {"q_proj": "q", "k_proj": "k", "v_proj": "v"}
        group = H // kv
        qkv = [ws[0].reshape(H, dh, d)] + [
            x.reshape(kv, dh, d).repeat_interleave(group, 0) for x in ws[1:]
        ]
        bqkv = [bs[0].reshape(H, dh)] + [
            x.reshape(kv, dh).repeat_interleave(group, 0) for x in bs[1:]
        ]
        wo = out.weight.T.reshape(H, dh, d)
        sandwich = fam.post_norms is not None
        ff_norm = layer.pre_feedforward_layernorm if sandwich else layer.post_attention_layernorm
        post = (
            (layer.post_attention_layernorm, layer.post_feedforward_layernorm)
            if sandwich
            else (None, None)
        )
        norms = (layer.input_layernorm, ff_norm, layer.mlp, *post)
    stubs[fam.out_proj.rpartition(".")[2]] = "out"
    return Parts(
        attn,
        norms[0],
        norms[1],
        norms[2],
        norms[3],
        norms[4],
        *qkv,
        *bqkv,
        wo,
        _bias(out, d, wo),
        stubs,
    )


@dataclass
class Plain:
    """A plain run's rows: ``writers`` [B, W, n, d] (detached), ``resid`` [B, L+1, n, d] (``X[l]``, the
    stream each layer's heads read; ``X[L]`` the logits' input), ``mid`` [B, L, n, d] (the stream each
    feed-forward reads) and the last position's logits [B, vocabulary]."""

    writers: torch.Tensor
    resid: torch.Tensor
    mid: torch.Tensor
    logits: torch.Tensor


Hooks = Callable[[str, int, torch.Tensor], None]  # (kind "heads"|"ff"|"logits", layer, grad)


class SplitModel:
    """The forward of ``loaded`` with every reader's input its own tensor (module docstring)."""

    def __init__(self, loaded: LoadedModel):
        fam = loaded.arch
        if fam is None or not fam.causal:
            raise HeadscopeError(
                f"edge attribution needs a decoder; {loaded.name} is a {loaded.family} encoder"
            )
        self.loaded = loaded
        self.unembed = head_of(loaded)
        self.norm = final_norm(loaded)
        layers = list(resolve(loaded.model, fam.layers))
        parallel = fam.layout == "gpt_neox" and bool(
            loaded.config.get("use_parallel_residual", True)
        )
        self.graph = Graph(loaded.n_layers, loaded.n_heads, parallel)
        self.parts = [_parts(loaded, layer) for layer in layers]
        self.layout = fam.layout

    # ------------------------------------------------------------------ the model's own arguments
    @torch.no_grad()  # not inference mode: the rotary tables go into differentiated runs
    def capture(self, encoded: Encoded) -> tuple[torch.Tensor, list[dict[str, Any]]]:
        """``X[0]`` [n, d] of ``encoded`` and each layer's keyword arguments (mask, rotary tables), from
        a forward whose layers are stubs (nothing but the embedding runs)."""
        parent, attr, full = layer_stack(self.loaded)
        sink: list[Any] = []
        setattr(parent, attr, torch.nn.ModuleList([_Layer(layer, sink) for layer in full]))
        try:
            self.loaded.model(**batch_inputs(self.loaded, [encoded]), use_cache=False)
        finally:
            setattr(parent, attr, full)
        return sink[0][0][0], [kw for _, kw in sink]

    # ------------------------------------------------------------------ one layer's nodes
    def heads(
        self,
        layer: int,
        xs: torch.Tensor,
        kwargs: dict[str, Any],
        qkv: tuple[torch.Tensor, ...] | None = None,
    ) -> torch.Tensor:
        """Writes [B, H, n, d] of layer ``layer``'s heads whose q, k and v read ``xs`` [B, 3, H, n, d];
        ``qkv``: their projections [B, n, H, dh] each, already computed from ``xs``."""
        p = self.parts[layer]
        B, _, H, n, d = xs.shape
        if qkv is None:
            normed = p.ln_attn(xs)
            qkv = tuple(
                torch.einsum("bhnd,hed->bnhe", normed[:, i], w) + b
                for i, (w, b) in enumerate(((p.wq, p.bq), (p.wk, p.bk), (p.wv, p.bv)))
            )
        q, k, v = qkv
        dh = q.shape[-1]
        flat = [t.reshape(B, n, H * dh) for t in (q, k, v)]
        stubs: dict[str, _Stub] = {}
        for name, how in p.stubs.items():
            if how == "cat":
                stubs[name] = _Stub(torch.cat(flat, dim=-1))
            elif how == "per_head":
                stubs[name] = _Stub(torch.stack([q, k, v], dim=3).reshape(B, n, 3 * H * dh))
            elif how == "out":
                stubs[name] = _Stub()
            else:
                stubs[name] = _Stub(flat[INPUTS.index(how)])
        with _swapped(p.attn, stubs, {"num_key_value_groups": 1, "num_key_value_heads": H}):
            dummy = xs.new_zeros(()).expand(B, n, d)
            p.attn(hidden_states=dummy, **kwargs)
        out_name = next(name for name, how in p.stubs.items() if how == "out")
        z = stubs[out_name].seen  # [B, n, H*dh]
        assert z is not None
        writes = torch.einsum("bnhe,hed->bhnd", z.reshape(B, n, H, dh), p.wo) + p.bo / H
        if (
            p.post_attn is not None
        ):  # the branch's norm, its scale this run's own: the writes add up to it
            scale, _, _ = ln_stats(p.post_attn, writes.sum(1))
            writes = writes * scale[:, None]
        return writes

    def ff(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """Write [B, n, d] of layer ``layer``'s feed-forward reading ``x`` [B, n, d]."""
        p = self.parts[layer]
        out = p.mlp(p.ln_ff(x))
        out = out[0] if isinstance(out, tuple) else out
        return p.post_ff(out) if p.post_ff is not None else out

    def logits(self, x_last: torch.Tensor, ids: Sequence[int] | None = None) -> torch.Tensor:
        """Logits [B, vocabulary] of the final norm's input at the last position ``x_last`` [B, d];
        with ``ids`` only those vocabulary entries [B, len(ids)]."""
        normed = self.norm(x_last[:, None])[:, 0]
        return self.unembed.logits(normed) if ids is None else self.unembed.logits_of(normed, ids)

    # ------------------------------------------------------------------ the two runs
    def plain(
        self, x0: torch.Tensor, kwargs: list[dict[str, Any]], *, hooks: Hooks | None = None
    ) -> Plain:
        """The ordinary forward of rows ``x0`` [B, n, d]; with ``hooks`` (and ``x0`` requiring grad) each
        reader group's input is its own tensor whose gradient is handed to ``hooks(kind, layer, grad)``:
        ``heads`` [B, 3, H, n, d], ``ff`` [B, n, d], ``logits`` [B, d] (the last position)."""
        g = self.graph
        B, n, d = x0.shape
        H = g.n_heads
        writers, resid, mid = [x0], [x0], []
        x = x0
        for layer in range(g.n_layers):
            xs = x[:, None, None].expand(B, 3, H, n, d)
            if hooks is not None:
                xs.register_hook(lambda grad, layer=layer: hooks("heads", layer, grad))
            w = self.heads(layer, xs, kwargs[layer])
            after = x + w.sum(1)
            x_ff = x if g.parallel else after
            if not g.parallel:
                mid.append(after)
            else:
                mid.append(x)
            x_ff = x_ff.view_as(x_ff)
            if hooks is not None:
                x_ff.register_hook(lambda grad, layer=layer: hooks("ff", layer, grad))
            f = self.ff(layer, x_ff)
            x = after + f
            writers += [*w.unbind(1), f]
            resid.append(x)
        last = x[:, -1].view_as(x[:, -1])
        if hooks is not None:
            last.register_hook(lambda grad: hooks("logits", g.n_layers, grad))
        logits = self.logits(last)
        det = [t.detach() for t in writers]
        return Plain(
            torch.stack(det, 1),
            torch.stack([t.detach() for t in resid], 1),
            torch.stack([t.detach() for t in mid], 1),
            logits,
        )

    @torch.inference_mode()
    def patched(
        self,
        base: Plain,
        x0: torch.Tensor,
        masks: torch.Tensor,
        kwargs: list[dict[str, Any]],
        *,
        on_layer: Callable[[int], None] | None = None,
    ) -> torch.Tensor:
        """Logits [R, vocabulary] at the last position of R edge-patched runs: ``base`` the corrupted
        run (one row), ``x0`` [n, d] the clean input, ``masks`` [R, n_edges] (1: the edge is in that
        run's circuit). Every reader's input is ``x_v^K + sum_u mask(u -> v) (u* - u_K)``.
        ``on_layer(layer)`` after each layer (progress)."""
        g = self.graph
        R = masks.shape[0]
        Wn, n, d = base.writers.shape[1:]
        wk, rk, mk = base.writers[0], base.resid[0], base.mid[0]
        mh, mf, ml = g.blocks(masks.to(wk.dtype))
        delta = wk.new_zeros(R, Wn, n, d)
        delta[:, 0] = x0 - wk[0]
        H = g.n_heads
        for layer in range(g.n_layers):
            up = g.up_heads(layer)
            mix = torch.bmm(mh[layer].reshape(R, 3 * H, up), delta[:, :up].reshape(R, up, n * d))
            xs = rk[layer] + mix.reshape(R, 3, H, n, d)
            w = self.heads(layer, xs, kwargs[layer])  # [R, H, n, d]
            h0 = g.head(layer, 0)
            delta[:, h0 : h0 + H] = w - wk[h0 : h0 + H]
            upf = g.up_ff(layer)
            x_ff = mk[layer] + torch.bmm(
                mf[layer][:, None], delta[:, :upf].reshape(R, upf, n * d)
            ).reshape(R, n, d)
            delta[:, g.ff(layer)] = self.ff(layer, x_ff) - wk[g.ff(layer)]
            if on_layer is not None:
                on_layer(layer)
        x_last = rk[g.n_layers, -1] + torch.bmm(ml[:, None], delta[:, :, -1]).reshape(R, d)
        return self.logits(x_last)


@contextmanager
def _swapped(
    module: torch.nn.Module, stubs: dict[str, torch.nn.Module], attrs: dict[str, Any]
) -> Iterator[None]:
    """Within the block ``module``'s submodules ``stubs`` and the attributes ``attrs`` it has are replaced."""
    saved_mods = {name: getattr(module, name) for name in stubs}
    saved_attrs = {name: getattr(module, name) for name in attrs if hasattr(module, name)}
    for name, stub in stubs.items():
        setattr(module, name, stub)
    for name in saved_attrs:
        setattr(module, name, attrs[name])
    try:
        yield
    finally:
        for name, mod in saved_mods.items():
            setattr(module, name, mod)
        for name, value in saved_attrs.items():
            setattr(module, name, value)
