"""Which sections of a text analysis job go to parts (docs/scaling.md), and their fan-out.

The analysis job (``workers.queue.jobs.run_analysis``) asks ``SplitSections.defer`` before each section:
an ablation of every head or a patching of at least ``split_min_run_tokens`` run tokens (intervened
runs x their tokens, ``workers.analyses.causal.parts``) is left out, and once the job's other sections
are done it becomes parts (ranges of its forward calls, ~``split_part_run_tokens`` each) that any
worker takes, and a merge job (``workers.queue.jobs_causal``) that puts the merged sections into the job's
result and stores it. The job's other sections wait in Redis (``hs:split-base:{id}``) for the merge;
while the parts run, the API shows them (the job's partial result) with the parts' progress.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from workers.core.errors import CancelledError
from workers.core.jsonable import dumps
from workers.core.settings import get_settings
from workers.queue import keys as protocol
from workers.queue import parts

logger = logging.getLogger(__name__)
PART = "workers.queue.jobs_causal.causal_part"
MERGE = "workers.queue.jobs_causal.causal_merge"


def _encoded(enc: Any) -> dict[str, Any]:
    return dataclasses.asdict(enc)


class SplitSections:
    """Which sections of one analysis job go to parts, and their fan-out once the job's own are done."""

    def __init__(self, rep: Any, request: dict[str, Any]):
        self.rep = rep
        self.request = request
        self.settings = get_settings()
        self.sections: dict[str, dict[str, Any]] = {}  # kind -> {"payloads", "sizes", "merge"}

    def defer(self, kind: str, ctx: Any) -> bool:
        """``analyze``'s hook: True hands ``kind`` to parts (the job leaves it out of its result)."""
        from workers.analyses.causal import parts as cp

        if kind not in ("ablation", "patching"):
            return False
        loaded, o = ctx.loaded, ctx.options
        base = {
            "kind": kind,
            "model": loaded.name,
            "dtype": o.get("dtype", "float32"),
            "target": _target(o),
        }
        if kind == "ablation":
            if o["ablate"] != "each":
                return False
            from workers.analyses.causal.section import _position

            p = _position(ctx)
            plan = cp.ablation_plan(n_layers=loaded.n_layers, n_heads=loaded.n_heads, position=p)
            base.update(encoded=_encoded(ctx.encoded), mode=o["ablation"], position=p)
            merge: dict[str, Any] = {}
        else:
            from workers.analyses.causal.section import _corrupted, _pair_texts

            corrupted = _corrupted(ctx)
            if corrupted.n != ctx.encoded.n:
                return False  # the section itself says why not
            first = cp.first_difference(ctx.encoded.input_ids, corrupted.input_ids)
            plan = cp.patching_plan(
                n_layers=loaded.n_layers, n_heads=loaded.n_heads, n=ctx.encoded.n, first=first
            )
            base.update(clean=_encoded(ctx.encoded), corrupted=_encoded(corrupted))
            merge = {"n": ctx.encoded.n, "extras": _pair_texts(ctx, {}, corrupted)}
        costs = [tokens for _, tokens in plan]
        if sum(costs) < self.settings.split_min_run_tokens:
            return False
        ranges = cp.group_calls(costs, part_cost=self.settings.split_part_run_tokens)
        if len(ranges) < 2:
            return False
        runs = [
            sum(r for r, _ in plan[c0:c1]) for c0, c1 in ranges
        ]  # the parts' progress counts runs
        self.sections[kind] = {
            "payloads": [
                {**base, "calls": list(r), "runs": n} for r, n in zip(ranges, runs, strict=True)
            ],
            "sizes": runs,
            "merge": {**merge, "n_layers": loaded.n_layers, "n_heads": loaded.n_heads},
        }
        ctx.progress(1.0, f"{kind}: {sum(runs)} runs handed to {len(ranges)} parts")
        return True

    def fan_out(self, result: dict[str, Any]) -> parts.Split | None:
        """After the job's own sections: keep them for the merge and enqueue every handed section's parts."""
        if not self.sections:
            return None
        rep = self.rep
        job_id = rep.id
        rep.conn.set(protocol.split_base_key(job_id), dumps(result), ex=rep.ttl_s)
        payloads, sizes, where = [], [], {}
        for kind, sec in self.sections.items():
            where[kind] = {
                **sec["merge"],
                "parts": list(range(len(payloads), len(payloads) + len(sec["payloads"]))),
            }
            payloads += sec["payloads"]
            sizes += sec["sizes"]
        if rep.conn.exists(protocol.cancel_key(job_id)):
            rep.conn.delete(protocol.split_base_key(job_id))
            raise CancelledError("the analysis")
        merge = parts.fan_out(
            rep.conn,
            job_id=job_id,
            part=PART,
            merge=MERGE,
            payloads=payloads,
            sizes=sizes,
            unit="runs",
            context={"job_id": job_id, "sections": where},
            job_timeout=self.settings.job_timeout_s,
            owned_keys=[protocol.split_base_key(job_id)],
        )
        if rep.conn.exists(
            protocol.cancel_key(job_id)
        ):  # cancelled while fanning out: the API saw no plan
            parts.cancel(rep.conn, job_id, len(payloads))
            raise CancelledError("the analysis")
        rep.progress(0.99, f"{', '.join(self.sections)} in {len(payloads)} parts")
        logger.info(
            "analysis job %s: %s in %d parts", job_id, ", ".join(self.sections), len(payloads)
        )
        return parts.Split(merge.id, len(payloads))


def _target(options: dict[str, Any]) -> Any:
    t = options.get("target")
    return list(t) if isinstance(t, list | tuple) else t
