"""Injected t-SNE engine faults through ``headscope serve`` (issue 20): real uvicorn, Redis and a
worker whose engines are the torch round on its CPU device, then the CPU engine
(``HEADSCOPE_TSNE_ENGINES=torch``), each time with one fault (``HEADSCOPE_TSNE_FAULT``):

- ``compile@torch``: the start's self-check drops the torch round; health says why; jobs run on cpu.
- ``launch@torch``: the check passes; a job's torch round raises and the job falls back to cpu.
- ``fatal@torch``: a job's torch round leaves the device unusable: the job is retried, the worker
  ends itself (status 3) and a fresh one finishes the job without that engine; health lists the loss.

Every time the result equals the CPU engine's result for the same request (no fault, no device
path), bit for bit, and the engine that ran is in it.
"""

from __future__ import annotations

import time

import pytest
from service_helpers import HANG_S, ServeProcess, short_text, wait_done

pytestmark = pytest.mark.slow

REQUEST = {"model": "tiny-bert", "text": short_text(20), "analyses": ["max-attention", "head-tsne"],
           "options": {"n_iter": 100, "early_exaggeration_iter": 50}}  # fmt: skip


def run(client, body: dict) -> dict:
    resp = client.post("/api/analyses", json=body)
    assert resp.status_code == 202, resp.text
    return wait_done(client, f"/api/analyses/{resp.json()['id']}")


def ready_health(client, n: int = 1) -> dict:
    deadline = time.monotonic() + HANG_S  # a guard against a hang, not a deadline
    while True:
        health = client.get("/api/health").json()
        if health["ready"] >= n or time.monotonic() > deadline:
            return health
        time.sleep(0.2)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_model_dirs) -> dict:
    """The request on a plain CPU worker (the CPU engine, no device path)."""
    serve = ServeProcess.for_tests(tmp_path_factory.mktemp("plain"), tiny_model_dirs, workers=1)
    serve.start()
    try:
        with serve.client() as client:
            done = run(client, REQUEST)
    finally:
        assert serve.stop() == set()
    assert done["status"] == "finished", done
    return done["result"]


@pytest.mark.parametrize("fault", ["compile@torch", "launch@torch", "fatal@torch"])
def test_injected_fault(fault, reference, tmp_path, tiny_model_dirs):
    serve = ServeProcess.for_tests(tmp_path, tiny_model_dirs, workers=1, HEADSCOPE_DEVICE="cpu",
                                   HEADSCOPE_TSNE_ENGINES="torch", HEADSCOPE_TSNE_FAULT=fault)  # fmt: skip
    serve.start()
    try:
        with serve.client() as client:
            health = ready_health(client)
            (first,) = health["devices"].values()
            done = run(client, REQUEST)
            after = ready_health(client)
        pids = serve.info()["worker_pids"]
        log = serve.log.read_text()
    finally:
        assert serve.stop() == set()
    print(
        fault, "health at start:", health, "\nafter the job:", after, sep="\n"
    )  # the closing note shows them
    assert done["status"] == "finished", (done, log[-3000:])
    tsne, ref = done["result"]["head-tsne"], reference["head-tsne"]
    assert tsne["backend"] == "cpu" and ref["backend"] == "cpu"
    assert (
        tsne["embedding"] == ref["embedding"] and tsne["kl"] == ref["kl"]
    )  # the CPU engine's maps, bit for bit
    assert {**done["result"]["max-attention"], "timings": 0} == {
        **reference["max-attention"],
        "timings": 0,
    }
    if fault == "compile@torch":
        assert first["tsne_engine"] == "cpu: torch failed: no C compiler (injected)"
        assert first["tsne_failed"] == {"torch": "no C compiler (injected)"} and first[
            "tsne_engines"
        ] == ["cpu"]
        assert (
            tsne["fallback"] == []
            and "t-SNE engine on cpu: cpu: torch failed: no C compiler" in log
        )
        assert after["device_lost"] == []
    elif fault == "launch@torch":
        assert first["tsne_engine"] == "torch" and first["tsne_engines"] == ["torch", "cpu"]
        assert tsne["fallback"] == [
            "torch failed: torch launch failed: out of resources (injected by HEADSCOPE_TSNE_FAULT)"
        ]
        assert (
            after["device_lost"] == [] and after["worker_names"] == health["worker_names"]
        )  # the same worker
    else:
        assert first["tsne_engine"] == "torch"
        assert tsne["fallback"] == [
            "torch failed: CUDA error: an illegal memory access was encountered (injected by "
            "HEADSCOPE_TSNE_FAULT) (the device was lost; retried by a fresh worker)"
        ]
        (loss,) = after["device_lost"]
        assert (
            loss["worker"] == health["worker_names"][0] and "illegal memory access" in loss["why"]
        )
        assert (
            after["worker_names"] != health["worker_names"] and after["ready"] == 1
        )  # a fresh worker
        assert "exited with 3: restarting it" in log and len(pids) == 1
