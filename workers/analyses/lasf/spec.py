"""LasF semantic fields (docs/lasf.md): what each field of a LasF layer relates in one text."""

from __future__ import annotations

from workers.core.options import Perplexity, TextOptions, TSNEParams
from workers.core.registry import AnalysisSpec, register

LASF = "lasf"


class LasFOptions(TextOptions, TSNEParams, Perplexity):
    """The fields' t-SNE map reads the t-SNE options and the perplexity."""


SPEC = register(
    AnalysisSpec(
        kind=LASF,
        report="workers.analyses.lasf.report:lasf",
        summary="a LasF layer's semantic fields on the text: Phi, relations, maps, ablation",
        options=LasFOptions,
        section="workers.analyses.lasf.section:lasf",
        plan="workers.analyses.lasf.section:plan",
        order=70,
        weight=4.0,
        needs={"whole_text", "lasf_model"},
        streamed=True,
    )
)
