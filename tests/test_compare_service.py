"""Comparisons through the API (in-process app on a real Redis and store, jobs run by a burst RQ worker in
this process) and the CLI: bad input gets a 422 naming the problem before anything is queued; a
comparison finishes into the store and can be shared; two models the budget cannot hold together run
one after the other, the first dropped before the second loads."""

from __future__ import annotations

import json

import numpy as np
import pytest
from redis import Redis

from tests.test_corpus_service import app, run_jobs  # noqa: F401 - the same app fixture
from workers.queue import keys as protocol

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TEXT = "the cat sat on the mat and the dog slept by the door"


def queued(conn: Redis) -> int:
    return sum(len(protocol.queue(conn, name)) for name in protocol.QUEUES)


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ({"model_a": "nope", "model_b": "tiny-bert", "text": TEXT}, 422, "unknown model 'nope'"),
        ({"model_a": "tiny-bert", "model_b": "tiny-gpt2", "text": " \n\t "}, 422, "no word"),
        ({"model_a": "tiny-bert", "model_b": "tiny-gpt2"}, 422, "exactly one of text and corpus"),
        (
            {
                "model_a": "tiny-bert",
                "model_b": "tiny-gpt2",
                "text": TEXT,
                "corpus": "builtin-english",
            },
            422,
            "exactly one of text and corpus",
        ),
        (
            {"model_a": "tiny-bert", "model_b": "tiny-gpt2", "corpus": "cp-" + "0" * 32},
            404,
            "upload it first",
        ),
    ],
)
def test_bad_requests_are_refused_before_queueing(app, body, status, reason):
    client, _, conn = app
    resp = client.post("/api/compare", json=body)
    assert resp.status_code == status, resp.text
    assert reason in resp.json()["detail"]
    assert queued(conn) == 0


def test_a_corpus_too_large_for_the_budget_is_refused(app, setting):
    client, _, conn = app
    setting("HEADSCOPE_MEMORY_BUDGET_GB", "0.4")  # below the runtime alone
    resp = client.post(
        "/api/compare",
        json={"model_a": "tiny-bert", "model_b": "tiny-gpt2", "corpus": "builtin-english"},
    )
    assert resp.status_code == 422 and "memory budget" in resp.json()["detail"], resp.text
    assert "word maps" in resp.json()["detail"] and queued(conn) == 0


def test_comparison_finishes_and_is_shared(app):
    client, _, conn = app
    body = {"model_a": "tiny-bert", "model_b": "tiny-gpt2", "text": TEXT, "max_tokens": 32}
    sub = client.post("/api/compare", json=body)
    assert sub.status_code == 202, sub.text
    assert client.post("/api/compare", json=body).json()["id"] == sub.json()["id"]  # one job
    run_jobs(conn)
    st = client.get(f"/api/compare/{sub.json()['id']}").json()
    assert st["status"] == "finished", st
    res = st["result"]
    sim = np.array(res["similarity"])
    assert sim.shape == (8, 8) and np.all((sim >= 0) & (sim <= 1))
    assert res["text"] == TEXT and len(res["matching"]["pairs"]) == 8 and not res["one_at_a_time"]
    share = client.post(
        "/api/shares", json={"compare_id": sub.json()["id"], "view": {"cell": [0, 1]}}
    )
    assert share.status_code == 201 and share.json()["url"].startswith("/compare?share=")
    opened = client.get(f"/api/shares/{share.json()['id']}").json()
    assert opened["kind"] == "compare" and opened["view"] == {"cell": [0, 1]}
    assert opened["result"]["similarity"] == res["similarity"]


def test_two_models_that_do_not_fit_together_run_one_after_the_other(app, setting, monkeypatch):
    import workers.models
    from workers.analyses.compare.plan import plan_of
    from workers.core.memory import GIB
    from workers.models import loader

    client, _, conn = app
    plan = plan_of("tiny-bert", "tiny-gpt2", [TEXT], max_tokens=32)
    setting(
        "HEADSCOPE_MEMORY_BUDGET_GB", str((plan.one_at_a_time + 1024) / GIB)
    )  # one fits, not both
    loader.clear_cache()
    loads: list[tuple[str, list[str]]] = []
    real = workers.models.load_model

    def tracked(name: str, **kw):
        loads.append((name, sorted({k[0] for k in loader._cache})))
        return real(name, device="cpu", **kw)

    monkeypatch.setattr(workers.models, "load_model", tracked)
    sub = client.post(
        "/api/compare",
        json={"model_a": "tiny-bert", "model_b": "tiny-gpt2", "text": TEXT, "max_tokens": 32},
    )
    assert sub.status_code == 202, sub.text
    run_jobs(conn)
    st = client.get(f"/api/compare/{sub.json()['id']}").json()
    assert st["status"] == "finished" and st["result"]["one_at_a_time"], st
    assert loads[0][0] == "tiny-bert" and loads[1] == ("tiny-gpt2", [])  # A gone before B loaded


