"""A job whose duration the test decides: it holds until the test releases it, then runs for real.

Used by the kill and timeout tests (tests/test_service_kill.py) instead of racing a computation
against a kill or a job timeout: a held job is running (progress > 0) for as long as the test
wants, on any machine, fast or slow. Workers import it by dotted path (``held_jobs.held_analysis``)
with ``tests/`` on their PYTHONPATH.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rq import get_current_job

from workers import jobs


def release_key(job_id: str) -> str:
    return f"hs-test:release:{job_id}"


def attempts_key(job_id: str) -> str:
    return f"hs-test:attempts:{job_id}"


def held_analysis(request: dict[str, Any]) -> dict[str, Any]:
    """Count the attempt, report progress, wait for ``release_key``, then ``run_analysis``."""
    job = get_current_job()
    assert job is not None
    conn = job.connection
    conn.incr(attempts_key(job.id))
    job.meta.update(progress=0.05, message="held by the test")
    job.save_meta()
    while not conn.exists(release_key(job.id)):
        time.sleep(0.02)  # a job timeout (SIGALRM) or SIGKILL ends this wait
    return jobs.run_analysis(request)


def noop() -> int:
    """A job that does nothing (worker recycling tests count jobs, not work)."""
    return 1


def layer_release_key(job_id: str, layer: int) -> str:
    return f"hs-test:release:{job_id}:L{layer}"


def hold_after_layers(publish: Callable[[dict[str, Any]], None], conn: Any, job_id: str) -> Callable[[dict[str, Any]], None]:
    """``publish`` (``Reporter.partial``) that, after writing a layer of a grid section
    (``workers.layer_parts``), holds until the test sets ``layer_release_key``: the test sees the
    gallery with exactly the layers it let through, on any machine."""
    from workers.layer_parts import parse_part_key

    def held(fields: dict[str, Any]) -> None:
        publish(fields)
        for key in fields:
            parsed = parse_part_key(key)
            if parsed is not None:
                while not conn.exists(layer_release_key(job_id, parsed[1])):
                    time.sleep(0.02)

    return held
