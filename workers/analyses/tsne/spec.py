"""The t-SNE views (docs/analyses.md, docs/tsne.md): every head's attention-head t-SNE, the standard
t-SNE of the hidden states and of a word list's embeddings, and their robustness to disturbed input."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from workers.analyses.tsne.words import check_word_list
from workers.core.memory import F8, Base, Footprint
from workers.core.options import (
    Cli,
    LayerSel,
    Perplexity,
    Selection,
    TextOptions,
    TSNEParams,
    layer_arg,
)
from workers.core.registry import AnalysisSpec, Followup, register

HEAD_TSNE = "head-tsne"
HIDDEN_TSNE = "hidden-tsne"
WORD_TSNE = "word-tsne"
ROBUSTNESS = "robustness"
ALL_HEADS = "head-tsne-all"  # the service's every-head gallery after one head's map (a result key)


class HeadTSNEOptions(TextOptions, Selection, TSNEParams):
    all_heads: Annotated[bool, Cli(hidden=True)] = Field(
        False,
        description="service: after head-tsne of the requested layer/head, also embed every head "
        "(result['head-tsne-all'], [layer][head][token][2])",
    )


class HiddenTSNEOptions(TextOptions, Selection, TSNEParams, Perplexity):
    hidden_layer: Annotated[LayerSel | None, Cli(parse=layer_arg)] = Field(
        None,
        description="state of hidden-tsne (0 = embedding output, l + 1 = output of layer l); None = layer",
    )


class WordTSNEOptions(TextOptions, Selection, TSNEParams, Perplexity):
    pooling: Annotated[
        Literal["auto", "first", "last", "mean"],
        Cli(help="how an item's tokens pool (auto: the first for encoders, the last for decoders)"),
    ] = "auto"


class RobustnessOptions(TextOptions, Selection, TSNEParams, Perplexity):
    fraction: float = Field(
        0.05, gt=0.0, lt=1.0, description="robustness: share of tokens replaced"
    )
    repeats: int = Field(
        10, ge=2, le=100, description="robustness: runs with and without disturbance"
    )


def single_head(options: Selection) -> bool:
    """One layer and one head chosen (the head view's request)."""
    return options.layer != "all" and options.head != "all"


def _count(sel: Any, size: int) -> int:
    return size if sel in (None, "all") else (len(sel) if isinstance(sel, list) else 1)


def head_memory(base: Base, options: HeadTSNEOptions) -> Footprint:
    """One layer's heads at a time: a float64 copy, A + A^T, P, the engine's float32 P and the KL's Q."""
    nn = base.n * base.n
    heads = _count(options.head, base.facts.n_heads)
    single = nn * F8 if single_head(options) else 0
    return Footprint(streamed={HEAD_TSNE: heads * nn * (3 * F8 + 4 + F8) + single})


def hidden_memory(base: Base, options: HiddenTSNEOptions) -> Footprint:
    """The hidden states, and per embedded state its distances, P and the map's Q."""
    nn = base.n * base.n
    state = options.layer if options.hidden_layer is None else options.hidden_layer
    states = base.facts.n_layers + 1 if state == "all" else 1
    return Footprint(stages={HIDDEN_TSNE: base.hidden_states + states * nn * F8 * 3 + nn * F8 * 3})


def robustness_memory(base: Base, options: RobustnessOptions) -> Footprint:
    """The head's map and a state kept through the pass, then R disturbed runs' P of both kinds."""
    nn = base.n * base.n
    return Footprint(
        streamed={ROBUSTNESS: nn * F8 * 2},
        stages={ROBUSTNESS: base.forward + 4 * options.repeats * nn * F8 + 3 * nn * F8},
    )


def head_short(options: HeadTSNEOptions) -> bool:
    """One head's map (a few restarts at most, no gallery after it) takes seconds: the short queue."""
    one_head = isinstance(options.layer, int) and isinstance(options.head, int)
    return one_head and not options.all_heads and options.restarts <= 4


def all_heads_after_one(options: HeadTSNEOptions) -> bool:
    return options.all_heads and (options.layer != "all" or options.head != "all")


def check_words(request: Any, options: WordTSNEOptions) -> None:
    """A word list of ``MIN_WORDS`` to ``MAX_WORDS`` items (``workers.analyses.tsne.words``)."""
    check_word_list(request.text)


SECTIONS = "workers.analyses.tsne.section"

register(
    AnalysisSpec(
        kind=HEAD_TSNE,
        report="workers.analyses.tsne.report:head_tsne",
        summary="attention-head t-SNE of every chosen head: neighbours straight from its attention",
        options=HeadTSNEOptions,
        section=f"{SECTIONS}:head_tsne",
        plan=f"{SECTIONS}:plan_head_tsne",
        order=30,
        weight=3.0,
        needs={"whole_text"},
        streamed=True,
        memory=head_memory,
        first_stage=True,
        short=head_short,
        followups=(
            Followup(ALL_HEADS, all_heads_after_one, {"layer": "all", "head": "all"}, 12.0),
        ),
        stream_label="head t-SNE",
    )
)
register(
    AnalysisSpec(
        kind=HIDDEN_TSNE,
        report="workers.analyses.tsne.report:hidden_tsne",
        summary="standard t-SNE of the hidden states (perplexity), beside the heads' maps",
        options=HiddenTSNEOptions,
        section=f"{SECTIONS}:hidden_tsne",
        order=40,
        weight=3.0,
        needs={"whole_text"},
        streamed=True,
        memory=hidden_memory,
        layer_is_state=True,
    )
)
register(
    AnalysisSpec(
        kind=WORD_TSNE,
        report="workers.analyses.tsne.report:word_tsne",
        summary="standard t-SNE of a word list's (multi-token) embeddings, one item per line",
        options=WordTSNEOptions,
        section=f"{SECTIONS}:word_tsne",
        order=50,
        weight=3.0,
        check=check_words,
        layer_is_state=True,
        word_list=True,
    )
)
register(
    AnalysisSpec(
        kind=ROBUSTNESS,
        report="workers.analyses.tsne.report:robustness",
        summary="how much both t-SNEs move when a share of the tokens is replaced (thesis 4.4)",
        options=RobustnessOptions,
        section=f"{SECTIONS}:robustness",
        plan=f"{SECTIONS}:plan_robustness",
        order=60,
        weight=12.0,
        needs={"whole_text"},
        streamed=True,
        memory=robustness_memory,
    )
)
