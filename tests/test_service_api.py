"""End to end through ``headscope serve``: real uvicorn on loopback, real Redis, 2 real workers.

MiniLM for the claims about real behaviour (max attention, one head's t-SNE), the tiny models for
the mechanics of every other analysis kind.
"""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from redis import Redis
from service_helpers import HANG_S, short_text, wait_done

from workers.queue import keys as protocol

pytestmark = pytest.mark.slow

FAST = {"n_iter": 100, "early_exaggeration_iter": 50}


def post(client, body: dict) -> str:
    resp = client.post("/api/analyses", json=body)
    assert resp.status_code == 202, resp.text
    return resp.json()["id"]


def run(client, body: dict, *, timeout_s: float = HANG_S) -> dict:
    job_id = post(client, body)
    done = wait_done(client, f"/api/analyses/{job_id}", timeout_s=timeout_s)
    assert done["id"] == job_id
    return done


@pytest.fixture(scope="module")
def client(service):
    with service.client() as c:
        yield c


@pytest.fixture(scope="module")
def redis(service) -> Redis:
    return Redis.from_url(service.info()["redis_url"])


def test_health_models_and_docs(client):
    health = client.get("/api/health").json()
    assert health == {**health, "status": "ok", "redis": True, "workers": 2}
    # each worker says what it computes on (here: the CPU, with the compiled numba t-SNE kernels),
    # once it has imported the analysis core (it is "ready" after that)
    deadline = time.monotonic() + 600  # a guard against a hang, not a deadline
    while health["ready"] < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
        health = client.get("/api/health").json()
    assert set(health["devices"]) == set(health["worker_names"])
    for report in health["devices"].values():
        assert (
            report["device"] == "cpu" and report["tsne_engine"] == "cpu" and report["threads"] >= 1
        )
    models = client.get("/api/models").json()
    assert models["default"] == "minilm"
    by_name = {m["name"]: m for m in models["models"]}
    assert set(by_name) == {
        "gemma3-270m",
        "minilm",
        "smollm2",
        "tiny-bert",
        "tiny-gpt2",
        "tiny-llama",
    }  # builtins + catalogue
    assert (by_name["minilm"]["n_layers"], by_name["minilm"]["n_heads"]) == (6, 12)
    assert by_name["tiny-bert"]["max_tokens"] == 64
    llama = by_name[
        "tiny-llama"
    ]  # the picker's facts: family, layers x query heads (kv heads), limit
    assert (llama["family"], llama["n_layers"], llama["n_heads"], llama["n_kv_heads"]) == (
        "llama",
        2,
        4,
        2,
    )
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/api/analyses", "/api/analyses/{job_id}", "/api/shares", "/api/checkpoints"} <= set(
        paths
    )


@pytest.mark.parametrize(
    "body, status, words",
    [
        ({"text": "   "}, 422, ["text", "empty"]),
        ({"model": "gpt-9000", "text": "hi"}, 422, ["gpt-9000", "minilm", "tiny-bert"]),
        ({"model": "/etc/passwd", "text": "hi"}, 422, ["unknown model", "/etc/passwd"]),
        ({"text": "w" * 20_001}, 422, ["20,001 characters", "20,000"]),
        (
            {"text": "hi", "analyses": ["attention-rollout"]},
            422,
            ["unknown analysis", "attention-rollout"],
        ),
        ({"text": "hi", "options": {"perplexitee": 5}}, 422, ["unknown option", "perplexitee"]),
        ({"text": "hi", "options": {"layer": 6}}, 422, ["layer 6", "0-5"]),
        ({"text": "hi", "model": "tiny-bert", "options": {"head": 4}}, 422, ["head 4", "0-3"]),
        ({"text": "hi", "options": {"restarts": 500}}, 422, ["restarts"]),
        ({"analyses": ["max-attention"]}, 422, ["text", "required"]),
    ],
)
def test_bad_requests_get_a_readable_reason(client, body, status, words):
    resp = client.post("/api/analyses", json=body)
    assert resp.status_code == status
    detail = resp.json()["detail"]
    assert isinstance(detail, str)
    for w in words:
        assert w in detail


def test_over_long_text_states_the_count_the_worker_would_find(client, catalogue):
    """The API counts tokens without torch; the count and limit match the model's own tokenizer."""
    from workers.models import encode, load_model

    text = short_text(80)
    resp = client.post("/api/analyses", json={"model": "tiny-bert", "text": text})
    assert resp.status_code == 422
    n = len(load_model("tiny-bert", device="cpu").tokenizer(text)["input_ids"])
    assert n > 64
    assert f"has {n} tokens" in resp.json()["detail"] and "at most 64" in resp.json()["detail"]
    with pytest.raises(Exception, match=f"has {n} tokens"):
        encode(load_model("tiny-bert", device="cpu"), text)
    ok = client.post(
        "/api/analyses", json={"model": "tiny-bert", "text": text, "options": {"truncate": True}}
    )
    assert ok.status_code == 202


