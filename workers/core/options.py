"""Options of the text analyses: the groups several analyses share, each field written once.

An analysis declares its own options model in its spec (``workers/analyses/<idea>/spec.py``) by
combining these groups with its own fields; the request's flat ``options`` object is the union of
every registered analysis' fields (``workers.core.registry.request_options``), so a field shared by
several analyses (``layer``, ``target``, ...) has one definition, one default and one limit.

Fields may carry a ``Cli`` marker in their ``Annotated`` metadata: how ``headscope analyze`` reads
the flag when plain ``type=`` is not enough (the OpenAPI schema never sees it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, StrictInt

from workers.core.notation import TARGET_HELP

MAX_TEXT_CHARS = 20_000  # before tokenisation; the model's own token limit is checked by the worker
# a t-SNE run (docs/tsne.md): openTSNE's 250 + 750 iterations; the engine's TSNEOptions shares these
N_ITER, EARLY_EXAGGERATION_ITER = 750, 250
MAX_N_ITER, MAX_EARLY_EXAGGERATION_ITER, MAX_RESTARTS = 5000, 2000, 20

LayerSel = int | Literal["all"]
HeadPair = Annotated[tuple[StrictInt, StrictInt], Strict(False)]  # [layer, head] as a JSON list
TokenSel = Annotated[str, Field(min_length=1, max_length=100)] | StrictInt  # a token's text or id


@dataclass(frozen=True)
class Cli:
    """How ``headscope analyze`` reads an option's flag (``workers``' CLI builds it from the field).

    ``parse`` turns one command-line word into a value; ``nargs="+"`` gathers several words into a
    list, and ``one`` then makes a single word the value itself (``--target A`` vs ``--target A B``).
    ``hidden``: the option is the service's only (no flag); ``help``: the flag's help where the
    field has no description (the API schema keeps what it had)."""

    parse: Callable[[str], Any] | None = None
    nargs: str | None = None
    metavar: str | None = None
    one: bool = False
    hidden: bool = False
    help: str | None = None


def layer_arg(value: str) -> int | str:
    """``all`` or a whole number (a layer, a head or a state)."""
    if value == "all":
        return value
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"expected an integer or 'all', got {value!r}") from None


def token_arg(value: str) -> int | str | list[int | str]:
    """One ``--target`` word, read as the dashboard's target box reads it
    (``workers.core.notation``): ``#123`` or ``123`` an id, else the token's text (the shell took
    the quotes off ``" Paris"``); a word holding quotes is read whole (``'" Paris" " Rome"'``)."""
    from workers.core.notation import target_words

    got = target_words([value])
    if got is None:
        raise ValueError("a target token is not empty")
    return got


def heads_arg(value: str) -> str | list[list[int]]:
    """``each`` or heads as ``L3H1,L5H0`` (``3.1,5.0`` too), read by ``workers.core.notation``."""
    from workers.core.notation import parse_heads

    if value == "each":
        return value
    got = parse_heads(value)
    if not got:
        raise ValueError(f"expected 'each' or heads as L3H1,L5H0; got {value!r}")
    return got


def _target(v: Any) -> Any:
    if isinstance(v, list):
        if len(v) != 2:
            raise ValueError(f"a target pair has two tokens [a, b], got {len(v)}")
        if v[0] == v[1]:
            raise ValueError("the two tokens of a target pair must differ")
    for t in v if isinstance(v, list) else [v]:
        if isinstance(t, int) and t < 0:
            raise ValueError(f"token id {t} is negative")
    return v


class Options(BaseModel):
    """Base of every analysis' options: no unknown field, no coercion ("yes" is not True)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class TextOptions(Options):
    """What every analysis of a text reads: how the text is encoded, the precision, the seed."""

    truncate: bool = Field(
        False, description="cut texts longer than the model's limit instead of failing"
    )
    drop_special: bool = Field(False, description="leave [CLS]/[SEP]/<s> out of t-SNE and maps")
    chat: bool = Field(
        False,
        description="wrap the text in the model's chat template as a user message; the template's "
        "tokens count as special (drop_special hides them)",
    )
    seed: Annotated[
        int, Cli(help="random seed: t-SNE starts, sampled continuations, robustness")
    ] = Field(0, ge=0, le=2**31 - 1)
    dtype: Annotated[
        Literal["float32", "float64"],
        Cli(
            help="model precision; decomposition: float64 reconstructs X[l] to < 1e-9 "
            "(docs/decomposition.md)"
        ),
    ] = "float32"


class Selection(Options):
    """Which layers and heads a view covers."""

    layer: Annotated[LayerSel, Cli(parse=layer_arg)] = Field(
        "all", description="layer of head-tsne / hidden-tsne / word-tsne, or all"
    )
    head: Annotated[LayerSel, Cli(parse=layer_arg)] = Field(
        "all", description="head of head-tsne, or all"
    )


class TSNEParams(Options):
    """The t-SNE run of a map (docs/tsne.md): engine, restarts, start and schedule."""

    engine: Literal["batched", "opentsne", "fast"] | None = Field(
        None, description="t-SNE engine for attention heads; None = the service default"
    )
    restarts: int = Field(
        1, ge=1, le=MAX_RESTARTS, description="best-of-k restarts (lowest KL kept)"
    )
    init: Annotated[Literal["spectral", "random", "pca"], Cli(help="t-SNE start")] = "spectral"
    n_iter: int = Field(
        N_ITER, ge=0, le=MAX_N_ITER, description="iterations after early exaggeration"
    )
    early_exaggeration_iter: Annotated[int, Cli(help="t-SNE early-exaggeration iterations")] = (
        Field(EARLY_EXAGGERATION_ITER, ge=0, le=MAX_EARLY_EXAGGERATION_ITER)
    )


class Perplexity(Options):
    """The standard t-SNE of vectors (hidden states, word embeddings)."""

    perplexity: float = Field(20.0, gt=1.0, le=200.0, description="standard t-SNE perplexity")


class Target(Options):
    """What the causal views score: a token, a pair, or the text's own next token."""

    target: Annotated[
        TokenSel | list[TokenSel] | None,
        AfterValidator(_target),
        Cli(parse=token_arg, nargs="+", metavar="TOKEN", one=True, help=TARGET_HELP),
    ] = Field(
        None,
        description="logit-attribution / ablation: a token (text or id), a pair [a, b] scored as "
        "l[a] - l[b], or None: the text's next token; patching: the pair (None: the two texts' top predictions)",
    )


class Position(Options):
    """The position a view reads at."""

    position: int | None = Field(
        None,
        ge=0,
        description="the position of the layers x heads maps (attribution, ablation) and the one the "
        "information-flow graph starts from; None = the last (information flow on an encoder: the first)",
    )


class Pair(Options):
    """A clean/corrupted pair: the text and a corrupted text of the same token length."""

    corrupted: Annotated[str | None, Cli(metavar="TEXT")] = Field(
        None,
        max_length=MAX_TEXT_CHARS,
        description="patching: the corrupted text (same token length as the text)",
    )
