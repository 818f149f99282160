"""Which sections of a text analysis job go to parts (docs/scaling.md), and their fan-out.

The analysis job (``workers.queue.jobs.run_analysis``) asks ``SplitSections.defer`` before each section.
A section whose spec names a splitter (``AnalysisSpec.split``) and whose splitter plans parts for it
(an ablation of every head or a patching of at least ``split_min_run_tokens`` run tokens, say) is left
out; once the job's other sections are done it becomes parts that any worker takes, and a merge job
(``workers.queue.jobs_split``) that puts the merged sections into the job's result and stores it. The
job's other sections wait in Redis (``hs:split-base:{id}``) for the merge; while the parts run, the
API shows them (the job's partial result) with the parts' progress.
"""

from __future__ import annotations

import logging
from typing import Any

from workers.core import registry
from workers.core.errors import CancelledError
from workers.core.jsonable import dumps
from workers.core.settings import get_settings
from workers.queue import keys as protocol
from workers.queue import parts

logger = logging.getLogger(__name__)
PART = "workers.queue.jobs_split.section_part"
MERGE = "workers.queue.jobs_split.section_merge"


class SplitSections:
    """Which sections of one analysis job go to parts, and their fan-out once the job's own are done."""

    def __init__(self, rep: Any, request: dict[str, Any]):
        self.rep = rep
        self.request = request
        self.settings = get_settings()
        self.sections: dict[str, dict[str, Any]] = {}  # kind -> {"payloads", "sizes", "merge"}

    def defer(self, kind: str, ctx: Any) -> bool:
        """``analyze``'s hook: True hands ``kind`` to parts (the job leaves it out of its result)."""
        spec = registry.get(kind)
        if spec.split is None:
            return False
        plan = registry.resolve(spec.split).plan(
            ctx,
            spec.options_of(ctx.options),
            min_run_tokens=self.settings.split_min_run_tokens,
            part_run_tokens=self.settings.split_part_run_tokens,
        )
        if plan is None:
            return False
        self.sections[kind] = {
            "payloads": [{"kind": kind, **p} for p in plan.payloads],
            "sizes": plan.sizes,
            "merge": plan.merge,
        }
        n_parts, units = len(plan.payloads), sum(plan.sizes)
        ctx.progress(1.0, f"{kind}: {units} runs handed to {n_parts} parts")
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
