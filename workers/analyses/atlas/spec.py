"""The head atlas (docs/atlas.md): every head of the model labelled by what it does (previous-token,
induction, duplicate-token, first-token, self, local, broad), how sure, and whether ablating it
changes what its type predicts. The text of the request is not read: an atlas depends on the model
and the probe settings only (the dashboard and ``headscope atlas`` send ``ATLAS_TEXT``, so every page
shares one stored atlas per model and settings)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from workers.core.errors import HeadscopeError
from workers.core.ids import CORPUS_REF_PATTERN
from workers.core.options import Cli, TextOptions
from workers.core.registry import AnalysisSpec, register

ATLAS = "atlas"
ATLAS_TEXT = "head atlas"  # the request's text: not read (module docstring)
MAX_RANDOM_SEQS, MAX_RANDOM_LEN, MAX_BOOTSTRAP = 256, 512, 2000
HeadType = Literal[
    "previous-token", "induction", "duplicate-token", "first-token", "self", "local", "broad"
]


def thresholds_arg(value: str) -> dict[str, float]:
    """``--thresholds induction=0.4,previous-token=0.6``."""
    out: dict[str, float] = {}
    for part in value.split(","):
        name, eq, number = part.partition("=")
        if not eq:
            raise ValueError(f"expected type=value pairs such as induction=0.4, got {part!r}")
        try:
            out[name.strip()] = float(number)
        except ValueError:
            raise ValueError(f"{number!r} is not a number (in {part!r})") from None
    return out


def yes_no(value: str) -> bool:
    if value.lower() in ("yes", "true", "on", "1"):
        return True
    if value.lower() in ("no", "false", "off", "0"):
        return False
    raise ValueError(f"expected yes or no, got {value!r}")


class AtlasOptions(TextOptions):
    """The probes' settings (docs/atlas.md); ``seed`` draws the random sequences and the bootstrap."""

    corpus: str = Field(
        "builtin-english",
        pattern=CORPUS_REF_PATTERN,
        description="atlas: the corpus of the per-head statistics: a shipped one (builtin-english, "
        "builtin-lasf-heldout) or an uploaded one's cp-... id",
    )
    max_texts: int = Field(200, ge=1, le=5000, description="atlas: the corpus' first texts read")
    random_seqs: int = Field(
        32, ge=1, le=MAX_RANDOM_SEQS, description="atlas: repeated random sequences (S)"
    )
    random_len: int = Field(
        64,
        ge=2,
        le=MAX_RANDOM_LEN,
        description="atlas: tokens per random sequence, repeated once (R)",
    )
    resamples: int = Field(
        200, ge=0, le=MAX_BOOTSTRAP, description="atlas: resamples for the 95 % intervals (0: none)"
    )
    thresholds: Annotated[
        dict[HeadType, Annotated[float, Field(ge=0.0, le=1.0)]] | None,
        Cli(parse=thresholds_arg, metavar="TYPE=V,..."),
    ] = Field(None, description="atlas: thresholds per head type (others keep their defaults)")
    rule: Literal["specific-first", "largest"] = Field(
        "specific-first",
        description="atlas: the labelling rule: specific-first (previous-token, induction, "
        "duplicate-token before first-token, self, local, broad) or largest (SPEC 15: the largest "
        "score that clears)",
    )
    loss: Annotated[bool | None, Cli(parse=yes_no, metavar="yes|no")] = Field(
        None, description="atlas: the repeated-half loss (default: where the model has a head)"
    )
    skip_evidence: bool = Field(
        False, description="atlas: leave out the ablation checks (decoders with a head)"
    )
    evidence_exact_all: bool = Field(
        False,
        description="atlas: ablate every head exactly (slow) instead of estimating the others by "
        "attribution patching",
    )
    evidence_seqs: int = Field(
        8, ge=1, le=MAX_RANDOM_SEQS, description="atlas: sequences the ablations run on"
    )


def check_atlas(request: Any, options: AtlasOptions) -> None:
    """What the catalogue entry tells before queueing: a shipped corpus that exists, the probe fits,
    the loss has a head (the API checks an uploaded corpus in its store, the CLI in its own)."""
    from workers.inputs.corpora import SHIPPED, shipped_corpus

    if options.corpus.startswith("builtin-") and shipped_corpus(options.corpus) is None:
        raise HeadscopeError(
            f"unknown shipped corpus {options.corpus!r}; use {', '.join(SHIPPED)} or an uploaded "
            "corpus' cp-... id"
        )
    facts = request.facts
    limit = facts.get("max_tokens")
    if limit and 2 * options.random_len + 1 > int(limit):
        raise HeadscopeError(
            f"random_len {options.random_len} is too long for {request.model}: the probe is "
            f"2 x {options.random_len} tokens and a leading special token, over its limit of {limit}"
        )
    if options.loss and (facts.get("causal") is False or facts.get("lm_head") is False):
        raise HeadscopeError(
            f"the repeated-half loss needs a decoder with a language-model head; {request.model} "
            "is not one (leave loss unset: the atlas then labels its heads by attention alone)"
        )


SPEC = register(
    AnalysisSpec(
        kind=ATLAS,
        summary="every head labelled (previous-token, induction, ...) with a 95 % interval and "
        "ablation evidence; reads a corpus and repeated random tokens, not the text",
        options=AtlasOptions,
        section="workers.analyses.atlas.section:atlas_section",
        order=200,
        weight=20.0,
        check=check_atlas,
    )
)
