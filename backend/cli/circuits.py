"""``headscope circuits``: a circuit found on a task data set and scored as MIB scores it
(docs/circuits.md, "Circuits on a task data set"; keys: docs/results.md, ``circuits-set``), JSON out,
progress on stderr; optionally the circuit exported as JSON and GraphML."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _fields(text: str | None) -> dict[str, str] | None:
    from workers.core.errors import HeadscopeError

    if not text:
        return None
    out = {}
    for part in text.split(","):
        ours, _, theirs = part.partition("=")
        if not theirs:
            raise HeadscopeError(
                f"--fields takes ours=theirs pairs (clean=prompt,...), not {part!r}"
            )
        out[ours.strip()] = theirs.strip()
    return out


def cmd_circuits(args: argparse.Namespace) -> int:
    from backend.cli.corpus import write_result
    from backend.cli.progress import StderrProgress
    from workers.analyses.circuits.export import circuit_document, graphml
    from workers.analyses.circuits.set_scores import size_of
    from workers.analyses.circuits.spec import CIRCUITS_SET, SetOptions
    from workers.core.errors import HeadscopeError, readable
    from workers.engine.pipeline import analyze
    from workers.models import load_model

    if (args.task is None) == (args.dataset is None):
        raise HeadscopeError("give exactly one of --task and --dataset")
    steps = args.ig_steps if args.ig_steps is not None else (1 if args.method == "eap" else 5)
    if args.method == "eap" and steps != 1:
        raise HeadscopeError("--method eap is one step (--ig-steps 1); use --method eap-ig")
    if args.method == "eap-ig" and steps < 2:
        raise HeadscopeError("EAP-IG takes at least 2 steps (--ig-steps 1 is --method eap)")
    text = args.task if args.task else Path(args.dataset).read_text(encoding="utf-8")
    opts: dict[str, Any] = {
        "set_examples": args.n, "ig_steps": steps, "bootstrap": args.bootstrap,
        "random_circuits": args.random, "discovery": args.discovery, "set_edges": args.edges,
        "set_fields": _fields(args.fields), "seed": args.seed, "dtype": args.dtype,
    }  # fmt: skip
    try:
        SetOptions(**opts)
    except ValueError as exc:
        raise HeadscopeError(readable(exc)) from None
    labels = None
    if args.atlas:  # read before the run: a wrong file is refused at once
        from workers.engine.atlas import atlas, head_labels

        at = atlas(args.atlas)
        if at.get("model") not in (None, args.model):
            raise HeadscopeError(f"--atlas is an atlas of {at['model']}, not of {args.model}")
        labels = head_labels(at)
    bar = StderrProgress("circuits", enabled=not args.quiet)
    loaded = load_model(args.model, dtype=args.dtype, device=args.device)
    try:
        result = analyze(loaded, text, [CIRCUITS_SET], opts, progress=bar)
    finally:
        bar.close()
    section = result.pop(CIRCUITS_SET)
    out = {**result, "analysis": CIRCUITS_SET, **section}
    if args.dataset:
        out["task"] = Path(args.dataset).name
    write_result(args.out, out)
    if args.circuit_json or args.graphml:
        n = size_of(args.circuit_size, out["n_edges_total"])
        doc = circuit_document(out, n, args.circuit_size, labels)
        if args.circuit_json:
            Path(args.circuit_json).write_text(json.dumps(doc, indent=1))
        if args.graphml:
            Path(args.graphml).write_text(graphml(doc))
    if not args.quiet:
        keys = ("accuracy", "logit_diff", "n_examples", "cpr", "cmd", "warning")
        summary = {k: out[k] for k in keys}
        summary["random"] = {k: out["random"][k] for k in ("cpr", "cmd")}
        print(json.dumps(summary), file=sys.stderr)
    return 0


def add_circuits_commands(sub: Any) -> None:
    c = sub.add_parser(
        "circuits",
        help="a circuit found on a task data set, scored as MIB scores it (JSON out)",
    )
    c.add_argument("--model", default="smollm2", help="catalogue name (default: smollm2)")
    c.add_argument("--task", choices=("ioi", "capitals"), help="a built-in task set")
    c.add_argument("--n", type=int, default=200, help="examples drawn from --task (default 200)")
    c.add_argument("--dataset", help="a JSON Lines set: clean, corrupted, answer, wrong per line")
    c.add_argument("--fields", help="the set's field names, e.g. clean=prompt,corrupted=cf")
    c.add_argument("--method", choices=("eap", "eap-ig"), default="eap-ig")
    c.add_argument("--ig-steps", type=int, help="EAP-IG's steps (default 5)")
    c.add_argument("--bootstrap", type=int, default=10, help="resamples for stability (0: none)")
    c.add_argument("--random", type=int, default=5, help="random circuits beside it (0: none)")
    c.add_argument("--discovery", type=float, default=0.5, help="fraction that finds the circuit")
    c.add_argument("--edges", type=int, default=200, help="top edges listed in the result")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    c.add_argument("--device", default=None)
    c.add_argument("--out", required=True, help="the result JSON")
    c.add_argument("--circuit-json", help="also write the circuit (export JSON) here")
    c.add_argument("--graphml", help="also write the circuit as GraphML here")
    c.add_argument(
        "--atlas",
        help="the model's head atlas (`headscope atlas --out`): head nodes of the exported circuit "
        "carry their labels",
    )
    c.add_argument(
        "--circuit-size", type=float, default=0.001,
        help="the exported circuit's size as a fraction of all edges (default 0.001)",
    )  # fmt: skip
    c.add_argument("--quiet", "-q", action="store_true")
    c.set_defaults(func=cmd_circuits)
