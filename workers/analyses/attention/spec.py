"""Maximum attention (docs/analyses.md#maximum-attention): what each key receives at most, per head."""

from __future__ import annotations

from typing import Any

from workers.core.memory import F8, Base, Footprint
from workers.core.options import TextOptions
from workers.core.registry import AnalysisSpec, register

MAX_ATTENTION = "max-attention"


class MaxAttentionOptions(TextOptions):
    """Max attention reads only how the text is encoded (``drop_special`` leaves special keys out)."""


def memory(base: Base, options: MaxAttentionOptions) -> Footprint:
    """A float64 view of one layer's maps while the pass feeds it, and the [layer, head, key] results."""
    f, n = base.facts, base.n
    return Footprint(
        streamed={MAX_ATTENTION: f.n_heads * n * n * F8 + 2 * f.n_layers * f.n_heads * n * F8}
    )


def short(options: Any) -> bool:
    """Max attention alone takes seconds at any size: the short queue."""
    return True


SPEC = register(
    AnalysisSpec(
        kind=MAX_ATTENTION,
        report="workers.analyses.attention.report:max_attention",
        summary="max and mean attention each token receives, per layer and head (the heatmaps)",
        options=MaxAttentionOptions,
        section="workers.analyses.attention.section:max_attention",
        plan="workers.analyses.attention.section:plan",
        order=10,
        weight=1.0,
        needs={"whole_text"},
        streamed=True,
        memory=memory,
        first_stage=True,
        short=short,
    )
)
