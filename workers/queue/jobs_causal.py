"""The parts and the merge of a split ablation or patching (docs/scaling.md): RQ jobs that
``workers.queue.causal_split`` enqueues for a text analysis job."""

from __future__ import annotations

import json
import time
from typing import Any

from workers.core.jsonable import jsonable
from workers.queue import keys as protocol
from workers.queue import parts, reporter

PROGRESS_EVERY_S = 0.25


def causal_part(payload: dict[str, Any], ctx: parts.PartContext) -> dict[str, Any]:
    """A part of a split ablation or patching: its range of forward calls (``calls``)."""
    from workers.analyses.causal.interventions import ablation, patching
    from workers.core.errors import CancelledError
    from workers.models import load_model
    from workers.models.adapters import Encoded

    loaded = load_model(payload["model"], dtype=payload["dtype"])
    calls = (int(payload["calls"][0]), int(payload["calls"][1]))
    last = [0.0]

    def progress(fraction: float, message: str) -> None:  # also where a cancel stops the part
        if ctx.cancelled():
            raise CancelledError(f"the {payload['kind']} part")
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY_S:
            last[0] = now
            ctx.items(int(fraction * payload.get("runs", 0)))

    if payload["kind"] == "ablation":
        out = ablation(
            loaded,
            Encoded(**payload["encoded"]),
            mode=payload["mode"],
            target=payload["target"],
            position=payload["position"],
            calls=calls,
            progress=progress,
        )
        return {
            "kind": "ablation",
            **jsonable(out),
            "n_layers": loaded.n_layers,
            "n_heads": loaded.n_heads,
        }
    out = patching(
        loaded,
        Encoded(**payload["clean"]),
        Encoded(**payload["corrupted"]),
        target=payload["target"],
        calls=calls,
        progress=progress,
    )
    return {"kind": "patching", **jsonable(out)}


def causal_merge(partials: parts.Partials, context: dict[str, Any]) -> dict[str, Any]:
    """The merge job: the handed sections merged from their parts, put into the job's other sections,
    stored under the job's id."""
    from workers.analyses.causal import parts as cp
    from workers.core.errors import HeadscopeError

    job_id = context["job_id"]
    rep = reporter.current(result_id=job_id)
    plan = parts.plan(rep.conn, job_id) or {}
    try:
        raw = rep.conn.get(protocol.split_base_key(job_id))
        if raw is None:
            raise RuntimeError(f"the other sections of job {job_id} are gone from Redis")
        result = json.loads(raw)
        seconds = time.time() - float(plan.get("started", time.time()))
        for kind, where in context["sections"].items():
            got = [partials[i] for i in where["parts"]]
            if kind == "ablation":
                section = {**cp.merge_ablation(got), "each": True}
            else:
                section = {
                    **cp.merge_patching(
                        got, n_layers=where["n_layers"], n_heads=where["n_heads"], n=where["n"]
                    ),
                    **where["extras"],
                }
            section["timings"] = {"total_s": seconds, "parts": len(got)}
            result[kind] = section
    except HeadscopeError as exc:
        return rep.fail(exc)
    size = rep.finish(result)
    rep.conn.delete(protocol.split_base_key(job_id))
    return {"bytes": size}
