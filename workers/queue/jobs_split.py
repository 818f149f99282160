"""The parts and the merge of a section handed to parts (docs/scaling.md): RQ jobs that
``workers.queue.section_split`` enqueues for a text analysis job. Each part and the merge call the
section's splitter (its spec's ``split``); this module knows no analysis by name."""

from __future__ import annotations

import json
import time
from typing import Any

from workers.core import registry
from workers.queue import keys as protocol
from workers.queue import parts, reporter

PROGRESS_EVERY_S = 0.25


def section_part(payload: dict[str, Any], ctx: parts.PartContext) -> dict[str, Any]:
    """A part of a split section: what its splitter's ``part`` computes from the payload."""
    from workers.core.errors import CancelledError
    from workers.models import load_model

    kind = payload["kind"]
    loaded = load_model(payload["model"], dtype=payload["dtype"])
    last = [0.0]

    def progress(fraction: float, message: str) -> None:  # also where a cancel stops the part
        if ctx.cancelled():
            raise CancelledError(f"the {kind} part")
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY_S:
            last[0] = now
            ctx.items(int(fraction * payload.get("runs", 0)))

    out = registry.resolve(registry.get(kind).split).part(loaded, payload, progress)  # type: ignore[arg-type]
    return {"kind": kind, **out}


def section_merge(partials: parts.Partials, context: dict[str, Any]) -> dict[str, Any]:
    """The merge job: the handed sections merged from their parts, put into the job's other sections,
    stored under the job's id."""
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
            splitter = registry.resolve(registry.get(kind).split)  # type: ignore[arg-type]
            section = splitter.merge(got, where)
            section["timings"] = {"total_s": seconds, "parts": len(got)}
            result[kind] = section
    except HeadscopeError as exc:
        return rep.fail(exc)
    size = rep.finish(result)
    rep.conn.delete(protocol.split_base_key(job_id))
    return {"bytes": size}
