"""Task sets stored as corpora are, through the API (in-process app on a real Redis and store;
docs/circuits.md, "Circuits on a task data set"): an upload is checked completely and stored once
under a content-addressed id, a bad line or a too-big file is refused with nothing kept, a
``circuits-set`` job names the stored set by its id and finds what the same set inline finds, and a
share keeps the set its result was made from."""

from __future__ import annotations

import json
import time

import pytest
import test_corpus_service
from fastapi.testclient import TestClient
from redis import Redis
from test_circuit_tasks import TINY_NAMES

from backend.app import create_app
from backend.config import Settings
from workers.analyses.atlas.spec import ATLAS, ATLAS_TEXT
from workers.analyses.circuits.tasks import ioi
from workers.core.contracts import AnalysisRequest
from workers.queue.jobs import compute_analysis

pytestmark = pytest.mark.usefixtures("one_torch_thread")
app = test_corpus_service.app  # the in-process app on a real Redis, its store
KIND = "circuits-set"


@pytest.fixture(scope="module")
def lines(tiny_model_dirs) -> list[dict[str, str]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dirs["tiny-gpt2"]))
    return [ex.as_dict() for ex in ioi(tok, 6, seed=0, names=TINY_NAMES)]


def _jsonl(rows: list[dict[str, str]], rename: dict[str, str] | None = None) -> bytes:
    rename = rename or {}
    return "\n".join(json.dumps({rename.get(k, k): v for k, v in r.items()}) for r in rows).encode()


def _sets(store) -> list[dict]:
    return [m for m in store.list_corpora() if m.get("kind") == "task-set"]


def test_an_upload_is_stored_once_under_its_content(app, lines):
    client, store, _ = app
    mib = {"clean": "prompt", "corrupted": "counterfactual", "answer": "target"}
    data = _jsonl(lines, mib)
    form = {"clean": "prompt", "corrupted": "counterfactual", "answer": "target"}
    first = client.post("/api/task-sets", files={"file": ("mib.jsonl", data)}, data=form)
    assert first.status_code == 201, first.text
    body = first.json()
    assert body["id"].startswith("cp-") and body["n_examples"] == 6 and body["name"] == "mib.jsonl"
    assert body["fields"] == {"clean": "prompt", "corrupted": "counterfactual",
                              "answer": "target", "wrong": "wrong"}  # fmt: skip
    again = client.post("/api/task-sets", files={"file": ("again.jsonl", data)}, data=form)
    assert again.status_code == 201 and again.json()["id"] == body["id"]
    # the same examples under our own field names, pasted: the same set
    pasted = client.post("/api/task-sets", data={"text": _jsonl(lines).decode()})
    assert pasted.json()["id"] == body["id"]
    assert len(_sets(store)) == 1 and store.corpus_length(body["id"]) == 6
    assert client.get("/api/task-sets").json()["task_sets"][0]["id"] == body["id"]
    assert client.get(f"/api/task-sets/{body['id']}").json()["n_examples"] == 6
    assert client.get("/api/corpora").json()["corpora"] == []  # not a corpus to analyse
    # a plain corpus of the same lines is another thing, under another id
    corpus = client.post("/api/corpora", data={"text": _jsonl(lines).decode()}).json()
    assert corpus["id"] != body["id"]
    refused = client.post("/api/corpus-analyses", json={"model": "minilm", "corpus": body["id"]})
    assert refused.status_code == 422 and "is a task set" in refused.text
    assert client.get(f"/api/corpora/{body['id']}").status_code == 404  # read at /api/task-sets
    atlas = {"model": "tiny-gpt2", "text": ATLAS_TEXT, "analyses": [ATLAS],
             "options": {"corpus": body["id"], "random_len": 8}}  # fmt: skip
    refused = client.post("/api/analyses", json=atlas)  # nor the atlas' corpus probe
    assert refused.status_code == 422 and "is a task set" in refused.text


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda t: t.replace(b"\n", b"\nnot json\n", 1), "line 2: not JSON"),
        (lambda t: t + b'\n{"clean": "a", "corrupted": "b", "answer": "c"}', "line 7: no field 'wrong'"),
        (lambda t: t + b'\n\n{"clean": "a", "corrupted": "b", "answer": "", "wrong": "d"}',
         "line 8: 'answer' must be a non-empty string"),
        (lambda t: t + b"\n[1, 2]", "line 7: a JSON object is expected"),
        (lambda t: t + b"\n" + b"[" * 100_000, "line 7: not JSON"),
        (lambda t: t.split(b"\n")[0], "1 example(s); at least 2"),
    ],
)  # fmt: skip
def test_a_bad_line_is_refused_by_number_and_nothing_kept(app, lines, edit, reason):
    client, store, _ = app
    resp = client.post("/api/task-sets", files={"file": ("set.jsonl", edit(_jsonl(lines)))})
    assert resp.status_code == 422, resp.text
    assert reason in resp.json()["detail"], resp.json()
    assert store.list_corpora() == [] and [i for i in store.stored_items()] == []
    assert list(store.tmp_dir.iterdir()) == []