def test_cli_compare_writes_the_documented_keys(catalogue, tmp_path, capsys):
    from backend.cli import main

    out = tmp_path / "cmp.json"
    assert (
        main(
            [
                "compare",
                "--model-a",
                "tiny-gpt2",
                "--model-b",
                "tiny-bert",
                "--text",
                TEXT,
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    res = json.loads(out.read_text())
    for key in (
        "model_a",
        "model_b",
        "similarity",
        "matching",
        "profiles",
        "words",
        "n_query_words",
    ):
        assert key in res
    assert (
        res["words"][0]["a"]["surprisal"][0] is None and res["words"][0]["b"]["surprisal"] is None
    )
    assert res["texts"] is None and res["text"] == TEXT
    assert (
        main(
            [
                "compare",
                "--model-a",
                "tiny-bert",
                "--model-b",
                "tiny-gpt2",
                "--corpus",
                "builtin-english",
                "--max-tokens",
                "16",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )  # a shipped corpus
    res = json.loads(out.read_text())
    assert res["corpus"] == "builtin-english" and res["n_texts"] == len(res["texts"]) == 147
    assert (
        main(
            [
                "compare",
                "--model-a",
                "tiny-bert",
                "--model-b",
                "nope",
                "--text",
                TEXT,
                "--out",
                str(out),
            ]
        )
        == 2
    )
    assert "unknown model 'nope'" in capsys.readouterr().err
    assert (
        main(
            [
                "compare",
                "--model-a",
                "tiny-bert",
                "--model-b",
                "tiny-gpt2",
                "--text",
                "  ",
                "--out",
                str(out),
            ]
        )
        == 2
    )
    assert "no word" in capsys.readouterr().err


def test_word_maps_analysis_runs_as_a_job(app):
    client, _, conn = app
    sub = client.post(
        "/api/analyses", json={"model": "tiny-gpt2", "text": TEXT, "analyses": ["word-maps"]}
    )
    assert sub.status_code == 202, sub.text
    run_jobs(conn)
    st = client.get(f"/api/analyses/{sub.json()['id']}").json()
    assert st["status"] == "finished", st
    sec = st["result"]["word-maps"]
    assert sec["words"] == TEXT.split() and np.allclose(
        np.array(sec["maps"]).sum(axis=-1), 1.0, atol=1e-4
    )


def test_a_corpus_whose_maps_fit_only_a_part_at_a_time_is_accepted_split(app, setting):
    from workers.analyses.compare.plan import compare_ranges, plan_of
    from workers.core.memory import GIB
    from workers.inputs.corpora import shipped_corpus

    client, _, conn = app
    body = {
        "model_a": "tiny-bert",
        "model_b": "tiny-gpt2",
        "corpus": "builtin-english",
        "max_tokens": 32,
    }
    texts = shipped_corpus("builtin-english").texts
    setting("HEADSCOPE_SPLIT_COMPARE_MIN_TEXTS", "40")
    setting("HEADSCOPE_SPLIT_COMPARE_PART_TEXTS", "20")
    whole = plan_of("tiny-bert", "tiny-gpt2", texts, max_tokens=32)
    part = plan_of(
        "tiny-bert", "tiny-gpt2", texts, max_tokens=32, ranges=compare_ranges(len(texts))
    )
    assert part.parts == 8 and part.one_at_a_time < whole.one_at_a_time
    setting("HEADSCOPE_MEMORY_BUDGET_GB", str((part.one_at_a_time + whole.one_at_a_time) / 2 / GIB))
    setting(
        "HEADSCOPE_SPLIT_COMPARE_MIN_TEXTS", "1000"
    )  # one job: A's maps of every text do not fit
    resp = client.post("/api/compare", json=body)
    assert resp.status_code == 422 and "word maps of every text" in resp.json()["detail"], resp.text
    assert queued(conn) == 0
    setting("HEADSCOPE_SPLIT_COMPARE_MIN_TEXTS", "40")  # in parts of 20 texts they do
    resp = client.post("/api/compare", json=body)
    assert resp.status_code == 202, resp.text
    assert queued(conn) == 1
