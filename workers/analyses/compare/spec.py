"""Word-level attention maps (docs/compare.md): every head's map over the text's words, one shape for
every tokenizer, so two models' heads can be compared."""

from __future__ import annotations

from workers.core.options import TextOptions
from workers.core.registry import AnalysisSpec, register

WORD_MAPS = "word-maps"


class WordMapsOptions(TextOptions):
    """The word maps read only how the text is encoded."""


SPEC = register(
    AnalysisSpec(
        kind=WORD_MAPS,
        summary="every head's word-level attention map (the comparison's shape)",
        options=WordMapsOptions,
        section="workers.analyses.compare.section:word_maps",
        plan="workers.analyses.compare.section:plan",
        order=80,
        weight=1.0,
        streamed=True,
        cli=False,
    )
)