def test_a_too_big_file_and_a_full_quota_are_refused(redis_server, tmp_path, lines):
    data = _jsonl(lines)
    conn = Redis.from_url(redis_server)
    small = Settings(
        data_dir=tmp_path / "a", redis_url=redis_server, corpus_max_bytes=len(data) - 1
    )
    client = TestClient(create_app(small, redis=conn, background=False, frontend=False))
    resp = client.post("/api/task-sets", files={"file": ("set.jsonl", data)})
    assert resp.status_code == 413 and f"{len(data) - 1:,}-byte limit" in resp.text
    resp = client.post("/api/task-sets", data={"text": data.decode()})
    assert resp.status_code == 413
    assert client.app.state.store.list_corpora() == []
    short = Settings(data_dir=tmp_path / "b", redis_url=redis_server, corpus_max_text_chars=20)
    client = TestClient(create_app(short, redis=conn, background=False, frontend=False))
    resp = client.post("/api/task-sets", files={"file": ("set.jsonl", data)})
    assert resp.status_code == 422 and "line 1: 'clean' is longer than 20 characters" in resp.text
    tight = Settings(data_dir=tmp_path / "c", redis_url=redis_server, upload_quota_bytes=100)
    client = TestClient(create_app(tight, redis=conn, background=False, frontend=False))
    resp = client.post("/api/task-sets", files={"file": ("set.jsonl", data)})
    assert resp.status_code == 413 and "upload quota" in resp.text
    assert client.app.state.store.list_corpora() == []


def test_a_job_by_id_finds_what_the_inline_set_finds(app, lines, monkeypatch):
    client, store, _ = app
    import workers.inputs.task_sets

    monkeypatch.setattr(workers.inputs.task_sets, "default_store", lambda: store)
    text = _jsonl(lines).decode()
    set_id = client.post("/api/task-sets", data={"text": text, "name": "six"}).json()["id"]
    submit = {"model": "tiny-gpt2", "text": set_id, "analyses": [KIND]}
    assert client.post("/api/analyses", json=submit).status_code == 202
    missing = client.post("/api/analyses", json={**submit, "text": "cp-" + "0" * 32})
    assert missing.status_code == 404 and "upload it first" in missing.text
    fields = client.post(
        "/api/analyses", json={**submit, "options": {"set_fields": {"clean": "p"}}}
    )
    assert fields.status_code == 422 and "set_fields applies" in fields.text

    opts = {
        "ig_steps": 2,
        "bootstrap": 2,
        "random_circuits": 2,
        "set_edges": 20,
        "dtype": "float64",
    }
    results = []
    for t in (set_id, text):
        req = AnalysisRequest.model_validate({**submit, "text": t, "options": opts})
        out = compute_analysis(req, progress=lambda f, m: None, on_partial=lambda f: None)[KIND]
        results.append(out)
    by_id, inline = results
    assert by_id.pop("set_id") == set_id and by_id.pop("set_name") == "six"
    for res in (by_id, inline):
        res.pop("seconds")
        res.pop("timings", None)
    assert by_id == inline and by_id["task"] == "upload" and len(by_id["examples"]) == 6


def test_a_share_keeps_its_set_and_an_unused_set_expires(app, lines):
    from backend import quota

    client, store, _ = app
    settings = client.app.state.settings
    kept = client.post("/api/task-sets", data={"text": _jsonl(lines[:3]).decode()}).json()["id"]
    unused = client.post("/api/task-sets", data={"text": _jsonl(lines[3:]).decode()}).json()["id"]
    job = "e" * 32
    request = {"model": "tiny-gpt2", "text": kept, "analyses": [KIND]}
    store.write_result(job, kind="analysis", request=request, result_raw="{}")
    store.create_share(kind="analysis", target=job, view={})
    later = time.time() + settings.upload_ttl_s + 1
    assert quota.enforce(store, settings, now=later) == [unused]
    assert store.corpus(kept) is not None and store.corpus(unused) is None


def test_a_set_holds_2_to_2000_examples(app):
    client, store, _ = app
    row = {"clean": "a b", "corrupted": "c d", "answer": " e", "wrong": " f"}
    at = "\n".join(json.dumps({**row, "clean": f"a {i}"}) for i in range(2000))
    resp = client.post("/api/task-sets", files={"file": ("at.jsonl", at.encode())})
    assert resp.status_code == 201 and resp.json()["n_examples"] == 2000
    past = at + "\n" + json.dumps(row)
    resp = client.post("/api/task-sets", files={"file": ("past.jsonl", past.encode())})
    assert resp.status_code == 422 and "more than 2,000 examples (line 2001)" in resp.text
    assert len(store.list_corpora()) == 1
