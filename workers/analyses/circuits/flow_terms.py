"""The parts of each layer's two updates, for the information-flow routes (docs/circuits.md;
``workers.analyses.circuits.information_flow`` computes their importances and the graph).

One forward records, per layer, what the update is made of (``LayerRecord``): the layer's input, the
values every head reads at every key (from the normalised input, value bias included; kv groups
expanded) and the attention weights (taken where the attention function hands them on: it is swapped,
for the block, for one that records and calls the model's own), the attention output, the feed-forward
output as it joins the stream, the layer's output. ``attention_step`` and ``ff_step`` turn a record into
the parts (``Step``) that add up to the update exactly (tests/test_information_flow.py, float64, every
family): post-norms frozen at the model's own scale, BERT's LayerNorms centring each part.

Notebook use::

    from workers.analyses.circuits.flow_terms import layer_steps
    steps = layer_steps(m, encode(m, text))   # per layer: the parts, per token and per head, dense
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from workers.models.adapters import Encoded, attention_modules
from workers.models.sublayers import Sublayers, batch_inputs, layer_stack, ln_stats, locate

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel

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

    def tokens(self, rows: torch.Tensor, keys: int) -> torch.Tensor:
        """[key, query, d]: the token parts of queries ``rows`` from keys 0..keys-1."""
        assert self.u is not None and self.weights is not None
        # contiguous operands: a strided batch of small products is far slower on CPU
        # (measured: docs/circuits.md, "Information flow routes", Cost)
        a = self.weights[:, rows, :keys].permute(2, 1, 0).contiguous()  # [key, query, H]
        z = torch.bmm(a, self.u[:, :keys].transpose(0, 1).contiguous())  # [key, query, d]
        return z if self.scale is None else z.mul_(self.scale[rows][None])

    def heads(self, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        """[edge, H, d]: each head's share of the parts (i[e], j[e])."""
        assert self.u is not None and self.weights is not None
        z = self.weights[:, i, j].T[..., None] * self.u[:, j].transpose(0, 1)  # [edge, H, d]
        return z if self.scale is None else z * self.scale[i][:, None]


def _centre(t: torch.Tensor) -> torch.Tensor:
    return t - t.mean(-1, keepdim=True)


def _scale(ln: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return ln_stats(ln, x[None])[0][0]  # [n, d]: the norm's g / s, frozen at the model's own s


def attention_step(rec: LayerRecord, la: Sublayers, n_heads: int) -> Step:
    """The attention update's parts (see the module docstring)."""
    assert rec.value is not None and rec.x is not None and rec.o is not None
    d = la.w_o.shape[1]
    dh = rec.value.shape[-1]
    w_o = la.w_o.detach().reshape(n_heads, dh, d).to(rec.value.dtype)
    u = torch.bmm(rec.value.contiguous(), w_o.contiguous())  # [H, n, d]
    n = rec.x.shape[0]
    bias = la.b_o.detach().to(u.dtype).expand(n, d)
    if (
        la.ln_attn is not None
    ):  # BERT: LN(x + o) = P(x) + Σ P(z) + P(b_O) + b, P(t) = g ⊙ (t - mean t) / s
        assert rec.ln_attn_in is not None
        scale = _scale(la.ln_attn, rec.ln_attn_in)
        ln_b = (
            la.ln_attn.bias.detach() if la.ln_attn.bias is not None else torch.zeros_like(bias[0])
        )
        return Step(
            scale * _centre(rec.x), scale * _centre(bias) + ln_b, _centre(u), rec.weights, scale
        )
    if (
        la.post_attn is not None
    ):  # Gemma 2/3: RMS-norm of the attention output alone, g / rms(o) frozen
        scale = _scale(la.post_attn, rec.o)
        return Step(rec.x, scale * bias, u, rec.weights, scale)
    return Step(rec.x, bias, u, rec.weights, None)


def ff_step(rec: LayerRecord, la: Sublayers) -> Step:
    """The feed-forward update's parts: the residual (the attention step's sum), the feed-forward output."""
    assert rec.ff is not None and rec.out is not None
    if la.ln_ff is not None:  # BERT: LN(mid + f) = P(mid) + P(f) + b
        assert rec.ln_ff_in is not None and rec.mid is not None
        scale = _scale(la.ln_ff, rec.ln_ff_in)
        ln_b = la.ln_ff.bias.detach() if la.ln_ff.bias is not None else torch.zeros_like(rec.ff[0])
        return Step(scale * _centre(rec.mid), ln_b.expand_as(rec.ff), ff=scale * _centre(rec.ff))
    return Step(rec.out - rec.ff, torch.zeros_like(rec.ff), ff=rec.ff)


def _capturing(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    *args: Any,
    **kwargs: Any,
) -> Any:
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

    def sink(
        kv: Callable[[torch.Tensor], None], kw: Callable[[torch.Tensor], None]
    ) -> Callable[..., None]:
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
    for layer, block in enumerate(layer_stack(loaded)[2]):
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


def run_layers(
    loaded: LoadedModel, encoded: Encoded, on_layer: Callable[[int, LayerRecord], None]
) -> None:
    """One forward of ``encoded``; ``on_layer(l, record)`` as each layer finishes (the record is then
    dropped, so one layer's tensors are alive at a time)."""
    records = [LayerRecord() for _ in range(loaded.n_layers)]
    handles = []
    for layer, block in enumerate(layer_stack(loaded)[2]):

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
        att, ffs = (
            attention_step(rec, arch.layers[layer], loaded.n_heads),
            ff_step(rec, arch.layers[layer]),
        )
        n = att.resid.shape[0]
        i, j = (
            t.reshape(-1) for t in torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
        )
        assert rec.out is not None and rec.ff is not None
        mid = rec.mid if rec.mid is not None else rec.out - rec.ff
        steps.append(
            {
                "attention": att,
                "feedforward": ffs,
                "tokens": att.tokens(torch.arange(n), n).transpose(0, 1),
                "heads": att.heads(i, j).reshape(n, n, loaded.n_heads, -1),
                "mid": mid,
                "out": rec.out,
            }
        )

    run_layers(loaded, encoded, on_layer)
    return steps