def test_unknown_ids_are_404(client):
    for path in [
        "/api/analyses/" + "0" * 32,
        "/api/analyses/not-a-hash",
        "/api/pe-analyses/" + "1" * 32,
        "/api/shares/" + "A" * 32,
        "/api/shares/..%2F..%2Fetc%2Fpasswd",
        "/api/checkpoints/ck-" + "2" * 32,
        "/api/checkpoints/demo-nothing",
    ]:
        resp = client.get(path)
        assert resp.status_code == 404, path
        assert "detail" in resp.json()
    resp = client.post("/api/shares", json={"analysis_id": "3" * 32, "view": {}})
    assert resp.status_code == 404 and "3" * 32 in resp.json()["detail"]


def test_minilm_max_attention_and_one_head_match_the_core(client, minilm, demo_text):
    """The real MiniLM through the service equals the analysis core run here."""
    from workers import head_affinities, kl_divergence, max_attention
    from workers.models import run_text

    text = " ".join(demo_text.split()[:60])
    body = {
        "model": "minilm",
        "text": text,
        "analyses": ["head-tsne", "max-attention"],
        "options": {"layer": 1, "head": 2},
    }
    done = run(client, body)
    assert done["status"] == "finished", done["error"]
    res = done["result"]
    local = run_text(minilm, text)
    assert res["tokens"] == local.tokens
    ma = np.asarray(res["max-attention"]["max_attention"])  # [layer, head, token]
    assert ma.shape == (6, 12, len(local.tokens))
    np.testing.assert_allclose(ma, max_attention(local.attentions), atol=1e-5)
    ht = res["head-tsne"]
    emb = np.asarray(ht["embedding"])  # [token, 2]
    assert emb.shape == (len(local.tokens), 2) and np.isfinite(emb).all()
    p = head_affinities(local.attentions[1, 2])
    assert ht["kl"][0] == pytest.approx(kl_divergence(p, emb), rel=1e-3, abs=1e-4)
    assert done["request"]["options"]["layer"] == 1 and done["progress"] == 1.0


def test_every_analysis_kind_on_tiny_models(client, redis):
    """Each kind's section arrives, cheap first, with the shapes docs/results.md gives."""
    text = short_text(30)
    bert = run(
        client,
        {
            "model": "tiny-bert",
            "text": text,
            "analyses": ["robustness", "hidden-tsne", "head-tsne", "max-attention"],
            "options": {**FAST, "layer": 1, "head": 3, "all_heads": True, "repeats": 2},
        },
    )
    assert bert["status"] == "finished", bert["error"]
    res, n = bert["result"], bert["result"]["n_tokens"]
    assert np.asarray(res["max-attention"]["max_attention"]).shape == (2, 4, n)
    assert np.asarray(res["head-tsne"]["embedding"]).shape == (n, 2)
    assert np.asarray(res["head-tsne-all"]["embedding"]).shape == (2, 4, n, 2)
    assert np.asarray(res["hidden-tsne"]["embedding"]).shape == (n, 2)
    assert len(res["robustness"]["head_tsne"]["disturbed"]["kl"]) == 2
    job = protocol.fetch_job(redis, bert["id"])
    assert job.meta["sections"] == [
        "max-attention",
        "head-tsne",
        "head-tsne-all",
        "hidden-tsne",
        "robustness",
    ]

    gpt = run(
        client,
        {
            "model": "tiny-gpt2",
            "text": short_text(12),
            "analyses": ["max-attention", "head-tsne"],
            "options": {**FAST, "layer": 0, "head": 1},
        },
    )
    assert gpt["status"] == "finished", gpt["error"]
    assert gpt["result"]["family"] == "gpt2"
    assert np.asarray(gpt["result"]["head-tsne"]["embedding"]).shape == (
        gpt["result"]["n_tokens"],
        2,
    )

    words = "\n".join(["cat", "dog", "horse", "car", "train", "bicycle", "red", "green"])
    wt = run(
        client,
        {
            "model": "tiny-bert",
            "text": words,
            "analyses": ["word-tsne"],
            "options": {**FAST, "layer": 2, "perplexity": 2.0},
        },
    )
    assert wt["status"] == "finished", wt["error"]
    assert np.asarray(wt["result"]["word-tsne"]["embedding"]).shape == (8, 2)

    few = client.post(
        "/api/analyses", json={"model": "tiny-bert", "text": "cat\ndog", "analyses": ["word-tsne"]}
    )  # refused before queueing (tests/test_limits.py tries the bounds)
    assert few.status_code == 422 and "at least 4 items" in few.json()["detail"]

    dec = run(
        client, {"model": "tiny-bert", "text": text, "analyses": ["decomposition", "max-attention"]}
    )
    assert dec["status"] == "finished", dec["error"]
    assert "decomposition" in dec["result"]


