"""Request and result contracts shared by the backend, the workers and the frontend.

Imports only pydantic and numpy (tests/test_layering.py checks it). Requests are validated here,
and ``normalised()`` gives the canonical form whose hash is the job id.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StrictInt,
    field_validator,
    model_validator,
)

from workers.core import registry
from workers.core.ids import CORPUS_REF_PATTERN
from workers.core.options import MAX_TEXT_CHARS, HeadPair, LayerSel, TokenSel  # noqa: F401 - shared

registry.load()  # every analysis' spec: the kinds and options below are read off them

if TYPE_CHECKING:  # built at import from the registry; to a type checker, a model like any other
    AnalysisOptions = BaseModel
    AnalysisKind = str
else:
    AnalysisOptions = registry.request_options()  # every analysis' options, each field once
    AnalysisKind = Literal[registry.kinds()]
ANALYSIS_KINDS: tuple[str, ...] = registry.kinds()  # also the order a job computes them in
# options in every job id since the first stored ones; any other option is left out of the id
# while at its default, so adding an option (or an analysis) keeps every earlier id and share link
ALWAYS_IN_ID = frozenset(
    {
        "truncate", "drop_special", "chat", "layer", "head", "all_heads", "engine", "seed",
        "restarts", "init", "n_iter", "early_exaggeration_iter", "perplexity", "pooling",
        "fraction", "repeats", "dtype", "hidden_layer",
    }
)  # fmt: skip
# shipped LasF layers (docs/lasf.md); uploads are "ck-..." ids
LASF_ABOUT: dict[str, str] = {
    "lasf-minilm": "stable-mode LasF layer in place of MiniLM's last layer (held-out R² 0.75)",
    "lasf-minilm-paper": "paper-mode LasF layer (the paper's equations, identity kernel) in place of MiniLM's last layer (held-out R² 0.46)",
}
LASF_MODELS: tuple[str, ...] = tuple(LASF_ABOUT)


def is_lasf_model(name: str) -> bool:
    """Whether a model name names a LasF layer (shipped, or an uploaded checkpoint id)."""
    return name in LASF_MODELS or re.fullmatch(r"ck-[0-9a-f]{32}", name) is not None


# what tokenizers drop before splitting: controls (NUL), format characters (zero-width space,
# joiners, BOM), unassigned and private-use code points, and whitespace of every kind
_INVISIBLE = {"Cc", "Cf", "Cn", "Co", "Cs", "Zs", "Zl", "Zp"}


def visible(text: str) -> str:
    """``text`` without what every tokenizer's normalisation removes; empty: nothing to tokenise."""
    return "".join(ch for ch in text if unicodedata.category(ch) not in _INVISIBLE)


def check_needs(model: str, kinds: list[str], options: Any) -> None:
    """What each analysis needs of a request (``registry.NEEDS``, ``only_with``), before anything is
    queued; a ``ValueError`` naming the problem (the contract's and the CLI's)."""
    specs = [registry.get(k) for k in kinds]
    lasf_kinds = registry.having("lasf_model")
    lasf_model = is_lasf_model(model)
    for spec in specs:
        if "lasf_model" in spec.needs and not lasf_model:
            raise ValueError(
                f"the {spec.kind} analysis needs a LasF model ({', '.join(LASF_MODELS)} or an uploaded LasF checkpoint id), not {model!r}"
            )
    if lasf_model and any(k not in lasf_kinds for k in kinds):
        raise ValueError(
            f"{model} is a LasF layer: only the {' and '.join(lasf_kinds)} analysis runs on it"
        )
    corrupted = getattr(options, "corrupted", None)
    for spec in specs:
        if "pair" in spec.needs and not visible(corrupted or ""):
            raise ValueError(
                f"{spec.kind} needs a corrupted text (options.corrupted) of the same token length"
            )
    for spec in specs:
        if spec.only_with and any(spec.only_with not in registry.get(k).needs for k in kinds):
            others = [k for k in registry.having(spec.only_with) if k != spec.kind]
            raise ValueError(
                f"{spec.kind} {spec.only_with_reason}: request it with "
                f"{', '.join(others)}, not with the other analyses"
            )


class AnalysisRequest(BaseModel):
    """``POST /api/analyses`` body and the job's input."""

    model_config = ConfigDict(extra="forbid", strict=True)  # no "yes" -> True, no true -> 1

    model: str = Field("minilm", min_length=1, max_length=100)
    text: str = Field(..., max_length=MAX_TEXT_CHARS)
    analyses: list[AnalysisKind] = Field(
        default_factory=lambda: [registry.kinds()[0]], min_length=1
    )
    options: AnalysisOptions = Field(default_factory=AnalysisOptions)

    @field_validator("text")
    @classmethod
    def _not_empty(cls, v: str) -> str:
        if not visible(v):
            raise ValueError("the text is empty: paste at least one word")
        return v

    @field_validator("analyses")
    @classmethod
    def _dedupe(cls, v: list[str]) -> list[str]:
        return [k for k in registry.kinds() if k in set(v)]

    @model_validator(mode="after")
    def _needs(self) -> AnalysisRequest:
        check_needs(self.model, list(self.analyses), self.options)
        return self

    def normalised(self) -> dict[str, Any]:
        """Canonical JSON-able form: analyses sorted in job order, every option explicit except
        those outside ``ALWAYS_IN_ID`` at their defaults (so requests from before them keep their ids)."""
        options = self.options.model_dump(mode="json")
        fields = type(self.options).model_fields
        for name in list(options):
            if name not in ALWAYS_IN_ID and options[name] == fields[name].default:
                del options[name]
        return {
            "model": self.model,
            "text": self.text,
            "analyses": list(self.analyses),
            "options": options,
        }

    def job_id(self) -> str:
        """Hash of the normalised request: identical requests share one job and one result."""
        return request_hash("analysis", self.normalised())


