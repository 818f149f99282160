"""The circuits' sections (docs/circuits.md, keys in docs/results.md): information-flow routes of one
text; attribution patching and edge attribution of a clean/corrupted pair."""

from __future__ import annotations

from typing import Any

from workers.analyses.causal.section import corrupted_of, pair_texts, target_of
from workers.analyses.circuits.attribution_patching import attribution_patching
from workers.analyses.circuits.edges import edge_attribution
from workers.analyses.circuits.information_flow import information_flow
from workers.analyses.circuits.spec import (
    AttributionPatchingOptions,
    EdgeOptions,
    FlowOptions,
    SetOptions,
)
from workers.core.progress import scaled


def flow_section(ctx: Any, options: FlowOptions) -> dict[str, Any]:
    return information_flow(  # type: ignore[no-any-return]
        ctx.loaded,
        ctx.encoded,
        position=options.position,
        threshold=float(options.threshold),
        progress=ctx.progress,
    )


def attribution_patching_section(ctx: Any, options: AttributionPatchingOptions) -> dict[str, Any]:
    corrupted = corrupted_of(ctx, options)
    out = attribution_patching(
        ctx.loaded,
        ctx.encoded,
        corrupted,
        target=target_of(options),
        real=bool(options.real),
        qk_fix=bool(options.qk_fix),
        progress=ctx.progress,
    )
    return pair_texts(ctx, options, out, corrupted)


def edge_attribution_section(ctx: Any, options: EdgeOptions) -> dict[str, Any]:
    corrupted = corrupted_of(ctx, options)
    out = edge_attribution(
        ctx.loaded, ctx.encoded, corrupted, target=target_of(options),
        top_edges=int(options.top_edges), ig_steps=int(options.ig_steps),
        curve_sizes=options.curve_sizes, all_edges=bool(options.all_edges), progress=ctx.progress,
    )  # fmt: skip
    return pair_texts(ctx, options, out, corrupted)


def circuits_set_section(ctx: Any, options: SetOptions) -> dict[str, Any]:
    """The text names a built-in task or a stored set (``cp-...``), or holds a JSON Lines set
    (docs/circuits.md)."""
    from workers.analyses.circuits.set_circuits import circuits_on_set
    from workers.analyses.circuits.set_nodes import node_scores
    from workers.analyses.circuits.tasks import TASKS, builtin, examples_of, parse_jsonl
    from workers.inputs.task_sets import is_set_id, load_rows

    tok = ctx.loaded.tokenizer
    name = ctx.text.strip()
    stored: dict[str, Any] = {}
    if name in TASKS:
        examples = builtin(name, tok, int(options.set_examples), int(options.seed))
    elif is_set_id(name):
        meta, rows = load_rows(name)
        stored = {"set_id": name, "set_name": meta.get("name")}
        examples = examples_of(rows, tok, name=str(meta.get("name") or name))
        name = "upload"
    else:
        name = "upload"
        examples = parse_jsonl(ctx.text, tok, fields=options.set_fields, name="the data set")
    out = circuits_on_set(
        ctx.loaded, examples, ig_steps=int(options.ig_steps), discovery=float(options.discovery),
        seed=int(options.seed), bootstrap=int(options.bootstrap), random=int(options.random_circuits),
        top_edges=int(options.set_edges), progress=scaled(ctx.progress, 0.0, 0.95),
    )  # fmt: skip
    out["node_scores"] = node_scores(
        ctx.loaded, examples, out["discovery_examples"], progress=scaled(ctx.progress, 0.95, 1.0)
    )  # beside the edge scores, over the same discovery examples
    return {"task": name, **stored, "examples": [ex.as_dict() for ex in examples], **out}
