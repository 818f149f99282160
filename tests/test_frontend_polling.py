"""The dashboard's polling of a running job through the real server: each partial section is downloaded once.

The job is made running by hand in the service's Redis (an RQ job in the started state, its request and
its partial result, as ``workers.queue.reporter.Reporter`` writes them): the test decides when each
section arrives, on any machine. The dashboard's ``ResultStore`` talks to ``headscope serve`` over HTTP through
a transport that keeps every response body, as its callbacks do on every poll.
"""

from __future__ import annotations

import base64
import json
import os
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from held_jobs import finish_running_job, remove_running_job, start_running_job
from redis import Redis

from frontend.kit.api_client import ApiClient
from frontend.kit.data import ResultStore
from workers.core.jsonable import dumps
from workers.queue import keys as protocol

pytestmark = pytest.mark.slow

CALLBACKS = (
    5  # the poll and the text explorer's callbacks that read the result when a section arrives
)


class Recording(httpx.BaseTransport):
    """Real HTTP to the server; keeps (query, body) of every response."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.seen: list[tuple[str, bytes]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        body = response.read()
        response.close()
        self.seen.append((request.url.query.decode(), body))
        headers = [(k, v) for k, v in response.headers.items() if k.lower() != "content-encoding"]
        return httpx.Response(response.status_code, headers=headers, content=body, request=request)


@pytest.fixture
def redis(service) -> Redis:
    return Redis.from_url(service.info()["redis_url"])


def start_job(redis: Redis, request: dict) -> str:
    return start_running_job(redis, request, message="head t-SNE")


def publish(redis: Redis, job_id: str, fields: dict) -> None:
    """What ``Reporter.partial`` writes when sections finish."""
    redis.hset(protocol.partial_key(job_id), mapping={k: dumps(v) for k, v in fields.items()})


def poll(store: ResultStore, source: dict) -> list[dict]:
    """The callbacks that read the job when a section arrives, at once (each in its own thread)."""
    with ThreadPoolExecutor(CALLBACKS) as pool:
        return list(pool.map(lambda _: store.status(source), range(CALLBACKS)))


def test_a_running_jobs_large_section_is_downloaded_once(service, redis):
    request = {
        "model": "minilm",
        "text": "a running job",
        "analyses": ["max-attention", "head-tsne", "hidden-tsne"],
        "options": {"all_heads": True},
    }
    job_id = start_job(redis, request)
    blob = base64.b64encode(os.urandom(3 * 2**19)).decode()  # 2 MiB of base64, as attention_u8 is
    common = {"tokens": ["[CLS]", "a", "[SEP]"], "n_tokens": 3, "n_layers": 2, "n_heads": 2}
    stages = [
        {**common, "max-attention": {"max_attention": [[[0.5, 0.25, 0.25]] * 2] * 2}},
        {
            "head-tsne-all": {
                "layers": [0, 1],
                "heads": [0, 1],
                "attention_u8": blob,
                "attention_shape": [2, 2, 3, 3],
            }
        },
        {"hidden-tsne": {"layers": [0, 1, 2], "embedding": [[[0.0, 1.0]] * 3] * 3}},
    ]
    transport = Recording()
    store = ResultStore(ApiClient(service.url, transport=transport))
    source = {"kind": "analysis", "id": job_id}
    try:
        assert {s["status"] for s in poll(store, source)} == {"running"}
        expected: dict = {}
        for fields in stages:
            publish(redis, job_id, fields)
            expected.update(fields)
            for _ in range(3):  # the next polls: nothing new
                statuses = poll(store, source)
                assert all(s["status"] == "running" and s["result"] == expected for s in statuses)

        with_blob = [query for query, body in transport.seen if blob.encode() in body]
        assert len(with_blob) == 1, f"attention_u8 downloaded {len(with_blob)} times: {with_blob}"
        sent = sum(len(body) for _, body in transport.seen)
        assert sent < 1.5 * len(blob), f"{sent} bytes for a {len(blob)}-byte partial result"

        # the API itself: the names of the keys without their values, or only the keys asked for
        with service.client() as c:
            names = c.get(f"/api/analyses/{job_id}", params={"partial": "none"}).json()
            assert names["partial"] == {} and set(names["partial_keys"]) == set(expected)
            some = c.get(f"/api/analyses/{job_id}", params={"partial": "hidden-tsne,tokens"}).json()
            assert some["partial"] == {k: expected[k] for k in ("hidden-tsne", "tokens")}
            assert (
                c.get(f"/api/analyses/{job_id}").json()["partial"] == expected
            )  # the default: all

        # finished: the result once, then no request at all
        finish_running_job(redis, job_id, {**expected, "timings": {}})
        done = poll(store, source)
        assert all(
            s["status"] == "finished" and s["result"]["head-tsne-all"]["attention_u8"] == blob
            for s in done
        )
        before = len(transport.seen)
        assert store.status(source)["status"] == "finished" and len(transport.seen) == before
    finally:
        remove_running_job(redis, job_id)


def test_a_job_followed_to_its_end_is_not_read_again_whole(service, redis):
    """The text explorer's job read section by section (the gallery layer by layer) finishes without
    its result being downloaded: the page puts it together from what it read (``finished_from_parts``);
    a download (Download JSON) still gets the stored result."""
    import numpy as np

    from workers.core.packing import encode_packed
    from workers.core.partials import part_fields, part_key

    request = {
        "model": "minilm",
        "text": "a followed job",
        "analyses": ["max-attention", "head-tsne", "hidden-tsne"],
        "options": {"all_heads": True, "layer": 0, "head": 0},
    }
    job_id = start_job(redis, request)
    rng = np.random.default_rng(0)
    layers, heads, n = [0, 1], [0, 1, 2], 40
    q = rng.integers(
        0, 256, size=(2, 3, n, n), dtype=np.uint8
    )  # 3 heads: whole base64 groups per layer
    parts = {part_key("head-tsne-all", la): part_fields(
        layer=la, layers=layers, heads=heads, kept=list(range(n)), embedding=rng.normal(size=(3, n, 2)),
        kl=rng.random(3), kl_restarts=rng.random((3, 1)), engine="fast", attention=encode_packed(q[la : la + 1]))
        for la in layers}  # fmt: skip
    whole = {
        "layers": layers,
        "heads": heads,
        "kept": list(range(n)),
        "engine": "fast",
        "embedding": [parts[part_key("head-tsne-all", la)]["embedding"] for la in layers],
        "kl": [parts[part_key("head-tsne-all", la)]["kl"] for la in layers],
        "kl_restarts": [parts[part_key("head-tsne-all", la)]["kl_restarts"] for la in layers],
        **encode_packed(q),
        "timings": {"tsne_s": 1.0},
    }
    common = {"tokens": ["a"] * n, "n_tokens": n, "n_layers": 2, "n_heads": 3}
    stages = [
        {**common, "max-attention": {"max_attention": rng.random((2, 3, n)).tolist()}},
        {
            "head-tsne": {
                "layers": [0],
                "heads": [0],
                "embedding": rng.normal(size=(n, 2)).tolist(),
                "kl": 0.5,
            }
        },
        *({k: v} for k, v in parts.items()),
        {"head-tsne-all": whole},
        {"hidden-tsne": {"layers": [0, 1, 2], "embedding": rng.normal(size=(3, n, 2)).tolist()}},
    ]
    transport = Recording()
    store = ResultStore(ApiClient(service.url, transport=transport))
    source = {"kind": "analysis", "id": job_id}
    try:
        for fields in stages:
            publish(redis, job_id, fields)
            poll(store, source)
        stored = {
            k: v
            for fields in stages
            for k, v in fields.items()
            if not k.startswith("head-tsne-all@")
        }
        stored["timings"] = {"forward_s": 0.1}
        finish_running_job(redis, job_id, stored)
        seen = len(transport.seen)
        done = poll(store, source)
        assert all(s["status"] == "finished" for s in done)
        blob = whole["attention_u8"].encode()
        across = blob[
            len(blob) // 2 - 100 : len(blob) // 2 + 100
        ]  # spans both layers: only in the whole section
        assert not [q for q, body in transport.seen if across in body], "the gallery was read whole"
        assert not [q for q, body in transport.seen[seen:] if b'"tokens"' in body], (
            "the result was read at the end"
        )
        got = done[0]["result"]
        assert set(got) == set(stored) - {"timings"}
        for key in ("max-attention", "head-tsne", "hidden-tsne", "tokens"):
            assert got[key] == json.loads(dumps(stored[key])), key
        for field in (
            "layers",
            "heads",
            "kept",
            "embedding",
            "kl",
            "kl_restarts",
            "attention_u8",
            "attention_shape",
        ):
            assert got["head-tsne-all"][field] == json.loads(dumps(whole[field])), field
        assert "partial" not in got["head-tsne-all"]  # finished: not marked as filling in
        assert store.stored_result(source) == json.loads(
            dumps(stored)
        )  # a download: the stored one
        with service.client() as c:  # the API's ?result=none: the status alone, even when finished
            light = c.get(
                f"/api/analyses/{job_id}", params={"result": "none", "partial": "none"}
            ).json()
            assert light["status"] == "finished" and light["result"] is None
            assert c.get(f"/api/analyses/{job_id}", params={"result": "some"}).status_code == 422
    finally:
        remove_running_job(redis, job_id)


def test_callbacks_set_off_by_a_poll_read_what_the_poll_read(service, redis):
    """A callback that a poll's change set off (``status(seen=...)``, what the poll saw of its jobs) gets
    the status the poll has just read, with no request of its own; one whose poll saw more asks."""
    from frontend.kit.data import sections_of, seen_job

    request = {
        "model": "minilm",
        "text": "a job read by its poll",
        "options": {"all_heads": True},
        "analyses": ["max-attention", "head-tsne", "hidden-tsne"],
    }
    job_id = start_job(redis, request)
    transport = Recording()
    store = ResultStore(ApiClient(service.url, transport=transport))
    source = {"kind": "analysis", "id": job_id}
    common = {"tokens": ["[CLS]", "a", "[SEP]"], "n_tokens": 3, "n_layers": 2, "n_heads": 2}
    try:
        publish(
            redis,
            job_id,
            {**common, "max-attention": {"max_attention": [[[0.5, 0.25, 0.25]] * 2] * 2}},
        )
        polled = store.status(source)  # the poll
        jobs = [{"id": job_id, "status": polled["status"], "sections": sections_of(polled)}]
        assert seen_job(jobs, source) == jobs[0] and seen_job(jobs, {"id": "other"}) is None
        asked = len(transport.seen)
        publish(
            redis,
            job_id,
            {"hidden-tsne": {"layers": [0, 1, 2], "embedding": [[[0.0, 1.0]] * 3] * 3}},
        )
        for _ in range(
            CALLBACKS
        ):  # the heatmaps, the gallery, ...: what the poll saw, as it saw it
            st = store.status(source, seen=jobs)
            assert st["result"] == polled["result"] and "hidden-tsne" not in st["result"]
        assert len(transport.seen) == asked
        newer = [
            {**jobs[0], "sections": [*jobs[0]["sections"], "hidden-tsne"]}
        ]  # the next poll saw more
        assert "hidden-tsne" in store.status(source, seen=newer)["result"]
        assert len(transport.seen) > asked
        assert (
            "hidden-tsne" in store.status(source)["result"]
        )  # a call without ``seen`` always asks
    finally:
        remove_running_job(redis, job_id)
