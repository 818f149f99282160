"""AtP*'s query–key fix (Kramár et al. 2024, section 3.1.1): the effect of patching a head's query or key
from the clean run C into the corrupted run K, with the head's softmax recomputed instead of linearised.

Nodes: the query ``q_{h,s}`` and the key ``k_{h,t}`` of each head at each position, as the attention
function receives them (after rotary embeddings and q/k norms; under grouped-query attention the key of
query head h, so patching it changes head h's scores only). With ``x = c·tanh(σ q·k / c)`` the scores
(``σ`` the scale; ``c`` Gemma 2's soft-cap, else no cap), ``A = softmax(x + mask)`` the pattern and
``G = ∂m/∂A`` on K's run:

- AtP (linear): ``Δq_s · ∂m/∂q_s`` and ``Δk_t · ∂m/∂k_t`` through the softmax's Jacobian;
- AtP*: the row of each query recomputed exactly with the patched query, ``(A'_s - A_s)·G_s``; for a key,
  every query's row with the one score ``x_{s,t}`` changed, ``Σ_s (A'_s - A_s)·G_s``, in closed form:
  ``A'_{s,t} = sigmoid(x'_{s,t} - log Σ_{j≠t} exp x_{s,j})`` and the other entries scaled by
  ``(1 - A'_{s,t}) / (1 - A_{s,t})``. A saturated row (one key near 1) changes as the softmax does, where
  the linearisation sees a zero gradient.

The scores are recomputed from the recorded q, k, scale, cap and mask and checked against the model's own
pattern, so a family whose attention differs is refused rather than estimated wrongly.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from workers.core.errors import HeadscopeError
from workers.models.adapters import attention_modules

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel

RECORD = "headscope_record_qk"
Edit = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]
]


@dataclass
class Attn:
    """One layer's attention as the function saw it (one text): q, k per query head [H, n, dh], the scale,
    the soft-cap (or None), the additive mask [n, n] (0 where a key is visible) and the pattern as the
    function returned it, [1, H, n, n] (the very tensor of the autograd graph when the run keeps one: a
    gradient is taken with respect to it)."""

    q: torch.Tensor
    k: torch.Tensor
    scale: float
    softcap: float | None
    mask: torch.Tensor
    weights: torch.Tensor


def _scale_of(module: torch.nn.Module, kwargs: dict[str, Any], dh: int) -> float:
    if kwargs.get("scaling") is not None:
        return float(kwargs["scaling"])
    scale = dh**-0.5 if getattr(module, "scale_attn_weights", True) else 1.0  # GPT-2's own eager
    if getattr(module, "scale_attn_by_inverse_layer_idx", False):
        scale /= float(module.layer_idx + 1)
    return scale


def _recording(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    *args: Any,
    **kwargs: Any,
) -> Any:
    """The attention function while recording: the module's own, then (q, k, ...) to the module's sink."""
    edit = getattr(module, "_hs_edit", None)
    if edit is not None:
        query, key, value = edit(query, key, value)
    out = module._hs_inner(module, query, key, value, attention_mask, *args, **kwargs)
    groups = query.shape[1] // key.shape[1]
    keys = key.repeat_interleave(groups, dim=1) if groups > 1 else key
    n = query.shape[2]
    mask = (
        attention_mask[0, 0, :, -keys.shape[2] :]
        if attention_mask is not None
        else query.new_zeros(n, n)
    )
    module._hs_sink.append(
        Attn(
            query[0],
            keys[0],
            _scale_of(module, kwargs, query.shape[-1]),
            kwargs.get("softcap"),
            mask.to(query.dtype),
            out[1],
        )
    )
    return out


@contextmanager
def record_attention(
    loaded: LoadedModel, sink: list[Attn], edit: dict[int, Edit] | None = None
) -> Iterator[None]:
    """Within the block each forward (one text) appends every layer's ``Attn`` to ``sink``; ``edit[layer]``
    may change that layer's (query, key, value) first (tests: a shifted key; real query/key patching)."""
    from transformers.masking_utils import AttentionMaskInterface, eager_mask
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface

    AttentionInterface.register(RECORD, _recording)
    AttentionMaskInterface.register(RECORD, eager_mask)
    config = loaded.model.config
    before = config._attn_implementation
    modules = attention_modules(loaded)
    for i, module in enumerate(modules):
        own = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
        module._hs_inner = ALL_ATTENTION_FUNCTIONS.get_interface(before, own)
        module._hs_sink = sink
        module._hs_edit = (edit or {}).get(i)
    config._attn_implementation = RECORD
    try:
        yield
    finally:
        config._attn_implementation = before
        for module in modules:
            for name in ("_hs_inner", "_hs_sink", "_hs_edit"):
                if hasattr(module, name):
                    delattr(module, name)


def scores(a: Attn, q: torch.Tensor | None = None, k: torch.Tensor | None = None) -> torch.Tensor:
    """Scores ``x`` [H, n, n] (before the mask) of queries ``q`` and keys ``k`` (default: the recorded)."""
    x = torch.einsum("hsd,htd->hst", a.q if q is None else q, a.k if k is None else k) * a.scale
    return x if a.softcap is None else torch.tanh(x / a.softcap) * a.softcap


def check(a: Attn, layer: int) -> None:
    """The recomputed pattern is the model's own (else this family's attention is not what we model)."""
    again = torch.softmax((scores(a) + a.mask).double(), dim=-1)
    err = float((again - a.weights.detach()[0].double()).abs().max())
    tol = 1e-9 if a.q.dtype == torch.float64 else 1e-4
    if not math.isfinite(err) or err > tol:
        raise HeadscopeError(
            f"the query-key fix cannot model layer {layer}'s attention (pattern off by {err:.2g})"
        )


