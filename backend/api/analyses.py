"""``POST /api/analyses`` (202 + id), ``GET /api/analyses/{id}`` (JobStatus) and ``DELETE``
(cancel): the job routes (``backend.api.jobs``) after the checks the API makes before queueing."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from fastapi import APIRouter

from backend.api.jobs import job_routes
from backend.store import Store
from backend.tokens import count_tokens, is_blank
from workers.core.contracts import (
    CAUSAL_KINDS,
    LASF_MODELS,
    MAX_TOP_EDGES,
    PAIR_KINDS,
    AnalysisRequest,
    edge_count,
    is_lasf_model,
)
from workers.core.errors import (
    EmptyTextError,
    HeadscopeError,
    NotFoundError,
    OutOfRangeError,
    TextTooLongError,
)
from workers.models.catalogue import ModelSpec, get_catalogue

router = APIRouter(tags=["analyses"])

WHOLE_TEXT_KINDS = {
    "max-attention",
    "decomposition",
    "head-tsne",
    "hidden-tsne",
    "robustness",
    "lasf",
    *CAUSAL_KINDS,
}
WHOLE_TEXT_KINDS.add("information-flow")  # docs/circuits.md


@lru_cache(maxsize=64)
def model_facts(spec: ModelSpec) -> dict[str, Any]:
    """Layers, heads, token limit of a catalogue entry (its config.json, read once)."""
    return spec.summary()


def lasf_base(model: str, store: Store) -> str:
    """The base model of a LasF layer name: 404 for an unknown checkpoint id, 422 for one that is
    not a LasF checkpoint."""
    if model in LASF_MODELS:
        return "minilm"
    meta = store.checkpoint(model)
    if meta is None:
        raise NotFoundError.of("checkpoint", model, "upload the LasF checkpoint first")
    if not meta.get("lasf"):
        raise HeadscopeError(f"{model} ({meta.get('filename', 'upload')}) is not a LasF checkpoint")
    return str(meta["lasf"]["base_model"])


def check_request(req: AnalysisRequest, store: Store | None = None) -> None:
    """What the API can check without the model: the name, layer/head ranges, the token count."""
    cat = get_catalogue()
    name = req.model
    if is_lasf_model(name):
        if store is None:
            raise HeadscopeError(f"{name}: LasF models need the checkpoint store")
        name = lasf_base(name, store)
    spec = cat.get(name)
    facts = model_facts(spec)
    o = req.options
    n_layers, n_heads = facts.get("n_layers"), facts.get("n_heads")
    kinds = set(req.analyses)
    if isinstance(o.layer, int) and n_layers:
        top = n_layers if kinds <= {"hidden-tsne", "word-tsne"} else n_layers - 1
        if not 0 <= o.layer <= top:
            raise OutOfRangeError(
                f"layer {o.layer} is out of range: {req.model} has layers 0-{top}"
            )
    if isinstance(o.head, int) and n_heads and not 0 <= o.head < n_heads:
        raise OutOfRangeError(
            f"head {o.head} is out of range: {req.model} has heads 0-{n_heads - 1}"
        )
    if isinstance(o.hidden_layer, int) and n_layers and not 0 <= o.hidden_layer <= n_layers:
        raise OutOfRangeError(
            f"hidden_layer {o.hidden_layer} is out of range: {req.model} has states 0-{n_layers} "
            f"(0 = embedding output, l + 1 = output of layer l)"
        )
    if is_blank(spec, req.text):
        raise EmptyTextError(
            "the text is empty after normalisation (only invisible or control characters)"
        )
    if not o.truncate and kinds & WHOLE_TEXT_KINDS:
        counted = count_tokens(spec, req.text)
        if counted is not None and counted[0] > counted[1]:
            raise TextTooLongError(count=counted[0], limit=counted[1], model=req.model)
    if kinds & set(CAUSAL_KINDS):
        check_causal(req, spec, facts)
    if "information-flow" in kinds:
        check_flow(req, spec)


def check_flow(req: AnalysisRequest, spec: ModelSpec) -> None:
    """Information flow (docs/circuits.md): the position the graph starts from is in the text (the
    threshold's range, (0, 1), is the contract's)."""
    o = req.options
    counted = count_tokens(spec, req.text) if o.position is not None else None
    if o.position is not None and counted is not None and o.position >= counted[0]:
        raise OutOfRangeError(
            f"position {o.position} is out of range: the text has positions 0-{counted[0] - 1}"
        )


def check_causal(req: AnalysisRequest, spec: ModelSpec, facts: dict[str, Any]) -> None:
    """The causal views (docs/causal.md): a language-model head, one-token targets, a corrupted
    text of the text's token length, a position and a continuation within the text's limits."""
    if facts.get("lm_head") is False:
        can = [
            n
            for n in get_catalogue().names_available()
            if model_facts(get_catalogue().get(n)).get("lm_head")
        ]
        raise HeadscopeError(
            f"{req.model} has no language-model head, so it cannot say what comes next ({facts['lm_head_reason']}); "
            f"the causal views run on {', '.join(can) or 'decoders with a head (none in this catalogue)'}",
        )  # fmt: skip
    o, kinds = req.options, set(req.analyses)
    counted = count_tokens(spec, req.text)
    for t in o.target if isinstance(o.target, list) else [o.target]:
        if isinstance(t, str):
            got = count_tokens(spec, t, special=False)
            if got is not None and got[0] != 1:
                raise OutOfRangeError(
                    f"target {t!r} is {got[0]} tokens for {req.model}; a target must be exactly one token"
                )
        elif isinstance(t, int) and facts.get("vocab_size") and t >= int(facts["vocab_size"]):
            raise OutOfRangeError(
                f"token id {t} is out of range: {req.model} has ids 0-{int(facts['vocab_size']) - 1}"
            )
    check_edges(req, facts)
    if counted is None:
        return  # the worker checks the rest
    n, limit = counted
    if "continue" in kinds and n + o.continue_tokens > limit:
        raise HeadscopeError(
            f"the text has {n} tokens; with {o.continue_tokens} more (continue_tokens) it would pass "
            f"{req.model}'s limit of {limit}",
        )  # fmt: skip
    total = n + (o.continue_tokens if "continue" in kinds else 0)
    if o.position is not None and o.position >= total:
        raise OutOfRangeError(
            f"position {o.position} is out of range: the text has positions 0-{total - 1}"
        )
    if kinds & set(PAIR_KINDS) and o.corrupted is not None:
        other = count_tokens(spec, o.corrupted)
        if other is not None and other[0] != n:
            raise HeadscopeError(
                f"the corrupted text has {other[0]} tokens and the text {n}; patching compares the two "
                "position by position, so they need the same token length",
            )  # fmt: skip
    n_layers, n_heads = facts.get("n_layers"), facts.get("n_heads")
    if isinstance(o.ablate, list) and n_layers and n_heads:
        for layer, head in o.ablate:
            if layer >= n_layers or head >= n_heads:
                raise OutOfRangeError(
                    f"head [{layer}, {head}] is out of range: {req.model} has layers 0-{n_layers - 1}, heads 0-{n_heads - 1}"
                )


def check_edges(req: AnalysisRequest, facts: dict[str, Any]) -> None:
    """edge-attribution (docs/circuits.md): N and the faithfulness curve's sizes within the model's edges."""
    n_layers, n_heads = facts.get("n_layers"), facts.get("n_heads")
    if "edge-attribution" not in req.analyses or not n_layers or not n_heads:
        return
    o = req.options
    edges = edge_count(int(n_layers), int(n_heads), bool(facts.get("parallel_residual")))
    if (
        "top_edges" in o.model_fields_set and o.top_edges > edges
    ):  # the default is cut to a small model's edges
        raise OutOfRangeError(
            f"top_edges {o.top_edges} is more than {req.model}'s {edges} edges (at most {min(edges, MAX_TOP_EDGES)})"
        )
    if o.curve_sizes and o.curve_sizes[-1] > edges:
        raise OutOfRangeError(
            f"curve size {o.curve_sizes[-1]} is more than {req.model}'s {edges} edges"
        )


job_routes(
    router,
    path="/api/analyses",
    kind="analysis",
    request_model=AnalysisRequest,
    check=lambda req, queue, store: check_request(req, store),
    what="analysis",
    names=("submit_analysis", "get_analysis", "cancel_analysis"),
    docs=(
        """Queue a text analysis; identical requests get the same id, job and result.""",
        """Status, progress, partial sections while running (``?partial=`` picks which), the result when
        finished (``?result=none``: not even then).""",
        """Cancel a queued or running analysis (a finished one is left as it is): a running one stops at its
        next progress step, keeping nothing (edge-attribution: between EAP-IG's layers and circuit batches).""",
    ),
    submit_errors=(),
    result_query=True,
)
