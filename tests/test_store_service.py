"""The store under the service: two ``headscope serve`` replicas on one Redis and one PostgreSQL
behave as one service; a database that goes down gives 503 with a reason and comes back."""

from __future__ import annotations

import io
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from fastapi.testclient import TestClient
from redis import Redis
from service_helpers import ROOT, ServeProcess, short_text, wait_done

from backend.app import create_app
from backend.config import Settings
from backend.store import Store

JOB = "f" * 32


def _redis_db(url: str, db: int) -> str:
    return url.rsplit("/", 1)[0] + f"/{db}"


@pytest.mark.slow
def test_two_replicas_share_one_store(tmp_path, tiny_model_dirs, redis_server, pg_url):
    redis_url = _redis_db(redis_server, 7)
    Redis.from_url(redis_url).flushdb()
    env = {"REDIS_URL": redis_url, "HEADSCOPE_DATABASE_URL": pg_url}
    # B computes; A has no worker of its own, so whatever A is asked is computed through B's worker
    b = ServeProcess.for_tests(tmp_path / "b", tiny_model_dirs, workers=1, **env)
    with pytest.raises(RuntimeError, match="headscope migrate"):
        b.start()  # PostgreSQL is never migrated implicitly
    migrated = subprocess.run(
        [sys.executable, "-m", "backend.cli", "migrate"],
        cwd=ROOT,
        env=b.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrated.returncode == 0, migrated.stderr
    a = ServeProcess.for_tests(tmp_path / "a", tiny_model_dirs, workers=0, **env)
    with ThreadPoolExecutor(max_workers=2) as pool:  # both start at once; a failure is raised here
        for started in [pool.submit(b.start), pool.submit(a.start)]:
            started.result()
    try:
        with a.client() as ca, b.client() as cb:
            body = {"model": "tiny-bert", "text": short_text(20), "analyses": ["max-attention"]}
            job_id = ca.post("/api/analyses", json=body).json()["id"]
            done = wait_done(cb, f"/api/analyses/{job_id}")  # submitted to A, read through B
            assert done["status"] == "finished", done
            again = cb.post("/api/analyses", json=body).json()
            assert again == {
                "id": job_id,
                "status": "finished",
            }  # identical request: not recomputed
            assert int(Redis.from_url(redis_url).get(f"hs:computed:{job_id}")) == 1
            assert a.store().fingerprint(job_id)["submissions"] == 1

            share = ca.post(
                "/api/shares", json={"analysis_id": job_id, "view": {"layer": 1}}
            ).json()
            opened = cb.get(f"/api/shares/{share['id']}")  # made on A, opened on B
            assert opened.status_code == 200 and opened.json()["result"] == done["result"]

            buf = io.BytesIO()
            np.save(buf, np.random.default_rng(0).normal(size=(16, 8)))
            up = ca.post(
                "/api/checkpoints",
                files={"file": ("pe.npy", buf.getvalue(), "application/octet-stream")},
            )
            assert up.status_code == 201, (
                up.text
            )  # inspected by B's worker from the database's bytes
            ck = up.json()["id"]
            assert cb.get(f"/api/checkpoints/{ck}").json()["filename"] == "pe.npy"
            pe = cb.post(
                "/api/pe-analyses",
                json={"checkpoints": [{"id": ck}], "reference": {"kind": "1d-fixed"}},
            )
            assert pe.status_code == 202, pe.text
            result = wait_done(
                ca, f"/api/pe-analyses/{pe.json()['id']}"
            )  # analysed via B, read on A
            assert result["status"] == "finished", result
            assert result["result"]["checkpoints"][0]["id"] == ck
            assert (
                b.data_dir / "blob-cache" / f"{ck}.npy"
            ).exists()  # B's worker got them from the database
    finally:
        assert a.stop() == set() and b.stop() == set()


def test_database_down_gives_503_with_a_reason_and_recovers(
    postgres, pg_url, redis_server, tmp_path, catalogue
):
    settings = Settings(data_dir=tmp_path, redis_url=redis_server, database_url=pg_url)
    store = Store(settings, migrate=True)
    store.write_result(JOB, kind="analysis", request={"text": "x"}, result_raw='{"x": 1}')
    share = store.create_share(kind="analysis", target=JOB, view={})["id"]
    client = TestClient(
        create_app(
            settings,
            redis=Redis.from_url(_redis_db(redis_server, 6)),
            background=False,
            frontend=False,
            store=store,
        )
    )
    assert client.get(f"/api/shares/{share}").status_code == 200
    postgres.stop()
    try:
        for resp in (
            client.get(f"/api/shares/{share}"),
            client.get(f"/api/analyses/{JOB}"),
            client.post(
                "/api/analyses", json={"model": "tiny-bert", "text": "the database is down"}
            ),
            client.post("/api/shares", json={"analysis_id": JOB}),
            client.get("/api/checkpoints"),
        ):
            assert resp.status_code == 503, resp.text
            assert "database" in resp.json()["detail"] and "try again" in resp.json()["detail"]
        health = client.get("/api/health").json()
        assert health["database"] is False and health["status"] == "degraded"
    finally:
        postgres.start()
    assert client.get(f"/api/shares/{share}").json()["result"] == {"x": 1}  # back without a restart
    assert client.get("/api/health").json()["database"] is True
    store.close()