def request_hash(kind: str, payload: dict[str, Any]) -> str:
    """A stable 32-hex-digit id for a JSON-able payload."""
    blob = json.dumps({"kind": kind, **payload}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


JobState = Literal["queued", "running", "finished", "failed"]


class JobStatus(BaseModel):
    """``GET /api/analyses/{id}``."""

    id: str
    status: JobState
    progress: float = 0.0
    message: str = ""
    partial: dict[str, Any] = Field(default_factory=dict)
    partial_keys: list[str] = Field(
        default_factory=list
    )  # every key of the partial result, sent or not
    result: dict[str, Any] | None = None
    error: str | None = None
    request: dict[str, Any] | None = None
    sections: list[str] | None = None  # a finished result's sections and layer parts (?sections=)


# ------------------------------------------------------------------- positional encodings, shares

CHECKPOINT_ID_PATTERN = r"^(ck-[0-9a-f]{32}|demo-[A-Za-z0-9_.-]{1,60})$"
Grid = Annotated[tuple[StrictInt, StrictInt], Strict(False)]  # a JSON list of two whole numbers


class CheckpointRef(BaseModel):
    """One PE matrix: an uploaded (``ck-...``) or shipped (``demo-...``) checkpoint and a tensor."""

    model_config = ConfigDict(extra="forbid", strict=True)  # no "yes" -> True, no true -> 1

    id: str = Field(..., pattern=CHECKPOINT_ID_PATTERN)
    tensor: str | None = Field(None, max_length=500, description="None: the best candidate")


class PEReference(BaseModel):
    """What each PE matrix is aligned to (docs/positional.md)."""

    model_config = ConfigDict(extra="forbid", strict=True)  # no "yes" -> True, no true -> 1

    kind: Literal["2d-fixed", "1d-fixed", "random", "checkpoint", "none"] = "none"
    grid: Grid | None = None
    sigma: float = Field(1.0, gt=0.0, le=1000.0)
    seed: int = Field(0, ge=0, le=2**31 - 1)
    checkpoint: CheckpointRef | None = None

    @model_validator(mode="after")
    def _canonical(self) -> PEReference:
        if self.kind == "2d-fixed" and self.grid is None:
            raise ValueError("a 2d-fixed reference needs a grid, e.g. [4, 4]")
        if self.kind == "checkpoint" and self.checkpoint is None:
            raise ValueError("a checkpoint reference needs a checkpoint id")
        if self.grid is not None and min(self.grid) < 1:
            raise ValueError("grid sides must be positive")
        # fields the kind does not use are reset, so equal requests hash equally
        if self.kind != "2d-fixed":
            self.grid = None
        if self.kind != "random":
            self.sigma, self.seed = 1.0, 0
        if self.kind != "checkpoint":
            self.checkpoint = None
        return self


class PEPartition(BaseModel):
    """How positions group into modules for modularity and clustering (docs/positional.md)."""

    model_config = ConfigDict(extra="forbid", strict=True)  # no "yes" -> True, no true -> 1

    kind: Literal["none", "rows", "columns", "csv"] = "none"
    grid: Grid | None = None
    csv: str | None = Field(None, max_length=1_000_000, description="header position,label")

    @model_validator(mode="after")
    def _canonical(self) -> PEPartition:
        if self.kind in ("rows", "columns") and self.grid is None:
            raise ValueError(f"a {self.kind} partition needs a grid, e.g. [4, 4]")
        if self.kind == "csv" and not (self.csv or "").strip():
            raise ValueError("a csv partition needs the CSV text (header position,label)")
        if self.grid is not None and min(self.grid) < 1:
            raise ValueError("grid sides must be positive")
        if self.kind not in ("rows", "columns"):
            self.grid = None
        if self.kind != "csv":
            self.csv = None
        return self


class PEAnalysisRequest(BaseModel):
    """``POST /api/pe-analyses`` body and the job's input."""

    model_config = ConfigDict(extra="forbid", strict=True)  # no "yes" -> True, no true -> 1

    checkpoints: list[CheckpointRef] = Field(..., min_length=1, max_length=20)
    reference: PEReference = Field(default_factory=PEReference)
    partition: PEPartition = Field(default_factory=PEPartition)
    metric: Literal["euclidean", "cosine"] = "euclidean"

    def normalised(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def job_id(self) -> str:
        return request_hash("pe", self.normalised())


class ShareRequest(BaseModel):
    """``POST /api/shares``: exactly one of the ids, plus the view to restore."""

    model_config = ConfigDict(extra="forbid", strict=True)  # no "yes" -> True, no true -> 1

    analysis_id: str | None = Field(None, max_length=64)
    pe_analysis_id: str | None = Field(None, max_length=64)
    corpus_analysis_id: str | None = Field(None, max_length=64)
    compare_id: str | None = Field(None, max_length=64)  # docs/compare.md
    view: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_target(self) -> ShareRequest:
        given = [
            x
            for x in (
                self.analysis_id,
                self.pe_analysis_id,
                self.corpus_analysis_id,
                self.compare_id,
            )
            if x is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of analysis_id, pe_analysis_id, corpus_analysis_id and compare_id"
            )
        return self


# ------------------------------------------------------------------------ corpus (docs/corpus.md)

CorpusStatistic = Literal[
    "entropy",
    "entropy_normalised",
    "sink",
    "previous",
    "self",
    "distance",
    "induction",
    "duplicate",
]
CORPUS_STATISTICS: tuple[CorpusStatistic, ...] = get_args(CorpusStatistic)


class CorpusOptions(BaseModel):
    """Options of a corpus analysis (docs/corpus.md); ``{}`` is valid."""

    model_config = ConfigDict(extra="forbid", strict=True)

    max_tokens: int = Field(
        128,
        ge=2,
        le=4096,
        description="per text, special tokens included; longer ones are cut (counted)",
    )
    keep_special: bool = Field(False, description="keep [CLS]/[SEP]/<s> as queries and keys")
    statistics: list[CorpusStatistic] = Field(
        default_factory=lambda: list(CORPUS_STATISTICS), min_length=1
    )
    top_k: int = Field(20, ge=0, le=100, description="top (query, key) pairs kept per head")
    exclude_sink_self: bool = Field(
        True, description="top pairs leave out the first kept key and the query itself"
    )
    dtype: Literal["float32", "float64"] = "float32"

    @field_validator("statistics")
    @classmethod
    def _order(cls, v: list[str]) -> list[str]:
        return [s for s in CORPUS_STATISTICS if s in set(v)]


class CorpusRequest(BaseModel):
    """``POST /api/corpus-analyses``: statistics of every head over a stored or shipped corpus."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str = Field("minilm", min_length=1, max_length=100)
    corpus: str = Field(
        ..., pattern=CORPUS_REF_PATTERN, description="cp-... (uploaded) or builtin-..."
    )
    options: CorpusOptions = Field(default_factory=CorpusOptions)

    def normalised(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def job_id(self) -> str:
        return request_hash("corpus", self.normalised())


class JointMapRequest(BaseModel):
    """``POST /api/corpus-joint``: the joint query–key map of one head over a corpus (docs/corpus.md)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str = Field("minilm", min_length=1, max_length=100)
    corpus: str = Field(..., pattern=CORPUS_REF_PATTERN)
    layer: int = Field(..., ge=0, le=1000)
    head: int = Field(..., ge=0, le=1000)
    max_tokens: int = Field(128, ge=2, le=4096)
    keep_special: bool = False
    max_points: int = Field(
        10_000, ge=10, le=20_000, description="queries + keys; tokens are sampled beyond it"
    )
    method: Literal["pca", "tsne"] = Field(
        "pca", description="pca: instant; tsne: minutes for 10,000 points on 2 cores"
    )
    seed: int = Field(0, ge=0, le=2**31 - 1)

    def normalised(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def job_id(self) -> str:
        return request_hash("corpus-joint", self.normalised())


# ------------------------------------------------------------------------ compare (docs/compare.md)

MAX_COMPARE_TOKENS = 512  # per text and model in a comparison


class CompareRequest(BaseModel):
    """``POST /api/compare``: two models on one text or a stored corpus (docs/compare.md)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model_a: str = Field("minilm", min_length=1, max_length=100)
    model_b: str = Field("smollm2", min_length=1, max_length=100)
    text: str | None = Field(
        None, max_length=MAX_TEXT_CHARS, description="one text (or give corpus)"
    )
    corpus: str | None = Field(
        None, pattern=CORPUS_REF_PATTERN, description="cp-... or builtin-... (or give text)"
    )
    max_tokens: int = Field(
        128, ge=2, le=MAX_COMPARE_TOKENS, description="per text and model; longer ones are cut"
    )

    @model_validator(mode="after")
    def _one_source(self) -> CompareRequest:
        if (self.text is None) == (self.corpus is None):
            raise ValueError("give exactly one of text and corpus")
        if self.text is not None and not self.text.split():
            raise ValueError("the text has no word (only spaces)")
        return self

    def normalised(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def job_id(self) -> str:
        return request_hash("compare", self.normalised())
