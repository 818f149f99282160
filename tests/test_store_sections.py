"""A finished result kept in sections (workers/store/sections.py), on SQLite and PostgreSQL: read
whole it is the result written; read by section, only the small keys and the sections asked (a
gallery's layer parts by their partial keys, which ``partials.fold`` makes the section again);
results stored whole before still read; deleting a result deletes its parts."""

from __future__ import annotations

import base64
import json
import time
import zlib

import numpy as np
import pytest
from sqlalchemy import func, select

from backend.config import Settings
from backend.store import Store
from workers.core.partials import fold, split
from workers.store.schema import result_parts, results

JOB = "d" * 32


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    url = (
        f"sqlite:///{tmp_path / 'headscope.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("pg_url")
    )
    s = Store(Settings(data_dir=tmp_path / "a", database_url=url), migrate=True)
    yield s
    s.close()


def grid(n_layers: int = 4, n_heads: int = 5, n: int = 61) -> dict:
    """A gallery section as the worker writes it (attention bytes per layer not a multiple of 3)."""
    rng = np.random.default_rng(0)
    q = rng.integers(0, 255, size=(n_layers, n_heads, n, n), dtype=np.uint8)
    return {
        "layers": list(range(n_layers)),
        "heads": list(range(n_heads)),
        "kept": list(range(n)),
        "engine": "fast",
        "backend": "cpu",
        "fallback": [],
        "embedding": rng.normal(size=(n_layers, n_heads, n, 2)).round(6).tolist(),
        "kl": rng.random((n_layers, n_heads)).tolist(),
        "kl_restarts": rng.random((n_layers, n_heads, 2)).tolist(),
        "attention_u8": base64.b64encode(q.tobytes()).decode(),
        "attention_shape": [n_layers, n_heads, n, n],
        "attention_scale": 255,
        "timings": {"tsne_s": 1.5},
    }


def result() -> dict:
    return {
        "model": "tiny",
        "n_layers": 4,
        "tokens": ["a", "b"],
        "max-attention": {"values": [[i / 7 for i in range(100)] for _ in range(200)]},
        "head-tsne-all": grid(),
        "timings": {"total_s": 2.0},
    }


def test_a_result_reads_whole_or_by_section_and_its_layer_parts_fold_to_its_gallery(store):
    whole = result()
    raw = json.dumps(whole)
    assert store.write_result(JOB, kind="analysis", request={"t": 1}, result_raw=raw)
    meta, got = store.read_result(JOB)
    assert json.loads(got) == whole and meta["request"] == {"t": 1}
    layer_keys = [f"head-tsne-all@L{i}" for i in range(4)]
    assert meta["sections"] == sorted(["max-attention", "head-tsne-all", *layer_keys])

    meta, small = store.read_result(JOB, sections=[])
    assert json.loads(small) == {k: whole[k] for k in ("model", "n_layers", "tokens", "timings")}
    assert meta["sections"] == sorted(["max-attention", "head-tsne-all", *layer_keys])
    assert len(small) < 200

    _, some = store.read_result(JOB, sections=["head-tsne-all@L1", "head-tsne-all@L2", "nope"])
    some = json.loads(some)
    assert set(some) == {"model", "n_layers", "tokens", "timings", *layer_keys[1:3]}

    _, parts = store.read_result(JOB, sections=layer_keys)
    folded = fold({k: v for k, v in json.loads(parts).items() if "@L" in k})["head-tsne-all"]
    assert folded.pop("partial") == {"layers_done": 4, "layers": [0, 1, 2, 3]}
    section = whole["head-tsne-all"]
    own = {"backend", "fallback", "timings"}  # the section's, not any layer's
    assert folded == {k: v for k, v in section.items() if k not in own}
    assert split(section)[0] == {
        k: v
        for k, v in section.items()
        if k not in ("embedding", "kl", "kl_restarts", "attention_u8")
    }

    _, one = store.read_result(JOB, sections=["head-tsne-all", "max-attention"])
    assert json.loads(one) == whole  # the whole gallery spliced from its layers' text

    with store.engine.connect() as conn:
        body = zlib.decompress(conn.execute(select(results.c.body)).scalar_one())
        n_parts = conn.execute(select(func.count()).select_from(result_parts)).scalar_one()
    assert len(body) < 200 and n_parts == 6  # the small keys in the body; 2 sections + 4 layers
    assert {i["id"]: i["bytes"] for i in store.stored_items()}[JOB] > len(raw) / 20
    store.delete_result(JOB)
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(result_parts)).scalar_one() == 0


