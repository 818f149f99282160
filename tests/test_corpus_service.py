"""Corpora through the API (in-process app on a real Redis and store) and corpus jobs through RQ (a
burst worker in this process): bad uploads get 422 naming the problem and leave nothing; a good one
is content-addressed and owned; a corpus job finishes into the store, and a cancelled one keeps
nothing and can be submitted again; the CLI writes the documented keys."""

from __future__ import annotations

import json
import time

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from backend.app import create_app
from backend.config import Settings
from workers.queue import keys as protocol

pytestmark = pytest.mark.usefixtures("one_torch_thread")


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


BAD = [
    ("empty.txt", b"", None, "is empty"),
    ("latin1.txt", "caf\xe9 au lait\n".encode("latin-1"), None, "not UTF-8"),
    ("binary.txt", b"one\x00two\n", None, "NUL"),
    ("gaps.txt", b"first\n\nthird\n", None, "empty text on line 2"),
    ("rows.jsonl", b'{"text": "a"}\n{"body": "b"}\n', None, "line 2 has no field 'text'"),
    ("rows.jsonl", b'{"text": "a"}\nnot json\n', None, "line 2 is not JSON"),
    ("rows.jsonl", b'{"text": 3}\n', None, "not a string"),
    ("table.csv", b"id,sentence\n1,hello\n", "text", "no column 'text'"),
    ("table.csv", b"id,text\n1,hello\n2,\n", "text", "empty text on line 3"),
    ("notes.docx", b"PK\x03\x04", None, "unsupported file type"),
]


@pytest.mark.parametrize(("name", "data", "field", "reason"), BAD)
def test_bad_corpora_get_a_reason_and_leave_nothing(app, name, data, field, reason):
    client, store, _ = app
    form = {"field": field} if field else {}
    resp = client.post("/api/corpora", files={"file": (name, data, "text/plain")}, data=form)
    assert resp.status_code in (415, 422), resp.text
    assert reason in resp.json()["detail"]
    assert (
        store.list_corpora() == []
        and [i for i in store.stored_items() if i["kind"] == "corpus"] == []
    )


def test_too_many_rows_and_too_large(redis_server, tmp_path):
    conn = Redis.from_url(redis_server)
    settings = Settings(
        data_dir=tmp_path / "small",
        redis_url=redis_server,
        corpus_max_texts=3,
        corpus_max_bytes=50,
        corpus_max_text_chars=8,
    )
    application = create_app(settings, redis=conn, background=False, frontend=False)
    client, store = TestClient(application), application.state.store
    many = client.post("/api/corpora", data={"text": "a\nb\nc\nd\n"})
    assert (
        many.status_code == 422
        and "has more than 3 texts; a corpus may have at most 3" in many.json()["detail"]
    )
    long = client.post("/api/corpora", data={"text": "short\nnine char\n"})
    assert long.status_code == 422 and "line 2 is longer than 8 characters" in long.json()["detail"]
    big = client.post("/api/corpora", files={"file": ("big.txt", b"word " * 30, "text/plain")})
    assert big.status_code == 413 and "50-byte limit" in big.json()["detail"]
    assert (
        store.list_corpora() == [] and list(store.tmp_dir.iterdir()) == []
    )  # no upload or spool left


def test_upload_formats_are_content_addressed_and_owned(app):
    client, store, _ = app
    txt = client.post(
        "/api/corpora", files={"file": ("a.txt", b"The cat sat.\nThe dog ran.\n", "text/plain")}
    )
    assert txt.status_code == 201, txt.text
    body = txt.json()
    assert (
        body["id"].startswith("cp-")
        and body["n_texts"] == 2
        and body["preview"] == ["The cat sat.", "The dog ran."]
    )
    jsonl = client.post(
        "/api/corpora",
        data={"field": "s"},
        files={"file": ("b.jsonl", b'{"s": "The cat sat."}\n{"s": "The dog ran.", "n": 1}\n', "x")},
    )
    csv = client.post(
        "/api/corpora",
        data={"field": "s"},
        files={"file": ("c.csv", b'n,s\n1,The cat sat.\n2,"The dog ran."\n', "text/csv")},
    )
    pasted = client.post("/api/corpora", data={"text": "The cat sat.\nThe dog ran."})
    assert {r.json()["id"] for r in (jsonl, csv, pasted)} == {body["id"]}  # same texts, same corpus
    assert len(store.list_corpora()) == 1 and store.corpus_texts(body["id"]) == [
        "The cat sat.",
        "The dog ran.",
    ]
    listed = client.get("/api/corpora").json()
    assert [c["id"] for c in listed["corpora"]] == [body["id"]]
    assert {c["id"] for c in listed["shipped"]} == {"builtin-english", "builtin-lasf-heldout"}
    assert client.get("/api/corpora/cp-" + "0" * 32).status_code == 404
    assert (
        client.post(
            "/api/corpus-analyses", json={"corpus": "cp-" + "1" * 32, "model": "tiny-bert"}
        ).status_code
        == 404
    )
    assert (
        client.post(
            "/api/corpus-analyses", json={"corpus": body["id"], "model": "nope"}
        ).status_code
        == 422
    )
    assert (
        client.post(
            "/api/corpus-joint",
            json={"corpus": body["id"], "model": "tiny-bert", "layer": 9, "head": 0},
        ).status_code
        == 422
    )


