"""What a job's publishing costs the worker (issue 34): each section is encoded to JSON once.

``workers.jobs.Reporter`` writes every finished section to Redis as it comes (``partial``) and then
the whole result (``finish``); the result's sections are the objects already published, so their
JSON is spliced in, not encoded again (12 MB at 452 tokens on SmolLM2). Real Redis, a real RQ job.
"""

from __future__ import annotations

import math
import uuid

import pytest
from redis import Redis
from rq.job import Job, JobStatus

from workers import jobs, protocol
from workers.layer_parts import part_key


@pytest.fixture
def reporter(redis_server):
    conn = Redis.from_url(redis_server)
    job = Job.create("held_jobs.noop", connection=conn, id=uuid.uuid4().hex, serializer=protocol.SERIALIZER)
    job.save()
    job.set_status(JobStatus.STARTED)
    rep = jobs.Reporter(job, ttl_s=60)
    rep.start()
    yield rep
    conn.delete(protocol.partial_key(job.id), protocol.result_key(job.id), protocol.computed_key(job.id))
    job.delete()


def section(seed: int) -> dict:
    return {"values": [[(seed * 7 + i * j) / 3 for i in range(300)] for j in range(40)], "seed": seed,
            "nan": [math.nan, 1.5, math.inf]}  # fmt: skip


def test_finish_stores_what_encoding_the_result_gives_encoding_each_section_once(reporter, monkeypatch):
    encoded: list[int] = []
    real = protocol.dumps

    def counting(obj):
        text = real(obj)
        encoded.append(len(text))
        return text

    monkeypatch.setattr(protocol, "dumps", counting)
    a, b, late = section(1), section(2), section(3)
    result = {"model": "m", "tokens": ["a", "b"], "timings": {"x": 1.0}}
    reporter.partial({"model": "m", "tokens": ["a", "b"], "max-attention": a})
    result["max-attention"] = a
    reporter.partial({part_key("head-tsne-all", 0): section(4)})  # a layer part: never in the result
    reporter.partial({"head-tsne": b})
    result["head-tsne"] = b
    result["tokens"] = ["a", "b", "c"]  # another object than the one published: encoded again
    result["late"] = late  # never published
    published = sum(encoded)
    encoded.clear()
    reporter.finish(result)
    stored = protocol.text(reporter.conn.get(protocol.result_key(reporter.id)))
    assert stored == real(result)  # byte for byte what encoding the whole result gives (NaN -> null)
    assert '"tokens":["a","b","c"]' in stored and '"nan":[null,1.5,null]' in stored
    # only what was not published as it is was encoded again: far less than the whole result
    assert sum(encoded) < len(stored) - len(real(a)) - len(real(b)) + 200, (sum(encoded), len(stored), published)


def test_json_of_results_keeps_its_meaning():
    """``protocol.dumps`` (orjson, the standard library for what orjson refuses) writes what the
    standard library wrote, as JSON values: NaN and infinities as null, keys as text, any integer."""
    import json

    value = {"x": [1.5, math.nan, -math.inf, 1e-05, 3], 2: "naïve ⏎ <s>", "nested": {"a": [[0.1, 2e300]]},
             "flag": True, "none": None}  # fmt: skip
    want = {"x": [1.5, None, None, 1e-05, 3], "2": "naïve ⏎ <s>", "nested": {"a": [[0.1, 2e300]]}, "flag": True,
            "none": None}  # fmt: skip
    assert json.loads(protocol.dumps(value)) == want
    assert json.loads(protocol.dumps({"big": 2**70})) == {"big": 2**70}  # beyond orjson's 64 bits
    with pytest.raises(TypeError):
        protocol.dumps({"s": {1, 2}})  # not JSON, either way


def test_the_page_server_answers_with_the_standard_json_engine():
    """Dash's answers go through plotly's JSON engine; with orjson installed plotly would pick it, slower
    on the gallery's lists of floats (frontend/app.py)."""
    import plotly.io as pio

    from frontend.app import create_dash_app

    pio.json.config.default_engine = "auto"
    create_dash_app("http://127.0.0.1:9")
    assert pio.json.config.default_engine == "json"