def test_a_result_stored_whole_before_still_reads_and_a_small_one_stays_whole(store):
    raw = json.dumps(result())
    with store.engine.begin() as conn:  # as stored before sections (one body)
        conn.execute(
            results.insert().values(
                id=JOB, kind="analysis", request="{}", body=zlib.compress(raw.encode()),
                encoding="zlib", size=len(raw), created_at=time.time(),
                expires_at=time.time() - 1,
            )
        )  # fmt: skip
    assert store.read_result(JOB) == (
        {"id": JOB, "kind": "analysis", "request": {}, "finished_at": pytest.approx(time.time(), abs=60), "sections": None},
        raw,
    )  # fmt: skip
    assert store.read_result(JOB, sections=[])[1] == raw  # all of it: it has no sections
    small = '{"x": [1, 2], "y": "z"}'
    store.write_result("e" * 32, kind="analysis", request={}, result_raw=small, expires_at=0)
    assert store.read_result("e" * 32, sections=["x"])[1] == small
    assert sorted(store.sweep()) == [JOB, "e" * 32]


def test_the_api_sends_the_sections_asked_for_and_names_them_all(redis_server, tmp_path):
    """``GET /api/analyses/{id}?sections=`` and ``GET /api/shares/{id}?sections=`` (docs/api.md)."""
    from fastapi.testclient import TestClient
    from redis import Redis

    from backend.app import create_app

    settings = Settings(data_dir=tmp_path / "api", redis_url=redis_server, rate_limit_writes=0)
    app = create_app(settings, redis=Redis.from_url(redis_server), background=False, frontend=False)
    whole = result()
    with TestClient(app) as c:
        store = app.state.store
        store.write_result(JOB, kind="analysis", request={"t": 1}, result_raw=json.dumps(whole))
        names = sorted(
            ["max-attention", "head-tsne-all", *(f"head-tsne-all@L{i}" for i in range(4))]
        )
        full = c.get(f"/api/analyses/{JOB}").json()
        assert (
            full["status"] == "finished"
            and full["result"] == whole
            and full.get("sections") is None
        )
        some = c.get(f"/api/analyses/{JOB}", params={"sections": "head-tsne-all@L2,nope"}).json()
        assert some["sections"] == names and some["request"] == {"t": 1}
        assert set(some["result"]) == {"model", "n_layers", "tokens", "timings", "head-tsne-all@L2"}
        assert (
            some["result"]["head-tsne-all@L2"]["embedding"]
            == whole["head-tsne-all"]["embedding"][2]
        )
        small = c.get(f"/api/analyses/{JOB}", params={"sections": ""}).json()
        assert set(small["result"]) == {"model", "n_layers", "tokens", "timings"}
        share = store.create_share(kind="analysis", target=JOB, view={})
        shared = c.get(f"/api/shares/{share['id']}", params={"sections": "max-attention"}).json()
        assert (
            shared["sections"] == names
            and shared["result"]["max-attention"] == whole["max-attention"]
        )
        assert "head-tsne-all" not in shared["result"]
        assert c.get(f"/api/shares/{share['id']}").json()["result"] == whole


