"""Term importance (docs/decomposition.md): every hidden state split exactly into input, attention,
feed-forward and bias terms, and how much each term weighs per layer."""

from __future__ import annotations

from workers.core.memory import Base, Footprint
from workers.core.options import Selection, TextOptions
from workers.core.registry import AnalysisSpec, register

DECOMPOSITION = "decomposition"


class DecompositionOptions(TextOptions, Selection):
    """``dtype`` picks the precision (float64 reconstructs X[l] to < 1e-9); ``layer`` the state of
    the per-head view (default: the last)."""


def memory(base: Base, options: DecompositionOptions) -> Footprint:
    """Every state's four terms (and their stacked copy), the states, the recorded context vectors
    and feed-forward outputs, the head importances, one layer's products; the model again in
    float64 when asked."""
    f, n = base.facts, base.n
    L, H, d, b = f.n_layers, f.n_heads, f.hidden, f.dtype_bytes
    hd = f.head_dim or d // H
    db = 8 if options.dtype == "float64" else 4
    S = L + 1
    ctx = H * hd
    dec = (
        2 * S * 4 * n * d * db  # terms of every state, and their stacked copy
        + 4 * S * n * d * db  # hidden states (HF's, stacked, re-normed) and importance weights
        + 2 * L * n * (ctx + d) * db  # context vectors and feed-forward outputs, recorded, unbiased
        + S * L * H * n * db  # head importances
        + S * n * (d + 2 * ctx) * db  # one layer's [state, n, .] importance products
    )
    extra = f.n_params * (db - b) if db > b else 0  # the model again in float64
    return Footprint(stages={DECOMPOSITION: base.forward + dec + extra})


SPEC = register(
    AnalysisSpec(
        kind=DECOMPOSITION,
        report="workers.analyses.decomposition.report:decomposition",
        summary="term importance: every hidden state = input + attention + feed-forward + bias",
        options=DecompositionOptions,
        section="workers.analyses.decomposition.section:decomposition",
        order=20,
        weight=2.0,
        needs={"whole_text"},
        memory=memory,
        first_stage=True,
    )
)
