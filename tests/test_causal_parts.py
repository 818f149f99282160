"""Ablation of every head and activation patching in parts (workers/analyses/causal/parts.py,
workers/queue/section_split.py, workers/queue/jobs_split.py, workers/analyses/causal/split.py): ranges of forward calls merge to the one-piece view bit for bit, in the core
and through the queue (an analysis job on a real Redis whose ablation and patching go to parts that an
RQ worker runs, merged into the stored result).

The tiny GPT-2 has a head; ``ROW_TOKENS`` is lowered so that its few heads make many calls.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from redis import Redis
from rq import SimpleWorker

from backend.config import Settings
from backend.queue import JobQueue
from backend.store import Store
from workers.analyses.causal import interventions
from workers.analyses.causal import parts as cp
from workers.core.contracts import AnalysisRequest
from workers.core.jsonable import dumps, jsonable
from workers.queue import keys as protocol
from workers.queue import parts

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CLEAN = "The head of the model is in the text and the word is of the token"
CORRUPTED = "The head of the model is in the text and a word is of the token"


@pytest.fixture
def small_calls(monkeypatch):
    monkeypatch.setattr(interventions, "ROW_TOKENS", 64)  # two or three runs a call: many calls


@pytest.fixture(scope="module")
def gpt2(catalogue):
    from workers.models import load_model

    return load_model("tiny-gpt2", device="cpu")


@pytest.fixture
def split_service(redis_server, tmp_path, catalogue, setting, small_calls, monkeypatch):
    """A real Redis, a store the jobs write to, every ablation/patching split into parts of ~30 run
    tokens, and an in-process RQ worker to run them: (conn, store, queue, worker)."""
    import workers.queue.reporter

    conn = Redis.from_url(redis_server)
    conn.flushdb()
    settings = Settings(data_dir=tmp_path / "data", redis_url=redis_server)
    store = Store(settings)
    monkeypatch.setattr(workers.queue.reporter, "store", lambda: store)
    setting("HEADSCOPE_SPLIT_MIN_RUN_TOKENS", "1")
    setting("HEADSCOPE_SPLIT_PART_RUN_TOKENS", "30")
    worker = SimpleWorker(
        [protocol.queue(conn, q) for q in protocol.QUEUES],
        connection=conn,
        serializer=protocol.SERIALIZER,
    )
    return conn, store, JobQueue(conn, store, settings), worker


def test_plans_count_every_run_and_groups_cover_every_call_once(small_calls):
    plan = cp.ablation_plan(n_layers=2, n_heads=4, position=30)
    assert sum(r for r, _ in plan) == 1 + 2 * 4 and all(t == r * 31 for r, t in plan)
    plan = cp.patching_plan(n_layers=2, n_heads=4, n=31, first=10)
    assert sum(r for r, _ in plan) == 21 * 3 + 2 * 4
    costs = [t for _, t in plan]
    for part_cost in (1, 100, 500, sum(costs)):
        ranges = cp.group_calls(costs, part_cost=part_cost)
        assert ranges[0][0] == 0 and ranges[-1][1] == len(costs)
        assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(ranges, ranges[1:], strict=False))
    assert len(cp.group_calls(costs, part_cost=500)) == -(-sum(costs) // 500)


def test_parts_of_ablation_and_patching_merge_to_the_same_bits(gpt2, small_calls):
    from workers.models.adapters import encode

    enc, bad = encode(gpt2, CLEAN), encode(gpt2, CORRUPTED)
    L, H = gpt2.n_layers, gpt2.n_heads
    whole = interventions.ablation(gpt2, enc, mode="mean", target=[5, 9])
    costs = [t for _, t in cp.ablation_plan(n_layers=L, n_heads=H, position=enc.n - 1)]
    ranges = cp.group_calls(costs, part_cost=sum(costs) // 3)
    assert len(ranges) == 3
    got = [
        {
            **jsonable(interventions.ablation(gpt2, enc, mode="mean", target=[5, 9], calls=r)),
            "n_layers": L,
            "n_heads": H,
        }
        for r in ranges
    ]
    merged = cp.merge_ablation(got)
    assert (
        np.array_equal(np.array(merged["map"]), whole["map"])
        and merged["base"] == whole["base"].tolist()
    )

    whole = interventions.patching(gpt2, enc, bad, target=[5, 9])
    first = cp.first_difference(enc.input_ids, bad.input_ids)
    costs = [t for _, t in cp.patching_plan(n_layers=L, n_heads=H, n=enc.n, first=first)]
    ranges = cp.group_calls(costs, part_cost=sum(costs) // 4)
    got = [jsonable(interventions.patching(gpt2, enc, bad, target=[5, 9], calls=r)) for r in ranges]
    merged = cp.merge_patching(got, n_layers=L, n_heads=H, n=enc.n)
    assert np.array_equal(np.array(merged["residual"]), whole["residual"])
    assert np.array_equal(np.array(merged["heads"]), whole["heads"])
    assert merged["metric_clean"] == whole["metric_clean"] and merged["a_token"] == whole["a_token"]
    with pytest.raises(ValueError, match="do not cover"):
        cp.merge_ablation([{"rows": [3, 9], "scores": [0.0] * 6, "n_layers": L, "n_heads": H}])


def test_an_analysis_job_hands_ablation_and_patching_to_parts(split_service):
    from workers.queue.jobs import compute_analysis

    conn, store, queue, worker = split_service
    req = AnalysisRequest(
        model="tiny-gpt2",
        text=CLEAN,
        analyses=["predictions", "ablation", "patching"],
        options={"corrupted": CORRUPTED, "target": [5, 9]},
    )
    queue.submit("analysis", req.job_id(), req.normalised())
    worker.work(
        burst=True, max_jobs=1
    )  # the analysis job: its own sections, then the parts enqueued
    plan = parts.plan(conn, req.job_id())
    assert plan is not None, queue.lookup(req.job_id(), with_partial=False)
    assert plan is not None and plan["unit"] == "runs" and plan["n_parts"] > 4
    state = queue.lookup(req.job_id())
    assert state.status == "queued" and "parts" in state.message
    assert (
        "predictions" in state.partial and "ablation" not in state.partial
    )  # its own sections, shown
    worker.work(burst=True)
    state = queue.lookup(req.job_id())
    assert state.status == "finished", state.error
    assert (
        store.has_result(req.job_id())
        and not conn.keys("hs:parts*")
        and not conn.keys("hs:split-base:*")
    )
    got = json.loads(state.result_raw)
    one = json.loads(
        dumps(compute_analysis(req, progress=lambda f, m: None, on_partial=lambda f: None))
    )
    assert got["ablation"]["timings"]["parts"] > 1 and got["patching"]["timings"]["parts"] > 1
    for kind, keys in (
        ("ablation", ("map", "base", "target", "position", "each", "mode")),
        (
            "patching",
            (
                "residual",
                "heads",
                "metric_clean",
                "metric_corrupted",
                "corrupted_text",
                "corrupted_token_texts",
                "corrupted_tokens",
                "a",
                "b",
            ),
        ),
    ):
        for key in keys:
            assert got[kind][key] == one[kind][key], (kind, key)  # the same bits as one piece
    assert got["predictions"] == {k: v for k, v in one["predictions"].items()} | {
        "timings": got["predictions"]["timings"]
    }


def test_cancelling_an_analysis_whose_patching_runs_in_parts_keeps_nothing(split_service):

    conn, store, queue, worker = split_service
    req = AnalysisRequest(
        model="tiny-gpt2",
        text=CLEAN,
        analyses=["predictions", "patching"],
        options={"corrupted": CORRUPTED, "target": [5, 9]},
    )
    queue.submit("analysis", req.job_id(), req.normalised())
    worker.work(burst=True, max_jobs=3)  # the analysis job, then two of its parts
    assert (
        conn.exists(protocol.split_base_key(req.job_id()))
        and conn.hlen(protocol.parts_key(req.job_id())) == 2
    )
    assert queue.cancel(req.job_id()).status == "running"
    worker.work(burst=True)
    state = queue.lookup(req.job_id())
    assert state.status == "failed" and state.error == "the analysis was cancelled"
    assert not conn.keys("hs:parts*") and not conn.exists(protocol.split_base_key(req.job_id()))
    assert not conn.exists(protocol.partial_key(req.job_id()))  # nor the sections the job had done
    assert not store.has_result(req.job_id())
