"""Per-client rate limit on writes: a fixed window counted in Redis (shared by every API process).

``HEADSCOPE_RATE_LIMIT_WRITES`` writes per ``HEADSCOPE_RATE_LIMIT_WINDOW_S`` seconds per client
address; the next one gets 429 with ``Retry-After`` (seconds until the window ends). Refused
requests count too, so a flood of bad uploads is slowed like any other. The counter is the only
thing a refused request leaves in Redis, and it expires with its window.
"""

from __future__ import annotations

import time

from fastapi import HTTPException, Request

from backend.clients import client_of
from workers.queue.keys import rate_key


def check_write_rate(request: Request) -> None:
    """Count one write of this client; 429 once it is over the limit of the current window."""
    settings = request.app.state.settings
    limit, span = settings.rate_limit_writes, settings.rate_limit_window_s
    if limit <= 0:
        return
    now = time.time()
    window = int(now // span)
    key = rate_key(client_of(request).address, window)
    conn = request.app.state.redis
    with conn.pipeline() as pipe:
        pipe.incr(key)
        pipe.expire(key, span + 1)
        count = int(pipe.execute()[0])
    if count > limit:
        retry = max(1, int((window + 1) * span - now + 0.999))
        raise HTTPException(
            429,
            f"too many writes: the limit is {limit} per {span} s for each client; retry in {retry} s",
            headers={"Retry-After": str(retry)},
        )
