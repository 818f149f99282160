"""Information flow (issue 30) through the API (422s before queueing), RQ jobs (a burst worker in this
process on the real Redis: progress, cancel keeping nothing, submitting again) and the CLI, on the tiny
GPT-2 (a decoder) and tiny BERT (an encoder)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from backend.app import create_app
from backend.cli import main
from backend.config import Settings
from workers.core.contracts import AnalysisRequest
from workers.queue import keys as protocol

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TEXT = "The head of the model is in the text and the word is of the token"


@pytest.fixture
def app(redis_server, tmp_path, catalogue, monkeypatch):
    conn = Redis.from_url(redis_server)
    conn.flushdb()
    settings = Settings(data_dir=tmp_path / "data", redis_url=redis_server)
    application = create_app(settings, redis=conn, background=False, frontend=False)
    store = application.state.store
    import workers.queue.reporter

    monkeypatch.setattr(workers.queue.reporter, "store", lambda: store)
    return TestClient(application), store, conn


def run_jobs(conn: Redis) -> None:
    from rq import SimpleWorker

    queues = [protocol.queue(conn, name) for name in protocol.QUEUES]
    SimpleWorker(queues, connection=conn, serializer=protocol.SERIALIZER).work(burst=True)


def _post(client, model: str, options: dict, text: str = TEXT):
    return client.post("/api/analyses", json={"model": model, "text": text, "analyses": ["information-flow"],
                                              "options": options})  # fmt: skip


@pytest.mark.parametrize(
    ("model", "options", "text", "words"),
    [
        ("tiny-gpt2", {"threshold": 0.0}, TEXT, ["threshold"]),
        ("tiny-gpt2", {"threshold": 1.0}, TEXT, ["threshold"]),
        ("tiny-gpt2", {"threshold": -0.5}, TEXT, ["threshold"]),
        ("tiny-gpt2", {"threshold": "0.1"}, TEXT, ["threshold"]),
        ("tiny-gpt2", {"position": 31}, TEXT, ["position 31 is out of range", "0-30"]),
        ("tiny-bert", {"position": 99}, TEXT, ["position 99 is out of range"]),
        ("tiny-gpt2", {}, "word " * 200, ["601 tokens", "at most 64"]),
        ("no-such-model", {}, TEXT, ["no-such-model"]),
    ],
)
def test_bad_information_flow_gets_422_before_queueing(app, model, options, text, words):
    client, _, conn = app
    resp = _post(client, model, options, text)
    assert resp.status_code == 422, resp.text
    body = json.dumps(resp.json())
    for w in words:
        assert w in body, (w, body)
    assert (
        protocol.queue(conn, protocol.QUEUE).count == 0
        and protocol.queue(conn, protocol.SHORT_QUEUE).count == 0
    )


@pytest.mark.parametrize(("model", "position"), [("tiny-gpt2", None), ("tiny-bert", 2)])
def test_job_computes_the_graph_with_progress(app, model, position):
    client, store, conn = app
    options = {"threshold": 0.01} if position is None else {"threshold": 0.01, "position": position}
    job_id = _post(client, model, options).json()["id"]
    run_jobs(conn)
    state = client.get(f"/api/analyses/{job_id}").json()
    assert state["status"] == "finished", state
    result = state["result"]
    flow = result["information-flow"]
    n, L = result["n_tokens"], result["n_layers"]
    p = n - 1 if position is None else position
    assert flow["position"] == p and flow["threshold"] == 0.01
    assert f"X{L}_{p}" in {nd["id"] for nd in flow["nodes"]}
    assert all(e["importance"] >= 0.01 for e in flow["edges"]) and flow["edges"]
    assert len(result["token_texts"]) == n and store.has_result(job_id)
    # the default threshold is left out of the job id (as the causal views' options are)
    plain = AnalysisRequest.model_validate({"model": model, "text": TEXT, "analyses": ["information-flow"],
                                            "options": {"threshold": 0.04}})  # fmt: skip
    assert "threshold" not in plain.normalised()["options"]


def test_cancel_keeps_nothing_and_submitting_again_runs_it(app, monkeypatch):
    client, store, conn = app
    import workers.queue.reporter

    # cancelled while queued: never runs
    job_id = _post(client, "tiny-gpt2", {}).json()["id"]
    assert client.delete(f"/api/analyses/{job_id}").json()["cancelled"] is True
    run_jobs(conn)
    state = client.get(f"/api/analyses/{job_id}").json()
    assert (
        state["status"] == "failed"
        and "cancelled" in state["error"]
        and not store.has_result(job_id)
    )
    # cancelled while running: the API sets the key when the job reports its first layer
    seen: list[str] = []
    real = workers.queue.reporter.Reporter.progress

    def spy(self, fraction, message):
        seen.append(message)
        if "information flow: layer 1/" in message:
            client.delete(f"/api/analyses/{self.job.id}")
        real(self, fraction, message)

    monkeypatch.setattr(workers.queue.reporter.Reporter, "progress", spy)
    assert _post(client, "tiny-gpt2", {}).json()["status"] == "queued"
    run_jobs(conn)
    state = client.get(f"/api/analyses/{job_id}").json()
    assert state["status"] == "failed" and "cancelled" in state["error"], state
    assert not any("layer 2/" in m for m in seen)  # it stopped at its next step
    assert not conn.exists(protocol.partial_key(job_id)) and not store.has_result(job_id)
    # submitted again it runs to the end
    monkeypatch.setattr(workers.queue.reporter.Reporter, "progress", real)
    assert _post(client, "tiny-gpt2", {}).json()["status"] == "queued"
    run_jobs(conn)
    assert client.get(f"/api/analyses/{job_id}").json()["status"] == "finished"
    assert (
        client.delete(f"/api/analyses/{job_id}").json()["cancelled"] is False
    )  # a finished one stays
    assert client.delete("/api/analyses/" + "0" * 32).status_code == 404


def test_cli_information_flow(tmp_path, catalogue):
    out = tmp_path / "f.json"
    args = ["analyze", "--model", "tiny-bert", "--text", TEXT, "-q", "--out", str(out), "--analysis",
            "information-flow"]  # fmt: skip
    assert main([*args, "--threshold", "0.02", "--position", "1"]) == 0
    flow = json.loads(out.read_text())
    assert (
        flow["analysis"] == "information-flow"
        and flow["position"] == 1
        and flow["threshold"] == 0.02
    )
    assert {"nodes", "edges", "tokens"} <= set(flow)
    assert main([*args, "--threshold", "1.5"]) == 2


def test_memory_estimate_counts_the_kept_layers():
    from workers.engine.memory import GIB, ModelFacts, estimate_text_request

    facts = ModelFacts(
        n_layers=30,
        n_heads=9,
        hidden=576,
        intermediate=1536,
        n_params=135_000_000,
        head_dim=64,
        vocab=49152,
    )  # SmolLM2-135M's shapes

    def extra(n: int) -> int:  # the stage over the forward it runs
        parts = estimate_text_request(facts, n, ["information-flow"], {}).parts
        return parts["information-flow"] - parts["forward"]

    # every layer's attention weights and stream kept for the top-down pass ...
    assert extra(512) - extra(128) > 30 * 9 * (512**2 - 128**2) * 4
    # ... up to 1 GiB; beyond it one layer at a time (20 GB would be kept at 4,096 tokens otherwise)
    assert extra(512) < GIB and extra(4096) < 30 * 9 * 4096**2 * 4 / 10
