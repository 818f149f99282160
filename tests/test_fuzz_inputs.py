"""Every bad upload and bad request of the corpus (tests/fuzz_corpus.py) gets its exact status, a
``detail`` in our words, and leaves nothing behind: no file under the data dir, no Redis key.

In-process app (FastAPI's TestClient) on a real Redis; the upload checks run in the API process.
"""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from fuzz_corpus import BAD_REQUESTS, BAD_UPLOADS, F32, st
from redis import Redis

from backend.app import create_app
from backend.config import Settings

LIBRARY_WORDS = re.compile(
    r"Traceback|Exception|[A-Z][a-z]+Error\b|struct\.error|unpack|pydantic|errno|File \""
)


@pytest.fixture(scope="module")
def app_env(redis_server, tmp_path_factory, catalogue):
    conn = Redis.from_url(redis_server)
    conn.flushdb()
    data = tmp_path_factory.mktemp("fuzz") / "data"
    settings = Settings(
        data_dir=data, redis_url=redis_server, rate_limit_writes=0, max_upload_bytes=2**20
    )
    client = TestClient(create_app(settings, redis=conn, background=False, frontend=False))
    return client, conn, data


def stored(conn: Redis, data) -> tuple[list, list, list]:
    """Every Redis key (rate counters aside), every file under the data dir but the database's own,
    and every row of the store's results and checkpoints (staged ones too)."""
    from sqlalchemy import select

    from backend.store import Store
    from workers.store.schema import checkpoints, results

    keys = sorted(k for k in conn.keys("*") if not k.startswith(b"hs:rate:"))
    files = sorted(
        str(p.relative_to(data))
        for p in data.rglob("*")
        if p.is_file() and "headscope.db" not in p.name
    )
    store = Store(Settings(data_dir=data))
    try:
        with store.engine.connect() as db:
            rows = [
                *db.execute(select(results.c.id)).scalars(),
                *db.execute(select(checkpoints.c.id)).scalars(),
            ]
    finally:
        store.close()
    return keys, files, sorted(rows)


def check_refusal(resp, status: int, words: list[str]) -> None:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert isinstance(body["detail"], str) and body["detail"]
    assert not LIBRARY_WORDS.search(body["detail"]), body["detail"]
    for w in words:
        assert w in body["detail"], (w, body["detail"])
    if status == 422:
        assert isinstance(body["errors"], list)
        assert all(set(e) == {"field", "problem"} for e in body["errors"])


@pytest.mark.parametrize(
    "case, name, data, status, words", BAD_UPLOADS, ids=[c[0] for c in BAD_UPLOADS]
)
def test_bad_upload_is_refused_and_leaves_nothing(app_env, case, name, data, status, words):
    client, conn, root = app_env
    before = stored(conn, root)
    resp = client.post("/api/checkpoints", files={"file": (name, data, "application/octet-stream")})
    check_refusal(resp, status, words)
    assert stored(conn, root) == before


def test_over_large_upload_is_413_and_leaves_nothing(app_env):
    client, conn, root = app_env
    before = stored(conn, root)
    resp = client.post("/api/checkpoints", files={"file": ("big.npy", b"\0" * (2**20 + 200_000))})
    check_refusal(resp, 413, ["limit"])
    assert stored(conn, root) == before


@pytest.mark.parametrize(
    "case, path, body, status, words", BAD_REQUESTS, ids=[c[0] for c in BAD_REQUESTS]
)
def test_bad_request_is_refused_before_queueing(app_env, case, path, body, status, words):
    client, conn, root = app_env
    before = stored(conn, root)
    check_refusal(client.post(path, json=body), status, words)
    assert stored(conn, root) == before


def test_malformed_json_and_wrong_methods(app_env):
    client, conn, root = app_env
    before = stored(conn, root)
    bad = client.post(
        "/api/analyses", content=b'{"text": ', headers={"content-type": "application/json"}
    )
    check_refusal(bad, 422, ["not valid JSON"])
    for method, path, allow in [
        ("POST", "/api/models", "GET"),
        ("PUT", "/api/analyses/" + "0" * 32, "DELETE, GET"),
        ("PUT", "/api/checkpoints", "GET, POST"),
        ("GET", "/api/shares", "POST"),
    ]:
        resp = client.request(method, path)
        check_refusal(resp, 405, [method, "allowed"])
        assert resp.headers["allow"] == allow
    check_refusal(client.get("/api/no-such-thing"), 404, ["no API endpoint"])
    assert stored(conn, root) == before


def test_tensor_names_come_back_sanitised_and_capped(app_env):
    client, _conn, _root = app_env
    name = "pos\x00\x1b[31m\u202e" + "x" * 500
    data = st({name: {"dtype": "F32", "shape": [16, 8], "data_offsets": [0, len(F32)]}}, F32)
    resp = client.post("/api/checkpoints", files={"file": ("names\x07.safetensors", data)})
    assert resp.status_code == 201, resp.text
    (cand,) = resp.json()["candidates"]
    assert len(cand["name"]) <= 200 and cand["name"].startswith("pos?")
    assert not any(ord(ch) < 32 or ch == "\u202e" for ch in cand["name"])
    filename = resp.json()["filename"]
    assert (
        filename.startswith("names_")
        and filename.endswith(".safetensors")
        and filename.isprintable()
    )
