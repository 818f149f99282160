"""Fair use of one shared service: write rate limits, upload ownership, storage quota and expiry.

In-process app (TestClient) on a real Redis; clients are told apart by ``X-Headscope-Client``
(the dashboard sends a per-browser cookie id) or by address.
"""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient
from fuzz_corpus import GOOD_NPY, PE, npy
from redis import Redis
from sqlalchemy import update

from backend import quota
from backend.app import create_app
from backend.config import Settings
from backend.store import Store
from workers.store.schema import checkpoints, results

ALICE = {"X-Headscope-Client": "alice-0123456789abcdef"}
BOB = {"X-Headscope-Client": "bob-0123456789abcdefgh"}


@pytest.fixture
def make_client(redis_server, tmp_path, catalogue):
    conn = Redis.from_url(redis_server)
    conn.flushdb()

    def make(**settings) -> TestClient:
        s = Settings(data_dir=tmp_path / "data", redis_url=redis_server, **settings)
        return TestClient(create_app(s, redis=conn, background=False, frontend=False))

    return make


def upload(client, data: bytes, headers: dict, name: str = "pe.npy"):
    return client.post("/api/checkpoints", files={"file": (name, data)}, headers=headers)


def test_writes_over_the_rate_limit_get_429_with_retry_after(make_client):
    client = make_client(rate_limit_writes=3, rate_limit_window_s=60)
    body = {"model": "tiny-bert", "text": "rate limited"}
    codes = [client.post("/api/analyses", json=body, headers=ALICE).status_code for _ in range(3)]
    assert codes == [202, 202, 202]
    over = client.post("/api/analyses", json=body, headers=ALICE)
    assert over.status_code == 429 and "3 per 60 s" in over.json()["detail"]
    assert 1 <= int(over.headers["retry-after"]) <= 61
    assert client.get("/api/models").status_code == 200  # reads are not limited
    spoofed = client.post("/api/analyses", json=body, headers={"X-Forwarded-For": "203.0.113.9"})
    assert spoofed.status_code == 429  # X-Forwarded-For counts only from a trusted proxy
    proxied = make_client(rate_limit_writes=3, trusted_proxies=["testclient"])
    other = proxied.post("/api/analyses", json=body, headers={"X-Forwarded-For": "203.0.113.9"})
    assert other.status_code == 202  # behind a trusted proxy each address has its own allowance


def test_uploads_are_listed_to_their_owner_only_but_open_by_id(make_client):
    client = make_client()
    mine = upload(client, GOOD_NPY, ALICE)
    assert mine.status_code == 201, mine.text
    ck = mine.json()["id"]
    assert [
        c["id"] for c in client.get("/api/checkpoints", headers=ALICE).json()["checkpoints"]
    ] == [ck]
    assert client.get("/api/checkpoints", headers=BOB).json()["checkpoints"] == []
    assert client.get(f"/api/checkpoints/{ck}", headers=BOB).json()["id"] == ck  # the id is the key
    again = upload(client, GOOD_NPY, BOB)  # the same bytes from Bob: now listed to him as well
    assert again.json()["id"] == ck
    assert [c["id"] for c in client.get("/api/checkpoints", headers=BOB).json()["checkpoints"]] == [
        ck
    ]


def test_upload_quota_per_client_is_413(make_client):
    client = make_client(upload_quota_bytes=len(GOOD_NPY) + 100)
    assert upload(client, GOOD_NPY, ALICE).status_code == 201
    second = upload(client, npy(PE * 2), ALICE, "second.npy")
    assert second.status_code == 413 and "upload quota" in second.json()["detail"]
    assert (
        upload(client, npy(PE * 2), BOB, "second.npy").status_code == 201
    )  # Bob has his own quota


def test_storage_quota_and_expiry_delete_the_unshared_oldest_first(tmp_path):
    settings = Settings(
        data_dir=tmp_path, result_ttl_s=3600, upload_ttl_s=3600, storage_quota_bytes=0
    )
    store = Store(settings)
    old_shared, old_alone, fresh = "a" * 32, "b" * 32, "c" * 32
    ck_shared, ck_alone = "ck-" + "1" * 32, "ck-" + "2" * 32
    for ck in (ck_shared, ck_alone):
        blob = tmp_path / f"{ck}.npy"
        blob.write_bytes(GOOD_NPY)
        store.stage_checkpoint(ck, blob, ext=".npy")
        store.commit_checkpoint(ck, {"id": ck, "owners": ["x"], "candidates": []})
    pe_request = {"checkpoints": [{"id": ck_shared, "tensor": None}]}
    for job_id, req in (
        (old_shared, pe_request),
        (old_alone, {"text": "x"}),
        (fresh, {"text": "y"}),
    ):
        store.write_result(job_id, kind="pe", request=req, result_raw='{"x": ' + "1" * 5000 + "}")
    store.create_share(kind="pe", target=old_shared, view={})
    past = time.time() - 7200  # written and last used two hours ago (the TTLs are one hour)
    with store.engine.begin() as conn:
        conn.execute(
            update(results)
            .where(results.c.id.in_([old_shared, old_alone]))
            .values(created_at=past, used_at=past, expires_at=past + settings.result_ttl_s)
        )
        conn.execute(update(checkpoints).values(created_at=past, used_at=past))
    removed = quota.sweep(store, settings)
    assert set(removed) == {
        old_alone,
        ck_alone,
    }  # expired; the share keeps its result and checkpoint
    assert store.has_result(old_shared) and store.checkpoint(ck_shared) and store.has_result(fresh)
    tight = settings.model_copy(update={"storage_quota_bytes": 1})
    assert quota.enforce(store, tight) == [fresh]  # over quota: the unshared go, the shared stay
    assert store.has_result(old_shared) and store.checkpoint(ck_shared)
