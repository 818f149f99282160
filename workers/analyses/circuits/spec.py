"""Circuits (docs/circuits.md): which heads and feed-forwards carry what the model says, read from one
text (information-flow routes) or from a clean/corrupted pair (attribution patching; EAP and EAP-IG
edge scores, the circuit and its faithfulness)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field, StrictInt

from workers.analyses.causal.spec import (
    batched_runs,
    check_head,
    check_pair,
    check_target,
    logits_bytes,
    patching_rows,
)
from workers.core.errors import OutOfRangeError
from workers.core.memory import GIB, Base, Footprint, ModelFacts
from workers.core.options import Cli, Pair, Position, Target, TextOptions
from workers.core.registry import AnalysisSpec, register

INFORMATION_FLOW = "information-flow"
CIRCUITS_SET = "circuits-set"
ATTRIBUTION_PATCHING = "attribution-patching"
EDGE_ATTRIBUTION = "edge-attribution"
DEFAULT_THRESHOLD = 0.04  # information flow's edge importance threshold tau
MAX_TOP_EDGES = 10_000  # edges listed and in the circuit (the model's edge count bounds it too)
MAX_IG_STEPS = 50  # EAP-IG's steps (each a forward and a backward)
MAX_CURVE_SIZES = 24  # circuits of the faithfulness curve (each an edge-patched forward)
CURVE_EDGES = 250  # a curve circuit larger than the listed edges comes with its strongest this many
FAITHFUL = (
    0.8  # the circuits page opens at the smallest circuit of the curve at least this faithful
)
DRAWN_EDGES = 120  # edges the circuits page draws at most (the strongest): a legible graph
EDGE_BATCH_BYTES = (
    768 * 2**20
)  # a batch of EAP-IG rows or of edge-patched rows holds about this much


def edge_count(n_layers: int, n_heads: int, parallel: bool) -> int:
    """Edges of a decoder's graph (docs/circuits.md; ``workers.analyses.circuits.graph.Graph``): into
    each head's q, k and v from the input and every node of the layers below, into each feed-forward
    from those (and its own layer's heads unless ``parallel``), into the logits from every node."""
    up = [1 + layer * (n_heads + 1) for layer in range(n_layers)]
    heads = 3 * n_heads * sum(up)
    ffs = sum(u + (0 if parallel else n_heads) for u in up)
    return heads + ffs + 1 + n_layers * (n_heads + 1)


def _curve_sizes(v: Any) -> Any:
    if v is not None:
        if any(x < 1 for x in v):
            raise ValueError("curve sizes are edge counts of at least 1")
        return sorted(set(v))  # a set: the same sizes in any order are one request
    return v


class FlowOptions(TextOptions, Position):
    threshold: float = Field(
        DEFAULT_THRESHOLD,
        gt=0.0,
        lt=1.0,
        description="information-flow: the edges' importance threshold τ",
    )


class AttributionPatchingOptions(TextOptions, Target, Pair):
    real: bool = Field(
        False, description="attribution-patching: also run the real head patching and correlate"
    )
    qk_fix: bool = Field(
        False,
        description="attribution-patching: AtP*'s query-key fix for each head's queries and keys",
    )


class EdgeOptions(TextOptions, Target, Pair):
    top_edges: Annotated[int, Cli(metavar="N")] = Field(
        200, ge=1, le=MAX_TOP_EDGES, description="edge-attribution: N, the edges of the circuit"
    )
    ig_steps: Annotated[int, Cli(metavar="K")] = Field(
        5, ge=1, le=MAX_IG_STEPS, description="edge-attribution: EAP-IG's steps k (1 = EAP)"
    )
    curve_sizes: Annotated[
        Annotated[list[StrictInt], Field(min_length=1, max_length=MAX_CURVE_SIZES)] | None,
        AfterValidator(_curve_sizes),
        Cli(parse=int, nargs="+", metavar="N"),
    ] = Field(
        None,
        description="edge-attribution: edge counts of the faithfulness curve (None: 12 from 0.1 % to 20 %)",
    )
    all_edges: bool = Field(
        False, description="edge-attribution: list every edge's score, not the top N only"
    )


class SetOptions(TextOptions):
    """circuits-set: the request's text is a built-in task's name (``ioi``, ``capitals``), a stored set's
    id (``cp-...``, ``POST /api/task-sets``) or a small data set in JSON Lines (docs/circuits.md,
    "Circuits on a task data set")."""

    set_examples: Annotated[int, Cli(metavar="N")] = Field(
        200, ge=2, le=2000, description="circuits-set: examples drawn from a built-in task"
    )
    ig_steps: Annotated[int, Cli(metavar="K")] = Field(
        5, ge=1, le=MAX_IG_STEPS, description="edge-attribution: EAP-IG's steps k (1 = EAP)"
    )  # declared as EdgeOptions declares it: one option
    bootstrap: Annotated[int, Cli(metavar="B")] = Field(
        10, ge=0, le=200, description="circuits-set: bootstrap resamples for the stability"
    )
    random_circuits: Annotated[int, Cli(metavar="R")] = Field(
        5, ge=0, le=50, description="circuits-set: random circuits (seeds) beside the found one"
    )
    discovery: float = Field(
        0.5,
        gt=0.0,
        lt=1.0,
        description="circuits-set: the fraction of examples that find the circuit",
    )
    set_edges: Annotated[int, Cli(metavar="N")] = Field(
        200, ge=1, le=MAX_TOP_EDGES, description="circuits-set: the top edges listed in the result"
    )
    set_fields: dict[str, str] | None = Field(
        None,
        description='circuits-set: a JSON Lines set\'s field names, e.g. {"clean": "prompt"}',
    )


# ---------------------------------------------------------------- memory


def flow_memory(base: Base, options: FlowOptions) -> Footprint:
    """Each layer's record kept for the top-down pass (up to 1 GiB, else recomputed) + one chunk."""
    f, n = base.facts, base.n
    L, H, d, b = f.n_layers, f.n_heads, f.hidden, f.dtype_bytes
    kept = L * (H * n * n + 10 * n * d) * b
    held = kept if kept <= GIB else 2 * H * n * n * b + 10 * n * d * b
    return Footprint(stages={INFORMATION_FLOW: base.forward + held + 3 * 2**25})


def atp_memory(base: Base, options: AttributionPatchingOptions) -> Footprint:
    """The corrupted run's graph keeps every layer's activations; ``real`` adds patching's batches."""
    L = base.facts.n_layers
    stage = (L + 2) * base.forward + base.hidden_states * 4 + logits_bytes(base)
    if options.real:
        stage = max(stage, batched_runs(base, patching_rows(base)))
    return Footprint(stages={ATTRIBUTION_PATCHING: stage})


def edge_rows(facts: ModelFacts, n: int) -> tuple[int, int, int, int]:
    """edge-attribution's batches on an ``n``-token text: (EAP-IG rows, bytes of one, edge-patched rows,
    bytes of one). An EAP-IG row keeps every layer's q/k/v copies, maps and feed-forward for the
    backward; an edge-patched row holds every writer's change and one layer's q/k/v inputs."""
    L, H, d, b = facts.n_layers, facts.n_heads, facts.hidden, facts.dtype_bytes
    ig = L * (12 * H * n * d + 4 * H * n * n + 4 * n * facts.intermediate + 8 * n * d) * b
    patched = (1 + L * (H + 1) + 6 * H) * n * d * b + 4 * H * n * n * b
    return max(1, EDGE_BATCH_BYTES // ig), ig, max(1, EDGE_BATCH_BYTES // patched), patched


def edge_memory(base: Base, options: EdgeOptions) -> Footprint:
    """The clean and corrupted runs' writers and streams, then the larger of a batch of EAP-IG rows and
    a batch of edge-patched rows (``edge_rows``)."""
    f, n = base.facts, base.n + base.extra
    L, H, d, b = f.n_layers, f.n_heads, f.hidden, f.dtype_bytes
    runs = 2 * (1 + L * (H + 1) + 2 * L + 1) * n * d * b
    ig_rows, ig, patched_rows, patched = edge_rows(f, n)
    curve = len(options.curve_sizes or range(12)) + 1
    stage = (
        base.forward
        + runs
        + max(min(options.ig_steps, ig_rows) * ig, min(curve, patched_rows) * patched)
    )
    return Footprint(stages={EDGE_ATTRIBUTION: stage})


# ---------------------------------------------------------------- checks before queueing


def check_flow_position(request: Any, options: FlowOptions) -> None:
    """The position the graph starts from is in the text (the threshold's range is the contract's)."""
    if options.position is None:
        return
    counted = request.tokens()
    if counted is not None and options.position >= counted[0]:
        raise OutOfRangeError(
            f"position {options.position} is out of range: the text has positions 0-{counted[0] - 1}"
        )


def check_edges(request: Any, options: EdgeOptions) -> None:
    """N and the faithfulness curve's sizes within the model's edges."""
    n_layers, n_heads = request.facts.get("n_layers"), request.facts.get("n_heads")
    if not n_layers or not n_heads:
        return
    edges = edge_count(int(n_layers), int(n_heads), bool(request.facts.get("parallel_residual")))
    given = request.flat.model_fields_set if request.flat is not None else set()
    if "top_edges" in given and options.top_edges > edges:  # the default is cut to a small model's
        raise OutOfRangeError(
            f"top_edges {options.top_edges} is more than {request.model}'s {edges} edges (at most {min(edges, MAX_TOP_EDGES)})"
        )
    if options.curve_sizes and options.curve_sizes[-1] > edges:
        raise OutOfRangeError(
            f"curve size {options.curve_sizes[-1]} is more than {request.model}'s {edges} edges"
        )


def check_set(request: Any, options: SetOptions) -> None:
    """A built-in task's name, a stored set's id (``cp-...``) or JSON Lines of objects (the worker checks
    the token lengths with the model's tokenizer), and no other analysis in the request."""
    from workers.analyses.circuits.tasks import FIELDS, TASKS

    if len(request.kinds) > 1:
        raise OutOfRangeError(f"{CIRCUITS_SET} runs alone: its text is a task set, not a text")
    names = {f: f for f in FIELDS} | (options.set_fields or {})
    if set(names) != set(FIELDS):
        raise OutOfRangeError(f"set_fields names {', '.join(FIELDS)} only")
    if request.text.strip() in TASKS:
        return
    from workers.inputs.task_sets import is_set_id

    if is_set_id(request.text):  # a stored set (the API checks that it is stored)
        if options.set_fields:
            raise OutOfRangeError(
                "set_fields applies to a set in the request's text; a stored set's field names "
                "were given when it was uploaded"
            )
        return
    import json

    for number, raw in enumerate(request.text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError:
            raise OutOfRangeError(
                f"{CIRCUITS_SET}: the text is a task ({', '.join(TASKS)}) or JSON Lines; line {number} is not JSON"
            ) from None
        missing = [n for n in names.values() if not isinstance(obj, dict) or n not in obj]
        if missing:
            raise OutOfRangeError(f"{CIRCUITS_SET}: line {number} has no field {missing[0]!r}")


SECTIONS = "workers.analyses.circuits.section"

register(
    AnalysisSpec(
        kind=INFORMATION_FLOW,
        report="workers.analyses.circuits.report:information_flow",
        summary="information-flow routes: which tokens, heads and feed-forwards feed a position",
        options=FlowOptions,
        section=f"{SECTIONS}:flow_section",
        order=90,
        weight=1.5,
        needs={"whole_text"},
        memory=flow_memory,
        check=(check_flow_position,),
    )
)
register(
    AnalysisSpec(
        kind=ATTRIBUTION_PATCHING,
        report="workers.analyses.circuits.report:attribution_patching",
        summary="attribution patching (AtP, AtP*): every head's patching effect from two gradients",
        options=AttributionPatchingOptions,
        section=f"{SECTIONS}:attribution_patching_section",
        order=160,
        weight=2.0,
        needs={"lm_head", "whole_text", "pair"},
        memory=atp_memory,
        check=(check_head, check_target, check_pair),
    )
)
register(
    AnalysisSpec(
        kind=EDGE_ATTRIBUTION,
        report="workers.analyses.circuits.report:edge_attribution",
        summary="edge attribution (EAP, EAP-IG): the circuit of the top N edges and its faithfulness",
        options=EdgeOptions,
        section=f"{SECTIONS}:edge_attribution_section",
        order=170,
        weight=8.0,
        needs={"lm_head", "whole_text", "pair"},
        memory=edge_memory,
        check=(check_head, check_target, check_edges, check_pair),
    )
)
register(
    AnalysisSpec(
        kind=CIRCUITS_SET,
        summary="a circuit found on a task data set, scored as MIB scores it (CPR, CMD, random, stability)",
        options=SetOptions,
        section=f"{SECTIONS}:circuits_set_section",
        order=175,
        weight=20.0,
        needs={"lm_head"},
        check=(check_set,),
        word_list=True,  # the text is a task set: no token limit, no memory plan of one text
    )
)
