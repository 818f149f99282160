"""Request and result contracts shared by the backend, the workers and the frontend.

Imports only pydantic and numpy (tests/test_layering.py checks it). Requests are validated here,
and ``normalised()`` gives the canonical form whose hash is the job id.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StrictInt,
    field_validator,
    model_validator,
)

AnalysisKind = Literal[
    "max-attention",
    "head-tsne",
    "hidden-tsne",
    "word-tsne",
    "robustness",
    "decomposition",
    "lasf",
    "continue",
    "predictions",
    "logit-lens",
    "logit-attribution",
    "ablation",
    "patching",
    "word-maps",  # docs/compare.md
    "information-flow",  # circuits: information-flow routes (SPEC 12, docs/circuits.md)
    "attribution-patching",  # circuits (SPEC 12, docs/results.md)
    "edge-attribution",  # circuits: EAP / EAP-IG, the circuit and its faithfulness
]
# the causal views (docs/causal.md): decoders with a language-model head only
CAUSAL_KINDS: tuple[str, ...] = (
    "continue", "predictions", "logit-lens", "logit-attribution", "ablation", "patching",
    "attribution-patching", "edge-attribution",
)  # fmt: skip
# the analyses of a clean/corrupted pair: the text and options.corrupted, of the same token length
PAIR_KINDS: tuple[str, ...] = ("patching", "attribution-patching", "edge-attribution")
ANALYSIS_KINDS: tuple[str, ...] = (
    "max-attention",
    "decomposition",
    "head-tsne",
    "hidden-tsne",
    "word-tsne",
    "robustness",
    "lasf",
    "word-maps",  # every head's word-level map (docs/compare.md)
    "information-flow",  # one text, any model (docs/circuits.md)
    *CAUSAL_KINDS,  # continue first: it extends the text the other causal views read
)  # also the order a job computes them in: cheap first
MAX_TOP_K = 50  # predictions: next tokens listed per position
MAX_ABLATED = 64  # ablation: heads in one ablated set ("each" runs every head in turn)
MAX_CONTINUE = 64  # continue: generated tokens
# edge-attribution (docs/circuits.md) -------------------------------------------------------------
MAX_TOP_EDGES = 10_000  # edges listed and in the circuit (the model's edge count bounds it too)
MAX_IG_STEPS = 50  # EAP-IG's steps (each a forward and a backward)
MAX_CURVE_SIZES = 24  # circuits of the faithfulness curve (each an edge-patched forward)


def edge_count(n_layers: int, n_heads: int, parallel: bool) -> int:
    """Edges of a decoder's graph (SPEC 12; ``workers.analyses.circuits.graph.Graph``): into each head's q, k
    and v from the input and every node of the layers below, into each feed-forward from those (and
    its own layer's heads unless ``parallel``), into the logits from every node."""
    up = [1 + layer * (n_heads + 1) for layer in range(n_layers)]
    heads = 3 * n_heads * sum(up)
    ffs = sum(u + (0 if parallel else n_heads) for u in up)
    return heads + ffs + 1 + n_layers * (n_heads + 1)


# end edge-attribution ----------------------------------------------------------------------------
# shipped LasF layers (docs/lasf.md); uploads are "ck-..." ids
LASF_ABOUT: dict[str, str] = {
    "lasf-minilm": "stable-mode LasF layer in place of MiniLM's last layer (held-out R² 0.75)",
    "lasf-minilm-paper": "paper-mode LasF layer (the paper's equations, identity kernel) in place of MiniLM's last layer (held-out R² 0.46)",
}
LASF_MODELS: tuple[str, ...] = tuple(LASF_ABOUT)


def is_lasf_model(name: str) -> bool:
    """Whether a model name names a LasF layer (shipped, or an uploaded checkpoint id)."""
    import re

    return name in LASF_MODELS or re.fullmatch(r"ck-[0-9a-f]{32}", name) is not None


MAX_TEXT_CHARS = 20_000  # before tokenisation; the model's own token limit is checked by the worker
MAX_WORDS = 2_000  # word-tsne: lines in the list

LayerSel = int | Literal["all"]
HeadPair = Annotated[tuple[StrictInt, StrictInt], Strict(False)]  # [layer, head] as a JSON list
TokenSel = Annotated[str, Field(min_length=1, max_length=100)] | StrictInt  # a token's text or id

# what tokenizers drop before splitting: controls (NUL), format characters (zero-width space,
# joiners, BOM), unassigned and private-use code points, and whitespace of every kind
_INVISIBLE = {"Cc", "Cf", "Cn", "Co", "Cs", "Zs", "Zl", "Zp"}


def visible(text: str) -> str:
    """``text`` without what every tokenizer's normalisation removes; empty: nothing to tokenise."""
    return "".join(ch for ch in text if unicodedata.category(ch) not in _INVISIBLE)


class AnalysisOptions(BaseModel):
    """Options of a text analysis; every field has a default so ``{}`` is valid."""

    model_config = ConfigDict(extra="forbid", strict=True)  # no "yes" -> True, no true -> 1

    truncate: bool = Field(
        False, description="cut texts longer than the model's limit instead of failing"
    )
    drop_special: bool = Field(False, description="leave [CLS]/[SEP]/<s> out of t-SNE and maps")
    chat: bool = Field(
        False,
        description="wrap the text in the model's chat template as a user message; the template's "
        "tokens count as special (drop_special hides them)",
    )
    layer: LayerSel = Field(
        "all", description="layer of head-tsne / hidden-tsne / word-tsne, or all"
    )
    head: LayerSel = Field("all", description="head of head-tsne, or all")
    all_heads: bool = Field(
        False,
        description="service: after head-tsne of the requested layer/head, also embed every head "
        "(result['head-tsne-all'], [layer][head][token][2])",
    )
    engine: Literal["batched", "opentsne", "fast"] | None = Field(
        None, description="t-SNE engine for attention heads; None = the service default"
    )
    seed: int = Field(0, ge=0, le=2**31 - 1)
    restarts: int = Field(1, ge=1, le=20, description="best-of-k restarts (lowest KL kept)")
    init: Literal["spectral", "random", "pca"] = "spectral"
    n_iter: int = Field(750, ge=0, le=5000, description="iterations after early exaggeration")
    early_exaggeration_iter: int = Field(250, ge=0, le=2000)
    perplexity: float = Field(20.0, gt=1.0, le=200.0, description="standard t-SNE perplexity")
    pooling: Literal["auto", "first", "last", "mean"] = "auto"
    fraction: float = Field(
        0.05, gt=0.0, lt=1.0, description="robustness: share of tokens replaced"
    )
    repeats: int = Field(
        10, ge=2, le=100, description="robustness: runs with and without disturbance"
    )
    dtype: Literal["float32", "float64"] = "float32"
    hidden_layer: LayerSel | None = Field(
        None,
        description="state of hidden-tsne (0 = embedding output, l + 1 = output of layer l); None = layer",
    )
    # the causal views (docs/causal.md); left out of the job id while at their defaults
    k: int = Field(
        10, ge=1, le=MAX_TOP_K, description="predictions: top-k next tokens per position"
    )
    target: TokenSel | list[TokenSel] | None = Field(
        None,
        description="logit-attribution / ablation: a token (text or id), a pair [a, b] scored as "
        "l[a] - l[b], or None: the text's next token; patching: the pair (None: the two texts' top predictions)",
    )
    position: int | None = Field(
        None,
        ge=0,
        description="the position of the layers x heads maps (attribution, ablation) and the one the "
        "information-flow graph starts from; None = the last (information flow on an encoder: the first)",
    )
    ablate: Literal["each"] | Annotated[list[HeadPair], Field(max_length=MAX_ABLATED)] = Field(
        "each",
        description="ablation: 'each' head in turn (a map at position), or a set of [layer, head] ablated together",
    )
    ablation: Literal["zero", "mean"] = Field(
        "mean", description="ablation: replace z by zero or its mean over the text"
    )
    corrupted: str | None = Field(
        None,
        max_length=MAX_TEXT_CHARS,
        description="patching: the corrupted text (same token length as the text)",
    )
    continue_tokens: int = Field(
        16, ge=1, le=MAX_CONTINUE, description="continue: tokens to generate"
    )
    temperature: float = Field(
        0.0, ge=0.0, le=10.0, description="continue: 0 = greedy, else sampled with seed"
    )
    # information flow (docs/circuits.md); left out of the job id at its default
    threshold: float = Field(
        0.04, gt=0.0, lt=1.0, description="information-flow: the edges' importance threshold τ"
    )
    real: bool = Field(
        False, description="attribution-patching: also run the real head patching and correlate"
    )
    # edge-attribution / attribution-patching (docs/results.md); out of the job id at their defaults
    qk_fix: bool = Field(
        False,
        description="attribution-patching: AtP*'s query-key fix for each head's queries and keys",
    )
    top_edges: int = Field(
        200, ge=1, le=MAX_TOP_EDGES, description="edge-attribution: N, the edges of the circuit"
    )
    ig_steps: int = Field(
        5, ge=1, le=MAX_IG_STEPS, description="edge-attribution: EAP-IG's steps k (1 = EAP)"
    )
    curve_sizes: (
        Annotated[list[StrictInt], Field(min_length=1, max_length=MAX_CURVE_SIZES)] | None
    ) = Field(
        None,
        description="edge-attribution: edge counts of the faithfulness curve (None: 12 from 0.1 % to 20 %)",
    )
    all_edges: bool = Field(
        False, description="edge-attribution: list every edge's score, not the top N only"
    )

    @field_validator("target")
    @classmethod
    def _target(cls, v: Any) -> Any:
        if isinstance(v, list):
            if len(v) != 2:
                raise ValueError(f"a target pair has two tokens [a, b], got {len(v)}")
            if v[0] == v[1]:
                raise ValueError("the two tokens of a target pair must differ")
        for t in v if isinstance(v, list) else [v]:
            if isinstance(t, int) and t < 0:
                raise ValueError(f"token id {t} is negative")
        return v

    @field_validator("curve_sizes")
    @classmethod
    def _curve_sizes(cls, v: Any) -> Any:
        if v is not None:
            if any(x < 1 for x in v):
                raise ValueError("curve sizes are edge counts of at least 1")
            return sorted(set(v))  # a set: the same sizes in any order are one request
        return v

    @field_validator("ablate")
    @classmethod
    def _ablate(cls, v: Any) -> Any:
        if isinstance(v, list):
            if any(x < 0 for pair in v for x in pair):
                raise ValueError("layers and heads to ablate are counted from 0")
            return sorted(set(v))  # a set: the same heads in any order are one request
        return v


# information flow (docs/circuits.md): left out of the job id at its default
FLOW_DEFAULTS: dict[str, Any] = {"threshold": AnalysisOptions.model_fields["threshold"].default}
CAUSAL_DEFAULTS: dict[str, Any] = {
    name: AnalysisOptions.model_fields[name].default
    for name in (
        "k",
        "target",
        "position",
        "ablate",
        "ablation",
        "corrupted",
        "continue_tokens",
        "temperature",
        "real",
        "qk_fix",
        "top_edges",
        "ig_steps",
        "curve_sizes",
        "all_edges",
    )
}


class AnalysisRequest(BaseModel):
    """``POST /api/analyses`` body and the job's input."""

    model_config = ConfigDict(extra="forbid", strict=True)  # no "yes" -> True, no true -> 1

    model: str = Field("minilm", min_length=1, max_length=100)
    text: str = Field(..., max_length=MAX_TEXT_CHARS)
    analyses: list[AnalysisKind] = Field(default_factory=lambda: ["max-attention"], min_length=1)
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
        return [k for k in ANALYSIS_KINDS if k in set(v)]

    @model_validator(mode="after")
    def _lasf_pairing(self) -> AnalysisRequest:
        lasf_model = is_lasf_model(self.model)
        if "lasf" in self.analyses and not lasf_model:
            raise ValueError(
                f"the lasf analysis needs a LasF model ({', '.join(LASF_MODELS)} or an uploaded LasF checkpoint id), not {self.model!r}"
            )
        if lasf_model and self.analyses != ["lasf"]:
            raise ValueError(f"{self.model} is a LasF layer: only the lasf analysis runs on it")
        return self

    @model_validator(mode="after")
    def _causal(self) -> AnalysisRequest:
        if "patching" in self.analyses and not visible(self.options.corrupted or ""):
            raise ValueError(
                "patching needs a corrupted text (options.corrupted) of the same token length"
            )
        for kind in PAIR_KINDS[1:]:
            if kind in self.analyses and not visible(self.options.corrupted or ""):
                raise ValueError(
                    f"{kind} needs a corrupted text (options.corrupted) of the same token length"
                )
        if "continue" in self.analyses and not set(self.analyses) <= set(CAUSAL_KINDS):
            raise ValueError(
                "continue extends the text of the causal views only: request it with "
                f"{', '.join(CAUSAL_KINDS[1:])}, not with the other analyses"
            )
        return self

    def normalised(self) -> dict[str, Any]:
        """Canonical JSON-able form: analyses sorted in job order, every option explicit except the
        causal views' options at their defaults (so requests from before them keep their ids)."""
        options = self.options.model_dump(mode="json")
        for name, default in {**CAUSAL_DEFAULTS, **FLOW_DEFAULTS}.items():
            if options.get(name) == default:
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

CORPUS_STATISTICS: tuple[str, ...] = (
    "entropy",
    "entropy_normalised",
    "sink",
    "previous",
    "self",
    "distance",
    "induction",
    "duplicate",
)
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
CORPUS_REF_PATTERN = r"^(cp-[0-9a-f]{32}|builtin-[a-z0-9-]{1,40})$"


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