def test_a_cold_page_server_reads_only_what_the_picture_and_the_gallery_page_draw(
    redis_server, tmp_path
):
    """A page server that never held the result: the first row's picture reads the small keys and
    that row's layer parts, the gallery its page's layers, a section when it is read; the poll's
    ``sections_of`` reads nothing more; a download is the whole result (frontend/kit/sections.py)."""
    from fastapi.testclient import TestClient
    from redis import Redis

    from backend.app import create_app
    from frontend.figures.gallery import gallery_page
    from frontend.kit.api_client import ApiClient
    from frontend.kit.data import ResultStore, sections_of
    from frontend.kit.sections import StoredResult, gallery_page_section
    from frontend.pages.text.preview import first_row_svg, stored_preview

    settings = Settings(data_dir=tmp_path / "api", redis_url=redis_server, rate_limit_writes=0)
    app = create_app(settings, redis=Redis.from_url(redis_server), background=False, frontend=False)
    whole = result()
    whole["head-tsne-all"] = grid(n_layers=6, n_heads=12, n=30)  # one layer a row, 6 a page
    reads: list[tuple[str, int]] = []

    with TestClient(app) as c:

        class Client(ApiClient):
            def _request(self, method, path, **kw):  # type: ignore[no-untyped-def]
                r = c.request(method, path, **kw)
                reads.append(
                    (
                        str(
                            r.url.query.decode() if isinstance(r.url.query, bytes) else r.url.query
                        ),
                        len(r.content),
                    )
                )
                return r.json()

        app.state.store.write_result(
            JOB, kind="analysis", request={"t": 1}, result_raw=json.dumps(whole)
        )
        share = app.state.store.create_share(kind="analysis", target=JOB, view={"page": "text"})
        store = ResultStore(Client("http://api"))
        svg = stored_preview(store, {"analysis": JOB})
        assert svg is not None and svg == first_row_svg(whole)  # the same picture as from all of it
        asked = [q for q, _ in reads]
        assert "head-tsne-all%40L0" in asked[-1] and not any("max-attention" in q for q in asked)
        assert sum(n for _, n in reads) < len(json.dumps(whole)) / 4, reads
        st = store.status({"kind": "analysis", "id": JOB})
        res = st["result"]
        assert isinstance(res, StoredResult) and not res.loaded("head-tsne-all")
        assert sections_of(st) == [
            "head-tsne-all",
            "max-attention",
            "timings",
            "tokens",
        ] and not res.loaded("max-attention")
        n_reads = len(reads)
        sec = gallery_page_section(res, None, 0)
        assert sec is not None and sec["layers"] == [0, 1, 2, 3, 4, 5][: len(sec["layers"])]
        assert len(reads) <= n_reads + 1 and not res.loaded("head-tsne-all")
        gp = gallery_page(res, section=sec)
        assert gp.complete and gp.done == gp.shown  # finished: not drawn as filling in
        assert res["max-attention"] == whole["max-attention"] and res.loaded("max-attention")
        assert res.get("head-tsne-all") == whole["head-tsne-all"]
        assert store.stored_result({"kind": "analysis", "id": JOB}) == whole
        assert json.loads(json.dumps(res)) == whole
        reads.clear()
        cold = ResultStore(Client("http://api"))  # a share's link, on another new server
        assert stored_preview(cold, {"share": share["id"]}) == svg
        assert sum(n for _, n in reads) < len(json.dumps(whole)) / 4, reads


