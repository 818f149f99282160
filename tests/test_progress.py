"""A job's progress is one bar (docs/service.md): its fraction never goes down, ends at 1, and the
word "done" comes only when the job is done. Unit tests of the pieces, then a real job on the real
Redis (an in-process burst worker) of the text explorer's three steps on the tiny GPT-2."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from workers.core.progress import DONE, Monotone, scaled, stage
from workers.queue import keys as protocol

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TEXT = "The head of the model is in the text and the word is of the token"
FAST = {"n_iter": 100, "early_exaggeration_iter": 50}


def test_monotone_never_goes_down_and_says_done_only_at_the_end():
    bar, shown = Monotone(), []
    for fraction, message in [(0.2, "a"), (0.5, DONE), (0.1, "layer 2/30"), (1.0, DONE)]:
        shown.append(bar(fraction, message))
    shown.append(bar.finish())
    fractions = [f for f, _ in shown]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and max(fractions[:-1]) < 1.0
    assert [m for _, m in shown].count(DONE) == 1 and shown[-1][1] == DONE


def test_a_stage_names_itself_and_keeps_to_its_share():
    seen: list[tuple[float, str]] = []
    step = stage(lambda f, m: seen.append((f, m)), 0.25, 0.5, "step 2/3 (every head)")
    step(0.0, "layer 1/4")
    step(1.0, DONE)
    assert seen == [
        (0.25, "step 2/3 (every head): layer 1/4"),
        (0.5, "step 2/3 (every head) finished"),
    ]
    assert scaled(None, 0.0, 1.0)(0.5, "x") is None  # no reporter: ignored


def test_a_prepared_text_does_not_send_the_bar_back(catalogue, tmp_path):
    """A continuation first (``prepare``), then the streamed pass over 6 layers: the pass goes on
    from the continuation's share instead of starting again at 0."""
    from tiny_models import build_tiny_gpt2

    from workers.engine.pipeline import analyze
    from workers.models import ModelSpec, load_model

    catalogue.register(
        ModelSpec(
            "tiny-gpt2-6", "local", str(build_tiny_gpt2(tmp_path / "m", layers=6)), "6 layers"
        )
    )
    seen: list[float] = []
    analyze(
        load_model("tiny-gpt2-6"),
        TEXT,
        ["continue", "max-attention"],
        {"continue_tokens": 3},
        progress=lambda f, m: seen.append(f),
    )
    assert seen == sorted(seen) and seen[-1] == 1.0


@pytest.fixture
def app(redis_server, tmp_path, catalogue, monkeypatch):
    from backend.app import create_app
    from backend.config import Settings

    conn = Redis.from_url(redis_server)
    conn.flushdb()
    settings = Settings(data_dir=tmp_path / "data", redis_url=redis_server)
    application = create_app(settings, redis=conn, background=False, frontend=False)
    import workers.queue.reporter

    monkeypatch.setattr(workers.queue.reporter, "store", lambda: application.state.store)
    return TestClient(application), conn


def test_the_text_explorers_job_reports_one_bar(app, monkeypatch):
    """Max attention and one head, then every head, then the hidden states: three steps of one job,
    whose written progress (``job.meta``, what the API and the page show) never goes down."""
    from rq import SimpleWorker
    from rq.job import Job

    client, conn = app
    written: list[tuple[float, str]] = []
    real = Job.save_meta

    def spy(self, *args, **kwargs):
        if "progress" in self.meta:
            written.append((float(self.meta["progress"]), str(self.meta.get("message", ""))))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Job, "save_meta", spy)
    shown: list[str] = []  # every report's words (the meta gets at most four a second of them)
    bar = Monotone.__call__
    monkeypatch.setattr(Monotone, "__call__", lambda self, f, m: shown.append(m) or bar(self, f, m))
    options = {**FAST, "layer": 1, "head": 0, "all_heads": True, "hidden_layer": "all"}
    body = {"model": "tiny-gpt2", "text": TEXT, "options": options,
            "analyses": ["max-attention", "head-tsne", "hidden-tsne"]}  # fmt: skip
    resp = client.post("/api/analyses", json=body)
    assert resp.status_code == 202, resp.text
    job_id = resp.json()["id"]
    queues = [protocol.queue(conn, name) for name in protocol.QUEUES]
    SimpleWorker(queues, connection=conn, serializer=protocol.SERIALIZER).work(burst=True)
    assert client.get(f"/api/analyses/{job_id}").json()["status"] == "finished"
    fractions = [f for f, _ in written]
    messages = [m for _, m in written]
    assert len(written) >= 4 and fractions == sorted(fractions), written
    assert fractions[-1] == 1.0 and messages[-1] == DONE and DONE not in messages[:-1], written
    assert any(m.startswith("step 2/3 (head-tsne-all): layer 1/") for m in shown), shown