def test_identical_requests_share_one_job_and_one_result(client, redis):
    body = {"model": "tiny-bert", "text": short_text(12), "analyses": ["max-attention"]}
    reordered = {
        "analyses": ["max-attention", "max-attention"],
        "options": {"seed": 0},
        "text": body["text"],
        "model": "tiny-bert",
    }
    first, second = post(client, body), post(client, reordered)
    assert first == second
    done = wait_done(client, f"/api/analyses/{first}")
    assert done["status"] == "finished"
    again = client.post("/api/analyses", json=body).json()
    assert again == {"id": first, "status": "finished"}
    assert int(redis.get(protocol.computed_key(first))) == 1
    different = post(client, {**body, "options": {"seed": 1}})
    assert different != first


def test_50_concurrent_requests_none_lost_identical_computed_once(client, redis):
    words = short_text(40).split()
    distinct = [
        {
            "model": "tiny-bert",
            "text": " ".join(words[i : i + 20]) + f" ({i})",
            "analyses": ["max-attention"],
        }
        for i in range(10)
    ]
    bodies = [b for b in distinct for _ in range(5)]
    random.Random(0).shuffle(bodies)
    with ThreadPoolExecutor(max_workers=50) as pool:
        responses = list(pool.map(lambda b: client.post("/api/analyses", json=b), bodies))
    assert [r.status_code for r in responses] == [202] * 50
    ids = [r.json()["id"] for r in responses]
    by_text: dict[str, set[str]] = {}
    for body, job_id in zip(bodies, ids, strict=True):
        by_text.setdefault(body["text"], set()).add(job_id)
    assert all(len(s) == 1 for s in by_text.values()) and len(set(ids)) == 10
    finals = [wait_done(client, f"/api/analyses/{job_id}") for job_id in sorted(set(ids))]
    assert [f["status"] for f in finals] == ["finished"] * 10
    assert [int(redis.get(protocol.computed_key(i))) for i in sorted(set(ids))] == [1] * 10
    for f in finals:  # each result belongs to its own request
        assert f["request"]["text"].startswith(f["result"]["token_texts"][1])


def test_workers_log_one_line_per_step(client, service):
    """The worker's log (a file here) gets progress as lines, never carriage-return redraws."""
    done = run(
        client,
        {
            "model": "tiny-bert",
            "text": short_text(20),
            "analyses": ["robustness"],
            "options": {**FAST, "layer": 1, "head": 0, "repeats": 12},
        },
    )
    assert done["status"] == "finished", done["error"]
    log = service.log.read_text(errors="replace")
    lines = [
        ln
        for ln in log.splitlines()
        if "headscope.progress" in ln and f"job {done['id'][:12]}" in ln
    ]
    assert len(lines) >= 2 and "\r" not in log  # loading, the steps, the end
    assert all(len(ln) < 300 for ln in lines)
    assert "100.0%" in lines[-1]


def test_share_link_returns_view_inputs_and_result(client, service):
    done = run(
        client, {"model": "tiny-bert", "text": short_text(15), "analyses": ["max-attention"]}
    )
    view = {"page": "attention", "layer": 1, "head": 2, "rescaled": True}
    resp = client.post("/api/shares", json={"analysis_id": done["id"], "view": view})
    assert resp.status_code == 201, resp.text
    share = resp.json()
    assert len(share["id"]) >= 22 and share["url"] == f"/?share={share['id']}"  # >= 128 random bits
    opened = client.get(f"/api/shares/{share['id']}").json()
    assert opened["view"] == view and opened["kind"] == "analysis"
    assert opened["result"] == done["result"] and opened["request"] == done["request"]
    light = client.get(f"/api/shares/{share['id']}", params={"result": "none"}).json()
    assert "result" not in light and light == {k: v for k, v in opened.items() if k != "result"}
    other = client.post("/api/shares", json={"analysis_id": done["id"], "view": view}).json()
    assert other["id"] != share["id"]
    assert client.post("/api/shares", json={"view": view}).status_code == 422
    big = client.post("/api/shares", json={"analysis_id": done["id"], "view": {"x": "y" * 70_000}})
    assert big.status_code == 413
    assert service.store().read_share(share["id"])["target"] == done["id"]


def test_bad_uploads_are_refused_and_leave_nothing_behind(client, service):
    leftovers = service.leftovers
    before = leftovers()
    resp = client.post("/api/checkpoints", files={"file": ("pe.txt", b"hello", "text/plain")})
    assert resp.status_code == 415 and ".safetensors" in resp.json()["detail"]
    resp = client.post(
        "/api/checkpoints", files={"file": ("../../evil.npy", b"", "application/octet-stream")}
    )
    assert (
        resp.status_code == 422
        and "empty" in resp.json()["detail"]
        and ".." not in resp.json()["detail"]
    )
    big = b"\0" * (3 * 2**20)  # the fixture's limit is 2 MiB
    resp = client.post(
        "/api/checkpoints", files={"file": ("big.npy", big, "application/octet-stream")}
    )
    assert resp.status_code == 413 and "2,097,152" in resp.json()["detail"]
    assert leftovers() == before
