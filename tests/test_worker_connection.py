"""workers.queue.worker.rq_worker: the RQ worker's Redis client lets RQ's blocking wait for a job last as long
as RQ asks (405 s by default), not redis-py 8's default 5 s socket timeout, after which a worker left
idle quit ("Redis connection timeout, quitting..."): the flake of the kill test in test_scale_parts,
where the surviving worker waited ~5 s for the dead worker's part. Real Redis."""

from __future__ import annotations

import time

from redis import Redis

from workers.queue import keys as protocol
from workers.queue.worker import rq_worker


def test_the_worker_can_wait_for_a_job_longer_than_a_default_redis_socket_timeout(redis_server):
    busy = Redis.from_url(redis_server)
    busy.ping()  # the heartbeat's client, used before the worker starts (default socket timeout)
    worker = rq_worker(redis_server, protocol.QUEUES, "hs-test-connection")
    conn = worker.connection
    assert conn is not busy
    conn.ping()
    pool = conn.connection_pool
    held = [pool.get_connection() for _ in range(3)]  # one reused, two made now
    try:
        for c in held:
            assert c.socket_timeout is None or c.socket_timeout >= worker.connection_timeout, (
                c.socket_timeout
            )
    finally:
        for c in held:
            pool.release(c)
    key = "hs-test:connection:nothing"
    conn.delete(key)
    start = time.monotonic()
    assert conn.blpop([key], timeout=6) is None  # 6 s > redis-py 8's 5 s default: no TimeoutError
    assert time.monotonic() - start >= 5.9
