"""``headscope serve`` stops every child on SIGTERM, and share links survive a restart of everything.

Uses the session's ``service`` (it is restarted on the same data dir and port, so tests after this
one still have a server).
"""

from __future__ import annotations

import shutil

import pytest
from redis import Redis
from service_helpers import alive, descendants, short_text, wait_done

from workers.queue import keys as protocol

pytestmark = pytest.mark.slow


def test_sigterm_stops_every_child_and_shares_survive_a_full_restart(service):
    with service.client() as client:
        resp = client.post(
            "/api/analyses",
            json={
                "model": "tiny-bert",
                "text": short_text(20),
                "analyses": ["max-attention", "head-tsne"],
                "options": {"layer": 1, "head": 0, "n_iter": 100},
            },
        )
        job_id = resp.json()["id"]
        done = wait_done(client, f"/api/analyses/{job_id}")
        assert done["status"] == "finished", done["error"]
        view = {"page": "tsne", "layer": 1, "head": 0, "rescaled": False}
        share = client.post("/api/shares", json={"analysis_id": job_id, "view": view}).json()

    info = service.info()
    children = descendants(service.proc.pid)
    assert {info["redis_pid"], *info["worker_pids"]} <= children
    left = service.stop()
    assert left == set(), f"still running after SIGTERM: {left}"
    assert not any(alive(p) for p in children | {info["redis_pid"], *info["worker_pids"]})

    shutil.rmtree(service.data_dir / "redis")  # Redis loses everything; the data dir keeps shares
    service.start()
    with service.client() as client:
        opened = client.get(f"/api/shares/{share['id']}")
        assert opened.status_code == 200
        body = opened.json()
        assert (
            body["view"] == view
            and body["result"] == done["result"]
            and body["request"] == done["request"]
        )
        again = client.get(f"/api/analyses/{job_id}").json()
        assert again["status"] == "finished" and again["result"] == done["result"]
        resubmit = client.post("/api/analyses", json=done["request"]).json()
        assert resubmit == {"id": job_id, "status": "finished"}
    conn = Redis.from_url(service.info()["redis_url"])
    assert conn.get(protocol.computed_key(job_id)) is None  # nothing was recomputed
    assert service.info()["redis_pid"] != info["redis_pid"]
