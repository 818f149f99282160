"""The app in-process (FastAPI's TestClient) on a real Redis: token, CORS, the page at /, the store."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from backend.app import create_app
from backend.config import Settings
from backend.store import Store


@pytest.fixture
def make_client(redis_server, tmp_path, catalogue):
    conn = Redis.from_url(redis_server)

    def make(**settings) -> TestClient:
        s = Settings(data_dir=tmp_path / "data", redis_url=redis_server, **settings)
        return TestClient(
            create_app(s, redis=conn, background=False, frontend=settings.pop("frontend", False))
        )

    return make


def test_token_guards_writes_only(make_client):
    client = make_client(api_token="s3cret")
    body = {"model": "tiny-bert", "text": "tokens guard writes"}
    refused = client.post("/api/analyses", json=body)
    assert refused.status_code == 401 and "token" in refused.json()["detail"]
    wrong = client.post("/api/analyses", json=body, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    ok = client.post("/api/analyses", json=body, headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 202
    assert client.get(f"/api/analyses/{ok.json()['id']}").status_code == 200  # reads stay open
    assert client.post("/api/shares", json={"analysis_id": ok.json()["id"]}).status_code == 401
    assert client.post("/api/checkpoints", files={"file": ("a.npy", b"x")}).status_code == 401


def test_cors_is_off_unless_configured(make_client):
    headers = {"Origin": "https://elsewhere.example"}
    assert (
        "access-control-allow-origin"
        not in make_client().get("/api/models", headers=headers).headers
    )
    allowed = make_client(cors_origins=["https://elsewhere.example"]).get(
        "/api/models", headers=headers
    )
    assert allowed.headers["access-control-allow-origin"] == "https://elsewhere.example"


def test_dashboard_is_mounted_after_the_api(redis_server, tmp_path, catalogue):
    s = Settings(data_dir=tmp_path / "data", redis_url=redis_server)
    client = TestClient(
        create_app(s, redis=Redis.from_url(redis_server), background=False, frontend=True)
    )
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert client.get("/api/models").json()["default"] == "minilm"  # not swallowed by the mount
    assert client.get("/docs").status_code == 200


def test_upload_limit_refuses_by_content_length(make_client):
    client = make_client(max_upload_bytes=1000)
    resp = client.post("/api/checkpoints", files={"file": ("big.npy", b"\0" * 200_000)})
    assert resp.status_code == 413 and "1,000-byte limit" in resp.json()["detail"]


def queued_ids(conn: Redis) -> list[str]:
    """Job ids waiting on every queue (a max-attention request is a short job, for instance)."""
    from workers.queue import keys as protocol

    return [i for name in protocol.QUEUES for i in protocol.queue(conn, name).job_ids]


def test_concurrent_submits_enqueue_once_and_a_lost_job_is_enqueued_again(redis_server, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from backend.queue import JobQueue
    from workers.core.contracts import AnalysisRequest
    from workers.queue import keys as protocol

    conn = Redis.from_url(redis_server, db=3)
    conn.flushdb()
    settings = Settings(data_dir=tmp_path, redis_url=redis_server)
    queue = JobQueue(conn, Store(settings), settings)
    req = AnalysisRequest(model="tiny-bert", text="one job for many callers")
    with ThreadPoolExecutor(max_workers=20) as pool:
        states = list(
            pool.map(lambda _: queue.submit("analysis", req.job_id(), req.normalised()), range(20))
        )
    assert {s.status for s in states} == {"queued"}
    assert queued_ids(conn) == [req.job_id()]

    protocol.fetch_job(conn, req.job_id()).delete(remove_from_queue=True)  # e.g. Redis lost it
    lost = queue.lookup(req.job_id())
    assert lost.status == "failed" and "lost" in lost.error
    assert queue.submit("analysis", req.job_id(), req.normalised()).status == "queued"
    assert queued_ids(conn) == [req.job_id()]
    assert queue.lookup(req.job_id()).status == "queued"
