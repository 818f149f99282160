"""The registry of analyses: every text analysis declares itself once, in a torch-free spec.

Each folder of ``workers/analyses/`` that holds a ``spec.py`` registers its analyses there
(``register(AnalysisSpec(...))``); modules named in ``HEADSCOPE_ANALYSES`` (comma-separated dotted
paths) are loaded too, so an analysis can live outside the package. What reads the registry:
the request contract (``workers.core.contracts``: the kinds, the options, the needs), the API's
checks before queueing, the CLI's ``analyze`` flags, the queue's job weights and the memory plan
(docs/architecture.md, "How to add an analysis").

A spec names its section function by dotted path (``"package.module:function"``), so reading the
registry imports no torch; the engine imports the function when it runs it.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, create_model
from pydantic.fields import FieldInfo

from workers.core.options import Options

Need = Literal["lm_head", "pair", "whole_text", "lasf_model"]
NEEDS: dict[str, str] = {
    "lm_head": "a decoder with a language-model head",
    "pair": "a clean/corrupted pair of the same token length (options.corrupted)",
    "whole_text": "the whole text within the model's token limit",
    "lasf_model": "a LasF model (its layer in place of MiniLM's last)",
}
Hook = Callable[..., Any] | str  # a function, or its dotted path "package.module:function"


@dataclass(frozen=True)
class Followup:
    """A second pass of an analysis with other options, stored under its own result key (the
    service's all-heads gallery after one head's t-SNE): ``when(options)`` says whether it runs."""

    key: str
    when: Callable[[Any], bool]
    overrides: dict[str, Any]
    weight: float


@dataclass(frozen=True)
class AnalysisSpec:
    """One analysis kind, declared once.

    Args:
        kind: the name requests, the CLI and the result use (max-attention, say).
        summary: one line: what it answers (``headscope analyze --help``, docs).
        options: its options model (``workers.core.options`` groups + its own fields).
        section: ``"module:function"``, called as ``function(ctx, options)`` with the engine's context
            and this analysis' options; returns the JSON-ready section.
        order: where it runs in a job, cheap first (also the order of the result's sections).
        weight: its relative cost, for one progress bar over a job.
        needs: what it needs (``NEEDS``); the contract and the API check them before queueing.
        streamed: it reads the text's one forward pass (its hidden states, or its attention maps
            through consumers: ``plan``).
        plan: ``"module:function"`` called as ``function(ctx, options)`` before the streamed pass:
            the consumers of each layer's maps it registers, by name (its section reads them as
            ``ctx.consumers``).
        memory: ``function(base, options)`` -> ``workers.core.memory.Footprint``: its peak bytes,
            torch-free (the memory plan sums it with the forward pass and the weights).
        check: ``function(request, options)`` (or a tuple of them) with a ``RequestFacts``: what the
            API can check without the model (ranges, token counts); raises a HeadscopeError. A
            function several requested analyses name runs once.
        prepare: ``"module:function"`` called as ``function(ctx, options)`` before every other section
            (``continue`` extends the text the other views read).
        extra_tokens: ``function(options)`` -> tokens ``prepare`` adds to the text (the memory plan
            and the API's length check count them).
        first_stage: computed in the job's first pass, before any ``Followup`` and the other kinds.
        layer_is_state: its ``layer`` option counts hidden states (0 .. n_layers), not layers.
        short: ``function(options)`` -> True when a job of only short analyses takes seconds (the
            short queue); None: never short.
        followups: further passes of the same section (``Followup``).
        split: ``"module:Name"`` of a splitter the queue asks whether to hand this section to parts
            (docs/scaling.md): ``Name.plan(ctx, options, min_run_tokens=, part_run_tokens=)`` ->
            a ``SectionSplit`` or None, ``Name.part(loaded, payload, progress)`` -> one part's
            output, ``Name.merge(outputs, context)`` -> the section.
        only_with: every other analysis of a request with this one must have this need, for the
            reason ``only_with_reason`` (``continue`` extends the text of the causal views only).
        stream_label: what its consumers do during the streamed pass (the progress line; most of
            the job's work is then in the pass, which gets 80 % of the bar instead of 30 %).
        word_list: its text is a list of items, one per line, each run on its own (never the text
            as one sequence: no token limit, no memory plan of the text).
        cli: offered by ``headscope analyze --analysis``.
        report: ``function(section, result)`` -> a few lines of what it found (the section's own
            keys; the result's common keys: tokens, model), printed by ``headscope analyze``;
            None: ``workers.core.report.generic`` (its scalars and its arrays' shapes).
    """

    kind: str
    summary: str
    options: type[Options]
    section: str
    order: int
    weight: float
    needs: frozenset[str] = frozenset()
    streamed: bool = False
    plan: str | None = None
    memory: Hook | None = None
    check: Hook | tuple[Hook, ...] | None = None
    prepare: str | None = None
    extra_tokens: Callable[[Any], int] | None = None
    first_stage: bool = False
    layer_is_state: bool = False
    short: Callable[[Any], bool] | None = None
    followups: tuple[Followup, ...] = ()
    split: str | None = None
    only_with: str | None = None
    only_with_reason: str = ""
    stream_label: str = ""
    word_list: bool = False
    cli: bool = True
    report: Hook | None = None

    def __post_init__(self) -> None:
        unknown = set(self.needs) - set(NEEDS)
        if unknown:
            raise ValueError(f"{self.kind}: unknown needs {sorted(unknown)}; use {sorted(NEEDS)}")
        object.__setattr__(self, "needs", frozenset(self.needs))

    def checks(self) -> tuple[Hook, ...]:
        """Its ``check`` hooks as a tuple."""
        if self.check is None:
            return ()
        return self.check if isinstance(self.check, tuple) else (self.check,)

    def options_of(self, flat: BaseModel | dict[str, Any]) -> Any:
        """This analysis' options object from the request's flat options (already validated)."""
        values = flat if isinstance(flat, dict) else flat.__dict__
        names = self.options.model_fields
        return self.options.model_construct(**{k: values[k] for k in names if k in values})


@dataclass
class SectionSplit:
    """A section handed to parts: each part's input (JSON), its size in progress units, and what the
    merge needs besides the parts' outputs."""

    payloads: list[dict[str, Any]]
    sizes: list[int]
    merge: dict[str, Any]


_SPECS: dict[str, AnalysisSpec] = {}
_LOADED = False


def register(spec: AnalysisSpec) -> AnalysisSpec:
    """Add ``spec``; a second, different spec of the same kind is an error."""
    if spec.kind in _SPECS and _SPECS[spec.kind] is not spec:
        raise ValueError(f"analysis {spec.kind!r} is registered twice")
    _SPECS[spec.kind] = spec
    request_options.cache_clear()
    return spec


def load() -> None:
    """Import every ``workers.analyses.<idea>.spec`` and the modules the ``analyses`` setting names
    (``HEADSCOPE_ANALYSES``)."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    package = importlib.import_module("workers.analyses")  # found by name: it sits above the core
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.ispkg and importlib.util.find_spec(f"{package.__name__}.{info.name}.spec"):
            importlib.import_module(f"{package.__name__}.{info.name}.spec")
    from workers.core.settings import get_settings

    for name in get_settings().analyses.split(","):  # HEADSCOPE_ANALYSES
        if name.strip():
            importlib.import_module(name.strip())


def specs() -> list[AnalysisSpec]:
    """Every registered analysis, in job order."""
    load()
    return sorted(_SPECS.values(), key=lambda s: (s.order, s.kind))


def kinds() -> tuple[str, ...]:
    """Every kind, in job order."""
    return tuple(s.kind for s in specs())


def get(kind: str) -> AnalysisSpec:
    load()
    try:
        return _SPECS[kind]
    except KeyError:
        raise KeyError(f"unknown analysis {kind!r}; use one of {', '.join(kinds())}") from None


def reads_corpus(kinds: Iterable[str]) -> bool:
    """Whether any of ``kinds`` reads the stored corpus its ``corpus`` option names (the atlas' probe,
    docs/atlas.md); a kind no longer registered reads none."""
    load()
    return any(k in _SPECS and "corpus" in _SPECS[k].options.model_fields for k in kinds)


def having(need: str) -> tuple[str, ...]:
    """The kinds that need ``need`` (``NEEDS``), in job order."""
    return tuple(s.kind for s in specs() if need in s.needs)


def resolve(hook: Hook) -> Callable[..., Any]:
    """A hook's function: itself, or imported from its dotted path ``package.module:function``."""
    if callable(hook):
        return hook
    module, _, name = hook.partition(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def _signature(info: FieldInfo) -> tuple[str, ...]:
    return (
        repr(info.annotation),
        repr(info.default),
        str(info.description),
        repr([m for m in info.metadata]),
    )


@lru_cache(maxsize=1)
def request_options() -> type[BaseModel]:
    """The request's flat options: every registered analysis' fields, each defined once.

    Two analyses that declare the same field must declare it identically (the same group), or
    the registry refuses them: a shared option has one default and one limit."""
    fields: dict[str, tuple[FieldInfo, str]] = {}
    for spec in specs():
        for name, info in spec.options.model_fields.items():
            if name in fields and _signature(fields[name][0]) != _signature(info):
                raise ValueError(
                    f"option {name!r} is declared differently by {fields[name][1]} and {spec.kind}: "
                    "declare it once (workers.core.options) and share it"
                )
            fields.setdefault(name, (info, spec.kind))
    model = create_model(  # type: ignore[call-overload]
        "AnalysisOptions",
        __config__=ConfigDict(extra="forbid", strict=True),
        __doc__="Options of a text analysis; every field has a default so ``{}`` is valid.",
        __module__="workers.core.contracts",
        **{name: (info.annotation, info) for name, (info, _) in fields.items()},
    )
    return model  # type: ignore[no-any-return]


@dataclass
class RequestFacts:
    """What the API knows of a request before queueing it, for the specs' ``check`` hooks.

    ``facts``: the catalogue entry's summary (``n_layers``, ``n_heads``, ``lm_head``, ``vocab_size``,
    ``parallel_residual``, ...); ``count(text, special=True)``: its tokens and the model's limit, or
    None when the tokenizer cannot be read without the model (the worker checks then)."""

    model: str
    text: str
    kinds: frozenset[str]
    facts: dict[str, Any]
    count: Callable[..., tuple[int, int] | None]
    flat: Any = None  # the request's flat options
    _counted: Any = field(default=None, repr=False)

    def tokens(self) -> tuple[int, int] | None:
        """The text's tokens and the model's limit (counted once)."""
        if self._counted is None:
            self._counted = (self.count(self.text),)
        return self._counted[0]  # type: ignore[no-any-return]

    def extra_tokens(self) -> int:
        """Tokens the requested analyses add to the text before the others read it (``continue``)."""
        return sum(
            s.extra_tokens(s.options_of(self.flat))
            for s in specs()
            if s.kind in self.kinds and s.extra_tokens
        )
