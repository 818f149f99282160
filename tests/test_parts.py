"""workers/queue/parts.py on a real Redis with real RQ workers: split, fan-out/join, retry, failure, cancel."""

from __future__ import annotations

import pytest
from redis import Redis
from rq import Queue, SimpleWorker
from rq.job import Job, JobStatus

from workers.queue import keys as protocol
from workers.queue import parts


@pytest.fixture
def conn(redis_server):
    c = Redis.from_url(redis_server)
    c.flushdb()
    yield c
    c.flushdb()


def _work(conn: Redis) -> None:
    q = Queue(protocol.QUEUE, connection=conn, serializer=protocol.SERIALIZER)
    SimpleWorker([q], connection=conn, serializer=protocol.SERIALIZER).work(burst=True)


def _payloads(n: int, size: int, **extra) -> list[dict]:
    return [
        {"start": a, "stop": b, **extra} for a, b in parts.split(n, part_items=size, min_items=1)
    ]


def test_split_covers_every_item_once_and_small_jobs_stay_one():
    ranges = parts.split(1003, part_items=100, min_items=500)
    assert [i for a, b in ranges for i in range(a, b)] == list(range(1003))
    assert len(ranges) == 11
    assert parts.split(400, part_items=100, min_items=500) == [(0, 400)]
    wide = parts.split(
        1_000_000, part_items=500, min_items=2000, max_parts=200
    )  # larger parts, never over 200
    assert len(wide) == 200 and wide[0] == (0, 5000) and wide[-1][1] == 1_000_000


def test_fan_out_merges_in_order_equal_to_one_part_and_leaves_no_slots(conn):
    one = parts.fan_out(
        conn,
        job_id="one",
        part="parts_toys.sum_part",
        merge="parts_toys.sum_merge",
        payloads=_payloads(10_000, 10_000),
        context={"label": "x"},
    )
    many = parts.fan_out(
        conn,
        job_id="many",
        part="parts_toys.sum_part",
        merge="parts_toys.sum_merge",
        payloads=_payloads(10_000, 700),
    )
    _work(conn)
    r1, rn = one.latest_result().return_value, many.latest_result().return_value
    assert r1["n"] == rn["n"] == 10_000 and r1["label"] == "x"
    assert abs(r1["sum"] - rn["sum"]) <= 1e-12
    again = parts.fan_out(
        conn,
        job_id="again",
        part="parts_toys.sum_part",
        merge="parts_toys.sum_merge",
        payloads=_payloads(10_000, 700),
    )
    _work(conn)
    assert again.latest_result().return_value["sum"] == rn["sum"]  # bit-identical across runs
    assert not conn.keys("hs:parts:*")


def test_retried_part_overwrites_its_slot_and_counts_nothing_twice(conn):
    job = parts.fan_out(
        conn,
        job_id="flaky",
        part="parts_toys.sum_part",
        merge="parts_toys.sum_merge",
        payloads=_payloads(1000, 100, flaky=300),
    )
    _work(conn)
    assert job.get_status(refresh=True) == JobStatus.FINISHED
    assert job.latest_result().return_value["n"] == 1000
    assert conn.get(f"hs-test:flaky:{parts.part_id('flaky', 3)}") == b"2"


def test_a_merge_retried_after_a_failure_still_has_every_slot(conn):
    job = parts.fan_out(
        conn,
        job_id="remerge",
        part="parts_toys.sum_part",
        merge="parts_toys.flaky_merge",
        payloads=_payloads(1000, 100),
    )
    _work(conn)
    assert conn.get("hs-test:merge-attempts:remerge-merge") == b"2"
    assert (
        job.get_status(refresh=True) == JobStatus.FINISHED
        and job.latest_result().return_value["n"] == 1000
    )
    assert not conn.keys("hs:parts*")


def test_part_failing_twice_fails_the_job_with_its_reason(conn):
    job = parts.fan_out(
        conn,
        job_id="bad",
        part="parts_toys.sum_part",
        merge="parts_toys.sum_merge",
        payloads=_payloads(1000, 100, fail=500),
    )
    _work(conn)
    assert job.get_meta()["part_error"] == "part 5 failed: text 500 is broken"  # the API's error
    assert not conn.keys("hs:parts:*") and not conn.keys("hs:parts-tries:*")