def _visible(a: Attn) -> torch.Tensor:
    return a.mask > torch.finfo(a.mask.dtype).min / 2  # [n, n]


def linear(
    a: Attn, g: torch.Tensor, q_c: torch.Tensor, k_c: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain AtP of every query and key [H, n]: ``Δ · ∂m/∂node`` through the softmax's Jacobian (float64)."""
    A, G = a.weights.detach()[0].double(), g[0].double()
    x = torch.einsum("hsd,htd->hst", a.q.double(), a.k.double()) * a.scale
    dlogit = A * (G - (A * G).sum(-1, keepdim=True))  # ∂m/∂(score after the cap)
    if a.softcap is not None:
        dlogit = dlogit * (1 - torch.tanh(x / a.softcap) ** 2)
    dlogit = dlogit * a.scale * _visible(a)
    dq = torch.einsum("hst,htd->hsd", dlogit, a.k.double())
    dk = torch.einsum("hst,hsd->htd", dlogit, a.q.double())
    return ((q_c.double() - a.q.double()) * dq).sum(-1), ((k_c.double() - a.k.double()) * dk).sum(
        -1
    )


def fixed(
    a: Attn, g: torch.Tensor, q_c: torch.Tensor, k_c: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """AtP* of every query and key [H, n] (module docstring), float64."""
    A, G = a.weights.detach()[0].double(), g[0].double()
    vis = _visible(a)
    big = torch.finfo(torch.float64).min
    x = torch.where(vis, scores(a).double(), big)  # [H, s, t]
    # queries: row s recomputed with q_C at s
    xq = torch.where(vis, scores(a, q=q_c).double(), big)
    queries = ((torch.softmax(xq, dim=-1) - A) * G).sum(-1)
    # keys: entry (s, t) changed to x'_{s,t}; log-sum-exp of the row without t (exact for the row's largest)
    x_new = torch.where(vis, scores(a, k=k_c).double(), big)
    lse = torch.logsumexp(x, dim=-1, keepdim=True)
    p = torch.softmax(x, dim=-1)
    without = lse + torch.log1p(-p.clamp(max=0.5))
    top = x.argmax(-1, keepdim=True)  # [H, s, 1]: the one entry a row may have above 1/2
    rest = x.scatter(-1, top, big)
    lse_top = torch.logsumexp(rest, dim=-1, keepdim=True)
    without = without.scatter(-1, top, lse_top)
    new_t = torch.sigmoid(x_new - without)  # A'_{s,t}
    S = (p * G).sum(-1, keepdim=True)
    others = (S - p * G) / (1 - p).clamp(min=0.5)  # Σ_{j≠t} A_j G_j / Σ_{j≠t} A_j
    others = others.scatter(-1, top, (torch.softmax(rest, dim=-1) * G).sum(-1, keepdim=True))
    effect = (new_t - p) * (G - others) * vis
    return queries, effect.sum(1)


@torch.no_grad()
def qk_section(
    clean: list[Attn], corrupted: list[Attn], grads: list[torch.Tensor], scale: float
) -> dict[str, Any]:
    """The result keys of the fix (docs/results.md, ``attribution-patching`` with ``qk_fix``): AtP* and
    plain AtP of every head's queries and keys, as fractions of ``m_C - m_K`` (``scale``), and where the
    fix changes the ranking."""
    from scipy import stats

    est: dict[str, list[torch.Tensor]] = {
        "queries": [],
        "keys": [],
        "queries_linear": [],
        "keys_linear": [],
    }
    for layer, (c, k, g) in enumerate(zip(clean, corrupted, grads, strict=True)):
        check(k, layer)
        q_fix, k_fix = fixed(k, g, c.q, c.k)
        q_lin, k_lin = linear(k, g, c.q, c.k)
        for name, t in zip(est, (q_fix, k_fix, q_lin, k_lin), strict=True):
            est[name].append(t / scale)
    grids = {name: torch.stack(ts).cpu().numpy() for name, ts in est.items()}  # [L, H, n]
    out: dict[str, Any] = {}
    for name in ("queries", "keys"):
        out[f"{name}_by_position"] = grids[name]
        out[name] = grids[name].sum(-1)
        out[f"{name}_linear_by_position"] = grids[f"{name}_linear"]
        out[f"{name}_linear"] = grids[f"{name}_linear"].sum(-1)
    # where the fix changes the ranking: nodes (head x position) ordered by |AtP*| against |AtP|
    L, H, n = grids["keys"].shape
    rows = []
    for name in ("queries", "keys"):
        fix, lin = grids[name].ravel(), grids[f"{name}_linear"].ravel()
        rank_fix = stats.rankdata(-abs(fix), method="min")
        rank_lin = stats.rankdata(-abs(lin), method="min")
        for i in abs(fix).argsort()[::-1][:10]:
            layer, rest = divmod(int(i), H * n)
            kind = {"queries": "query", "keys": "key"}[name]
            rows.append(
                {
                    "node": f"L{layer}H{rest // n} {kind} {rest % n}",
                    "kind": kind,
                    "layer": layer,
                    "head": rest // n,
                    "position": rest % n,
                    "atp_star": float(fix[i]),
                    "atp": float(lin[i]),
                    "rank_star": int(rank_fix[i]),
                    "rank_atp": int(rank_lin[i]),
                }
            )
        rho = stats.spearmanr(abs(fix), abs(lin))[0] if fix.std() > 0 and lin.std() > 0 else None
        out[f"{name}_rank_spearman"] = None if rho is None else float(rho)
    out["qk_top"] = sorted(rows, key=lambda r: -abs(r["atp_star"]))
    return out
