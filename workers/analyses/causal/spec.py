"""The causal views (docs/causal.md): what the model says, read from its own language-model head,
and what changes when a head is removed or a run is patched from another text."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from workers.core.errors import HeadscopeError, OutOfRangeError
from workers.core.memory import F8, Base, Footprint
from workers.core.notation import head_label
from workers.core.options import Cli, HeadPair, Pair, Position, Target, TextOptions, heads_arg
from workers.core.registry import AnalysisSpec, register

CONTINUE = "continue"
PREDICTIONS = "predictions"
LOGIT_LENS = "logit-lens"
LOGIT_ATTRIBUTION = "logit-attribution"
ABLATION = "ablation"
PATCHING = "patching"
MAX_TOP_K = 50  # predictions: next tokens listed per position
MAX_ABLATED = 64  # ablation: heads in one ablated set ("each" runs every head in turn)
MAX_CONTINUE = 64  # continue: generated tokens
# the block the causal views read the vocabulary in (workers/analyses/causal/vocab.py): [rows, vocabulary rows]
VOCAB_ROWS, VOCAB_CHUNK = (
    512,
    4096,
)  # float32 logits of a block: 8 MB; the W_U block: 10 MB at d = 640


def _ablate(v: Any) -> Any:
    if isinstance(v, list):
        if any(x < 0 for pair in v for x in pair):
            raise ValueError("layers and heads to ablate are counted from 0")
        return sorted(set(v))  # a set: the same heads in any order are one request
    return v


class ContinueOptions(TextOptions):
    """``seed`` draws the sampled tokens when ``temperature`` > 0."""

    continue_tokens: int = Field(
        16, ge=1, le=MAX_CONTINUE, description="continue: tokens to generate"
    )
    temperature: float = Field(
        0.0, ge=0.0, le=10.0, description="continue: 0 = greedy, else sampled with seed"
    )


class PredictionsOptions(TextOptions):
    k: int = Field(
        10, ge=1, le=MAX_TOP_K, description="predictions: top-k next tokens per position"
    )


class LensOptions(TextOptions):
    """The lens reads every state at every position: nothing to choose."""


class AttributionOptions(TextOptions, Target, Position):
    """Direct logit attribution of ``target`` at ``position``."""


class AblationOptions(TextOptions, Target, Position):
    ablate: Annotated[
        Literal["each"] | Annotated[list[HeadPair], Field(max_length=MAX_ABLATED)],
        AfterValidator(_ablate),
        Cli(
            parse=heads_arg,
            help="ablation: each head in turn (a map at --position), or heads ablated together, "
            "L3H1,L5H0",
        ),
    ] = Field(
        "each",
        description="ablation: 'each' head in turn (a map at position), or a set of [layer, head] ablated together",
    )
    ablation: Literal["zero", "mean"] = Field(
        "mean", description="ablation: replace z by zero or its mean over the text"
    )


class PatchingOptions(TextOptions, Target, Pair):
    """Activation patching of the text (clean) from ``corrupted``, scored on ``target``."""


# ---------------------------------------------------------------- memory (docs/causal.md, *Cost*)


def logits_bytes(base: Base) -> int:
    """The logits [n, vocabulary] in the model's dtype, their float64 log-softmax and its top-k copy
    (``n``: the text with what ``continue`` adds)."""
    return (base.n + base.extra) * base.facts.vocab * (base.facts.dtype_bytes + 3 * F8)


def vocabulary_memory(base: Base, options: Any) -> Footprint:
    """Predictions and the lens read the vocabulary in blocks (``VOCAB_ROWS`` x ``VOCAB_CHUNK``); the
    lens passes every state through the final norm (one stage for both)."""
    f, n = base.facts, base.n + base.extra
    b = f.dtype_bytes
    blocks = (
        VOCAB_ROWS * VOCAB_CHUNK * (b + 2 * F8 + 1)
    )  # logits, float64 exponentials, a comparison
    lens = 2 * (f.n_layers + 1) * n * f.hidden * b if LOGIT_LENS in base.kinds else 0
    return Footprint(stages={PREDICTIONS: base.forward + base.hidden_states + blocks + lens})


def attribution_memory(base: Base, options: AttributionOptions) -> Footprint:
    """The logits, every state's terms and every head's output at every position."""
    f, n = base.facts, base.n + base.extra
    L, H, d = f.n_layers, f.n_heads, f.hidden
    db = 8 if options.dtype == "float64" else f.dtype_bytes
    stage = (
        base.forward + logits_bytes(base) + 2 * (L + 1) * 4 * n * d * db + 2 * L * H * n * d * db
    )
    return Footprint(stages={LOGIT_ATTRIBUTION: stage})


def patching_rows(base: Base) -> int:
    """Rows of a batched patching run: a layer's heads, or positions (at most 4,096 tokens a batch)."""
    n = base.n + base.extra
    return max(base.facts.n_heads, min(n, max(1, 4096 // max(n, 1))))


def batched_runs(base: Base, rows: int) -> int:
    """``rows`` intervened runs in one batch, the clean run's states twice and the logits."""
    return (rows + 2) * base.forward + base.hidden_states * 2 + logits_bytes(base)


def ablation_memory(base: Base, options: AblationOptions) -> Footprint:
    return Footprint(stages={ABLATION: batched_runs(base, base.facts.n_heads)})


def patching_memory(base: Base, options: PatchingOptions) -> Footprint:
    return Footprint(stages={PATCHING: batched_runs(base, patching_rows(base))})


# ---------------------------------------------------------------- checks before queueing


def check_head(request: Any, options: Any) -> None:
    """The model has a language-model head (a 422 naming why not, and the models that have one)."""
    facts = request.facts
    if facts.get("lm_head") is False:
        from workers.models.catalogue import get_catalogue

        cat = get_catalogue()
        can = [n for n in cat.names_available() if cat.get(n).summary().get("lm_head")]
        raise HeadscopeError(
            f"{request.model} has no language-model head, so it cannot say what comes next ({facts['lm_head_reason']}); "
            f"the causal views run on {', '.join(can) or 'decoders with a head (none in this catalogue)'}",
        )  # fmt: skip


def check_target(request: Any, options: Target) -> None:
    """Each target is exactly one token of the model (by text), or an id within its vocabulary."""
    facts, target = request.facts, options.target
    for t in target if isinstance(target, list) else [target]:
        if isinstance(t, str):
            got = request.count(t, special=False)
            if got is not None and got[0] != 1:
                raise OutOfRangeError(
                    f"target {t!r} is {got[0]} tokens for {request.model}; a target must be exactly one token"
                )
        elif isinstance(t, int) and facts.get("vocab_size") and t >= int(facts["vocab_size"]):
            raise OutOfRangeError(
                f"token id {t} is out of range: {request.model} has ids 0-{int(facts['vocab_size']) - 1}"
            )


def check_continue(request: Any, options: ContinueOptions) -> None:
    """The text and its continuation fit the model's limit."""
    counted = request.tokens()
    if counted is not None and counted[0] + options.continue_tokens > counted[1]:
        raise HeadscopeError(
            f"the text has {counted[0]} tokens; with {options.continue_tokens} more (continue_tokens) it would pass "
            f"{request.model}'s limit of {counted[1]}",
        )  # fmt: skip


def check_position(request: Any, options: Position) -> None:
    """The position is within the text (and what ``continue`` adds to it)."""
    counted = request.tokens()
    if counted is None or options.position is None:
        return
    total = counted[0] + request.extra_tokens()
    if options.position >= total:
        raise OutOfRangeError(
            f"position {options.position} is out of range: the text has positions 0-{total - 1}"
        )


def check_pair(request: Any, options: Pair) -> None:
    """The corrupted text has the text's token length (they are compared position by position)."""
    counted = request.tokens()
    if counted is None or options.corrupted is None:
        return
    other = request.count(options.corrupted)
    if other is not None and other[0] != counted[0]:
        raise HeadscopeError(
            f"the corrupted text has {other[0]} tokens and the text {counted[0]}; patching compares the two "
            "position by position, so they need the same token length",
        )  # fmt: skip


def check_ablate(request: Any, options: AblationOptions) -> None:
    """Every ablated head exists."""
    n_layers, n_heads = request.facts.get("n_layers"), request.facts.get("n_heads")
    if request.tokens() is None or not isinstance(options.ablate, list):
        return
    if n_layers and n_heads:
        for layer, head in options.ablate:
            if layer >= n_layers or head >= n_heads:
                raise OutOfRangeError(
                    f"head {head_label(layer, head)} is out of range: {request.model} has layers 0-{n_layers - 1}, heads 0-{n_heads - 1}"
                )


SECTIONS = "workers.analyses.causal.section"

register(
    AnalysisSpec(
        kind=CONTINUE,
        report="workers.analyses.causal.report:continuation",
        summary="generate a continuation first (greedy or sampled); the other causal views read it",
        options=ContinueOptions,
        section=f"{SECTIONS}:continue_section",
        prepare=f"{SECTIONS}:extend_with_continuation",
        extra_tokens=lambda options: int(options.continue_tokens),
        order=100,
        weight=1.0,
        needs={"lm_head", "whole_text"},
        check=(check_head, check_continue),
        only_with="lm_head",
        only_with_reason="extends the text of the causal views only",
    )
)
register(
    AnalysisSpec(
        kind=PREDICTIONS,
        report="workers.analyses.causal.report:predictions",
        summary="the top-k next tokens and their probabilities at every position; the surprisal",
        options=PredictionsOptions,
        section=f"{SECTIONS}:predictions_section",
        order=110,
        weight=1.0,
        needs={"lm_head", "whole_text"},
        memory=vocabulary_memory,
        check=(check_head,),
    )
)
register(
    AnalysisSpec(
        kind=LOGIT_LENS,
        report="workers.analyses.causal.report:logit_lens",
        summary="every layer's residual stream read through the final norm and the unembedding",
        options=LensOptions,
        section=f"{SECTIONS}:lens_section",
        order=120,
        weight=1.0,
        needs={"lm_head", "whole_text"},
        memory=vocabulary_memory,
        check=(check_head,),
    )
)
register(
    AnalysisSpec(
        kind=LOGIT_ATTRIBUTION,
        report="workers.analyses.causal.report:logit_attribution",
        summary="exact direct logit attribution of a target to every head and feed-forward",
        options=AttributionOptions,
        section=f"{SECTIONS}:attribution_section",
        order=130,
        weight=2.0,
        needs={"lm_head", "whole_text"},
        memory=attribution_memory,
        check=(check_head, check_target, check_position),
    )
)
register(
    AnalysisSpec(
        kind=ABLATION,
        report="workers.analyses.causal.report:ablation",
        summary="each head (or a set) ablated to zero or its mean: the change of the target's logit",
        options=AblationOptions,
        section=f"{SECTIONS}:ablation_section",
        split="workers.analyses.causal.split:Ablation",
        order=140,
        weight=6.0,
        needs={"lm_head", "whole_text"},
        memory=ablation_memory,
        check=(check_head, check_target, check_position, check_ablate),
    )
)
register(
    AnalysisSpec(
        kind=PATCHING,
        report="workers.analyses.causal.report:patching",
        summary="activation patching of a clean/corrupted pair: residual stream and every head",
        options=PatchingOptions,
        section=f"{SECTIONS}:patching_section",
        split="workers.analyses.causal.split:Patching",
        order=150,
        weight=6.0,
        needs={"lm_head", "whole_text", "pair"},
        memory=patching_memory,
        check=(check_head, check_target, check_pair),
    )
)