def test_part_failing_on_the_input_fails_the_job_at_once_as_the_users_error(conn):
    job = parts.fan_out(
        conn,
        job_id="input",
        part="parts_toys.user_error_part",
        merge="parts_toys.sum_merge",
        payloads=_payloads(1000, 100, bad=200),
    )
    _work(conn)
    assert job.id == parts.merge_id("input") and job.get_status(refresh=True) == JobStatus.FINISHED
    meta = job.get_meta()
    assert (
        meta["error"] == "part 2 failed: text 200 is not UTF-8"
        and meta["error_code"] == "invalid_input"
    )
    assert (
        conn.get("hs-test:calls:input:2") == b"1"
    )  # not retried: the same input fails the same way
    assert not conn.keys("hs:parts*")


def test_status_line_counts_parts_and_items_and_forget_drops_an_old_run(conn):
    parts.fan_out(
        conn,
        job_id="plan",
        part="parts_toys.sum_part",
        merge="parts_toys.sum_merge",
        payloads=_payloads(1000, 100),
        sizes=[100] * 10,
        unit="texts",
    )
    assert parts.plan(conn, "plan")["n_items"] == 1000
    q = Queue(protocol.QUEUE, connection=conn, serializer=protocol.SERIALIZER)
    SimpleWorker([q], connection=conn, serializer=protocol.SERIALIZER).work(burst=True, max_jobs=4)
    conn.hset(protocol.done_key("plan"), "4", 30)  # part 4 running, 30 texts in
    fraction, line = parts.status(conn, "plan")
    assert line.startswith("parts 4/10 done, 1 running; 430/1,000 texts, ") and line.endswith(
        " texts/s"
    )
    assert abs(fraction - 0.99 * 0.43) < 1e-9
    parts.forget(conn, "plan")
    assert parts.plan(conn, "plan") is None and not conn.keys("hs:parts*")
    assert (
        protocol.fetch_job(conn, parts.part_id("plan", 7)) is None
        and protocol.fetch_job(conn, "plan-merge") is None
    )


def test_a_retried_coordinator_does_not_fan_out_twice(conn):
    first = parts.fan_out(
        conn,
        job_id="twice",
        part="parts_toys.sum_part",
        merge="parts_toys.sum_merge",
        payloads=_payloads(1000, 100),
    )
    again = parts.fan_out(
        conn,
        job_id="twice",
        part="parts_toys.sum_part",
        merge="parts_toys.sum_merge",
        payloads=_payloads(1000, 100),
    )
    assert again.id == first.id and Queue(protocol.QUEUE, connection=conn).count == 10


def test_cancel_stops_every_part_and_leaves_nothing(conn):
    job = parts.fan_out(
        conn,
        job_id="stop",
        part="parts_toys.sum_part",
        merge="parts_toys.sum_merge",
        payloads=_payloads(1000, 100),
    )
    q = Queue(protocol.QUEUE, connection=conn, serializer=protocol.SERIALIZER)
    SimpleWorker([q], connection=conn, serializer=protocol.SERIALIZER).work(burst=True, max_jobs=3)
    assert conn.hlen(protocol.parts_key("stop")) == 3 and parts.progress(conn, "stop", 10) == 0.3
    parts.cancel(conn, "stop", 10)
    conn.hset(protocol.done_key("stop"), "5", 1)  # a part still running reports progress: refused
    assert (
        not parts.PartContext(conn, "stop", 5, 1).items(2)
        and conn.hget(protocol.done_key("stop"), "5") == b"1"
    )
    _work(conn)
    assert not conn.keys("hs:parts:*")
    states = {
        Job.fetch(
            parts.part_id("stop", i), connection=conn, serializer=protocol.SERIALIZER
        ).get_status()
        for i in range(3, 10)
    }
    assert states <= {JobStatus.CANCELED}
    assert job.get_status(refresh=True) in (
        JobStatus.FINISHED,
        JobStatus.CANCELED,
        JobStatus.DEFERRED,
    )