def test_a_stored_result_reads_each_section_once_and_two_side_by_side():
    """``StoredResult``: callbacks asking for one section at once share one read; two different
    sections are read side by side (neither waits for the other's download); a failed read gives
    None and is tried again by the next reader."""
    import threading

    from frontend.kit.api_client import ApiError
    from frontend.kit.sections import StoredResult

    calls: list[list[str]] = []
    inside = threading.Barrier(2, timeout=5)  # both sections' reads are in flight together
    fail = [True]

    def load(names: list[str]) -> dict:
        calls.append(list(names))
        if names == ["c"] and fail[0]:
            fail[0] = False
            raise ApiError("the service restarted", status=503)
        if names != ["c"]:
            inside.wait()
        return {n: {"name": n} for n in names}

    res = StoredResult({"tokens": ["x"]}, ["a", "b", "c", "g@L0"], load)
    assert list(res) == ["tokens", "a", "b", "c"] and len(res) == 4 and "g@L0" not in res
    threads = [threading.Thread(target=res.get, args=(k,)) for k in "aaabbb"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(calls) == [["a"], ["b"]] and res["a"] == {"name": "a"} and res.loaded("b")
    assert res.get("c") is None and not res.loaded("c")  # failed: None, not kept
    assert res["c"] == {"name": "c"} and calls[-1] == ["c"]  # read again
    assert res.get("nope", 1) == 1 and dict(res) == {
        "tokens": ["x"],
        **{k: {"name": k} for k in "abc"},
    }
    calls.clear()  # read ahead: once per result, in order, what is held not read again
    ahead = StoredResult({}, ["a", "b"], lambda n: calls.append(n) or {k: k for k in n})  # type: ignore[func-returns-value]
    assert ahead["b"] == "b"
    started = ahead.read_ahead([["a"], ["b"], ["nope"]])
    assert started is not None and ahead.read_ahead([["a"]]) is None
    started.join(5)
    assert calls == [["b"], ["a"]] and ahead.loaded("a")


def test_the_text_page_reads_a_stored_results_late_sections_ahead_once_its_gallery_is_answered(
    redis_server, tmp_path
):
    """A reopened link on a new page server: the gallery's answer reads its page's layers; then the
    sections the page draws next (max-attention first, then every head's gallery) are read in a
    thread, each once, and the heatmaps' callback that follows reads nothing (docs/dashboard.md,
    "A stored result read ahead")."""
    import threading

    from fastapi.testclient import TestClient
    from redis import Redis

    from backend.app import create_app
    from frontend.app import create_dash_app
    from frontend.kit.api_client import ApiClient

    settings = Settings(data_dir=tmp_path / "api", redis_url=redis_server, rate_limit_writes=0)
    app = create_app(settings, redis=Redis.from_url(redis_server), background=False, frontend=False)
    whole = result()
    whole["head-tsne-all"] = grid(n_layers=6, n_heads=12, n=30)
    rng = np.random.default_rng(1)  # the heatmaps' values, beside a section's worth of others
    whole["max-attention"]["max_attention"] = rng.random((6, 12, 2)).round(3).tolist()
    reads: list[str] = []

    def post(dash: object, output: str, inputs: list, state: list) -> dict:
        out = dash.server.test_client().post(  # type: ignore[attr-defined]
            "/_dash-update-component",
            json={"output": output, "inputs": inputs, "state": state, "outputs": [
                      dict(zip(("id", "property"), o.split("."), strict=True))
                      for o in output.strip(".").split("...")],
                  "changedPropIds": [f"{inputs[0]['id']}.{inputs[0]['property']}"]},
        )  # fmt: skip
        assert out.status_code == 200, out.data[-500:]
        return out.get_json()

    def value(id_: str, prop: str, v: object) -> dict:
        return {"id": id_, "property": prop, "value": v}

    with TestClient(app) as c:

        class Client(ApiClient):
            def _request(self, method, path, **kw):  # type: ignore[no-untyped-def]
                r = c.request(method, path, **kw)
                if (kw.get("params") or {}).get("sections"):  # a section read
                    reads.append(kw["params"]["sections"])
                return r.json()

        app.state.store.write_result(
            JOB, kind="analysis", request={"t": 1}, result_raw=json.dumps(whole)
        )
        dash = create_dash_app("http://api", client=Client("http://api"))
        source = {"kind": "analysis", "id": JOB}
        post(
            dash,
            "..head-gallery.figure...text-gallery-page.options...text-gallery-page.value"
            "...text-gallery-key.data..",
            [value("text-gallery-tick", "data", 1)],
            [value("text-layers", "value", None), value("text-gallery-page", "value", 0),
             value("text-source", "data", source), value("text-gallery-key", "data", None),
             value("text-job", "data", None)],
        )  # fmt: skip
        for t in [t for t in threading.enumerate() if t.name == "read-ahead"]:
            t.join(30)
        assert reads[0] == "head-tsne-all@L0" and reads[-2:] == ["max-attention", "head-tsne-all"]
        assert len(reads) == len(set(reads)), reads  # each once
        n_reads = len(reads)
        drawn = post(
            dash,
            "..max-attention-graph.figure...text-heatmap-key.data..",
            [value("text-job-late", "data", [{"id": JOB, "status": "finished"}]), value("text-reduction", "value", "max"),
             value("text-layers", "value", None)],
            [value("text-source", "data", source), value("text-heatmap-key", "data", None)],
        )  # fmt: skip
        assert drawn["response"]["max-attention-graph"]["figure"]["data"]  # the heatmaps drawn
        assert len(reads) == n_reads  # read already: no second download