def test_a_share_of_an_atlas_keeps_its_corpus_while_an_unused_corpus_expires(app):
    """docs/atlas.md: the atlas' corpus probe is an uploaded corpus; a share of the atlas keeps it."""
    from backend import quota
    from workers.analyses.atlas.spec import ATLAS, ATLAS_TEXT
    from workers.core.contracts import AnalysisRequest

    client, store, _ = app
    settings = client.app.state.settings
    kept, unused, other = (
        client.post("/api/corpora", data={"text": f"The {w} sat.\nThe dog ran."}).json()["id"]
        for w in ("cat", "owl", "fox")
    )
    atlas = AnalysisRequest(model="tiny-gpt2", text=ATLAS_TEXT, analyses=[ATLAS])
    atlas.options.corpus = kept
    # a text analysis names a corpus it does not read: its share keeps nothing but its result
    attention = AnalysisRequest(model="tiny-gpt2", text="The cat sat.", analyses=["max-attention"])
    attention.options.corpus = other
    for job, req in (("e" * 32, atlas), ("f" * 32, attention)):
        request = req.normalised()
        store.write_result(job, kind="analysis", request=request, result_raw="{}")
        store.create_share(kind="analysis", target=job, view={})
    assert store.result_request("e" * 32)["options"]["corpus"] == kept
    later = time.time() + settings.upload_ttl_s + 1
    assert sorted(quota.enforce(store, settings, now=later)) == sorted([unused, other])
    assert store.corpus(kept) is not None and store.corpus(unused) is None


def test_corpus_job_runs_to_the_store_and_cancel_keeps_nothing(app, monkeypatch):
    client, store, conn = app
    import workers.queue.jobs_corpus

    req = {"corpus": "builtin-english", "model": "tiny-bert", "options": {"max_tokens": 16}}
    # cancelled while queued: never runs; submitting again runs it
    job_id = client.post("/api/corpus-analyses", json=req).json()["id"]
    assert client.delete(f"/api/corpus-analyses/{job_id}").json()["cancelled"] is True
    run_jobs(conn)
    state = client.get(f"/api/corpus-analyses/{job_id}").json()
    assert (
        state["status"] == "failed"
        and "cancelled" in state["error"]
        and not store.has_result(job_id)
    )
    # cancelled while running (after two batches wrote partial statistics): nothing kept
    monkeypatch.setattr(workers.queue.jobs_corpus, "PARTIAL_EVERY_S", 0.0)
    seen: list[int] = []
    real_partial = workers.queue.reporter.Reporter.partial

    def spy(self, fields):
        seen.append(fields["n_texts"])
        real_partial(self, fields)

    monkeypatch.setattr(workers.queue.reporter.Reporter, "partial", spy)
    calls = iter(range(1000))
    monkeypatch.setattr(
        workers.queue.jobs_corpus, "_stopper", lambda conn, jid: lambda: next(calls) >= 2
    )
    assert client.post("/api/corpus-analyses", json=req).json()["status"] == "queued"
    run_jobs(conn)
    assert seen and seen[0] > 0  # partial statistics were written as batches finished ...
    state = client.get(f"/api/corpus-analyses/{job_id}").json()
    assert state["status"] == "failed" and "cancelled" in state["error"]
    assert not conn.exists(protocol.partial_key(job_id)) and not store.has_result(
        job_id
    )  # ... and removed
    # and a plain run finishes into the store with the documented keys
    monkeypatch.setattr(workers.queue.jobs_corpus, "_stopper", lambda conn, jid: lambda: False)
    client.post("/api/corpus-analyses", json=req)
    run_jobs(conn)
    done = client.get(f"/api/corpus-analyses/{job_id}").json()
    assert done["status"] == "finished", done
    result = done["result"]
    assert result["n_texts"] == 147 and result["truncated"] > 0
    assert (
        set(result["statistics"])
        == set(result["counts"])
        == {
            "entropy",
            "entropy_normalised",
            "sink",
            "previous",
            "self",
            "distance",
            "induction",
            "duplicate",
        }
    )
    assert len(result["top_pairs"]) == 2 and len(result["top_pairs"][0]) == 4
    share = client.post(
        "/api/shares", json={"corpus_analysis_id": job_id, "view": {"head": "1,2"}}
    ).json()
    assert share["url"].startswith("/corpus?share=")
    # a joint map job
    joint = client.post(
        "/api/corpus-joint",
        json={
            "corpus": "builtin-english",
            "model": "tiny-bert",
            "layer": 1,
            "head": 2,
            "max_points": 200,
            "method": "pca",
        },
    ).json()
    run_jobs(conn)
    jm = client.get(f"/api/corpus-joint/{joint['id']}").json()
    assert (
        jm["status"] == "finished" and jm["result"]["sampled"] and jm["result"]["n_points"] == 200
    )


def test_cli_writes_the_documented_keys(tmp_path, catalogue):
    from backend.cli import main

    src = tmp_path / "texts.jsonl"
    src.write_text(
        "\n".join(
            json.dumps({"body": t}) for t in ["The cat sat on the mat.", "The cat sat again."]
        )
    )
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "corpus",
                "--model",
                "tiny-bert",
                "--file",
                str(src),
                "--field",
                "body",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    r = json.loads(out.read_text())
    assert {"statistics", "counts", "top_pairs", "n_texts", "n_tokens", "truncated"} <= set(r)
    assert r["n_texts"] == 2 and len(r["statistics"]["previous"]) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "x"}\n')
    assert (
        main(
            [
                "corpus",
                "--model",
                "tiny-bert",
                "--file",
                str(bad),
                "--field",
                "body",
                "--out",
                str(tmp_path / "no.json"),
                "--quiet",
            ]
        )
        == 2
    )
    assert not (tmp_path / "no.json").exists()
