"""Part and merge functions for tests/test_parts.py (workers import them by dotted path ``parts_toys.*``)."""

from __future__ import annotations

from typing import Any

import numpy as np
from rq import get_current_job


def sum_part(payload: dict[str, Any], ctx: Any = None) -> dict[str, Any]:
    """Sum and count of 1/(i+1) over ``[start, stop)``; fails when ``fail`` names this start (``flaky``: first try only)."""
    start, stop = payload["start"], payload["stop"]
    if payload.get("fail") == start:
        raise ValueError(f"text {start} is broken")
    if payload.get("flaky") == start:
        job = get_current_job()
        assert job is not None
        if job.connection.incr(f"hs-test:flaky:{job.id}") == 1:
            raise RuntimeError("worker lost")
    x = 1.0 / (np.arange(start, stop, dtype=np.float64) + 1.0)
    return {"sum": float(x.sum()), "n": stop - start}


def sum_merge(partials: list[dict[str, Any]], context: dict[str, Any]) -> dict[str, Any]:
    """Add the parts in the given order."""
    total = 0.0
    for p in partials:
        total += p["sum"]
    return {"sum": total, "n": sum(p["n"] for p in partials), "label": context.get("label")}


def user_error_part(payload: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Fails on the input (a ``HeadscopeError``) where ``bad`` names this start; counts its calls."""
    from workers.core.errors import HeadscopeError

    ctx.conn.incr(f"hs-test:calls:{ctx.job_id}:{ctx.index}")
    if payload.get("bad") == payload["start"]:
        raise HeadscopeError(f"text {payload['start']} is not UTF-8")
    return sum_part(payload, ctx)


def flaky_merge(partials: Any, context: dict[str, Any]) -> dict[str, Any]:
    """``sum_merge`` that dies on its first attempt (a worker lost mid-merge)."""
    job = get_current_job()
    assert job is not None
    if job.connection.incr(f"hs-test:merge-attempts:{job.id}") == 1:
        raise RuntimeError("worker lost while merging")
    return sum_merge(partials, context)
