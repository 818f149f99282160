"""Corpus uploads at scale and in table formats (issue 33, docs/corpus.md "Input"), through real HTTP
to ``headscope serve`` (uvicorn, its Redis; an RQ worker in the test) on a real PostgreSQL store: a 100,000-text Parquet
corpus is accepted and read back by range; a malformed one is refused naming the row and leaves
nothing; JSON Lines and ``datasets`` directories (``save_to_disk``, packed as zip or tar.gz) are
accepted with a ``field`` and give the same content id for the same texts, and a corpus job runs over
one; a wrong field is named. Archives are unpacked safely; the limits come from settings."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from bench.synthetic_corpus import synthetic_texts, write
from fastapi.testclient import TestClient
from redis import Redis
from service_helpers import ServeProcess, wait_done

from backend.app import create_app
from backend.config import Settings
from backend.store import Store
from workers.core.errors import BadFileError
from workers.inputs.corpora import Limits, corpus_id, stage_corpus

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_model_dirs, postgres):
    """``headscope serve`` (its API and Redis; jobs run by an RQ worker in the test), its store a fresh
    PostgreSQL database (migrated first)."""
    url = postgres.new_database()
    base = tmp_path_factory.mktemp("corpus-serve")
    Store(Settings(data_dir=base / "migrate", database_url=url), migrate=True).close()
    proc = ServeProcess.for_tests(
        base,
        tiny_model_dirs,
        workers=0,
        HEADSCOPE_DATABASE_URL=url,
        HEADSCOPE_MAX_UPLOAD_BYTES=str(64 * 2**20),
    )
    proc.start()
    yield proc
    assert proc.stop() == set()


def upload(client, path: Path, **form):
    return client.post(
        "/api/corpora",
        data=form,
        files={"file": (path.name, path.read_bytes(), "application/octet-stream")},
    )


def saved_dataset(directory: Path, texts: list[str]) -> Path:
    import datasets

    ds = datasets.Dataset.from_dict(
        {"sentence": texts, "label": [i % 3 for i in range(len(texts))]}
    )
    ds.save_to_disk(str(directory))
    return directory


def test_a_100k_text_parquet_corpus_is_accepted_and_read_back_by_range(served, tmp_path):
    texts = synthetic_texts(100_000)
    path = write(tmp_path / "synthetic.parquet", texts, field="sentence")
    with served.client() as client:
        resp = upload(client, path, field="sentence")
    assert resp.status_code == 201, resp.text
    got = resp.json()
    assert got["id"] == corpus_id(texts) and got["n_texts"] == 100_000
    assert got["format"] == "parquet" and got["field"] == "sentence" and got["preview"] == texts[:5]
    store = served.store()
    try:
        assert store.corpus_length(got["id"]) == 100_000
        assert [
            t for b in store.iter_corpus_texts(got["id"], 54_321, 54_400, batch=16) for t in b
        ] == texts[54_321:54_400]
        assert [t for b in store.iter_corpus_texts(got["id"], 99_990) for t in b] == texts[99_990:]
    finally:
        store.close()


def test_a_malformed_parquet_corpus_is_refused_naming_the_row(served, tmp_path):
    texts: list[str | None] = list(synthetic_texts(100_000))
    texts[73_210] = None
    path = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"sentence": texts}), path)
    empty = [t if i not in (5, 99_999) else "  " for i, t in enumerate(synthetic_texts(100_000))]
    gaps = write(tmp_path / "gaps.parquet", empty, field="sentence")
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"PAR1 but nothing else")
    store = served.store()
    before = store.list_corpora()
    with served.client() as client:
        null = upload(client, path, field="sentence")
        assert (
            null.status_code == 422
            and "row 73210 has no value (null) in column 'sentence'" in null.json()["detail"]
        )
        gap = upload(client, gaps, field="sentence")
        assert gap.status_code == 422 and "empty text in row 5, 99999" in gap.json()["detail"]
        wrong = upload(client, gaps, field="body")
        assert (
            wrong.status_code == 422
            and "has no column 'body' (its columns: id, sentence)" in wrong.json()["detail"]
        )
        bad = upload(client, junk)
        assert bad.status_code == 422 and "not a readable Parquet file" in bad.json()["detail"]
    assert store.list_corpora() == before  # nothing of a refused corpus is kept ...
    store.close()
    assert [
        f for f in served.leftovers() if f.startswith("corpus")
    ] == []  # ... not even a spool file


def run_jobs_on(served, monkeypatch) -> None:
    """Run what the service queued with an RQ worker in this process, on the service's Redis and store."""
    from rq import SimpleWorker

    import workers.queue.reporter
    from workers.queue import keys as protocol

    store = served.store()
    monkeypatch.setattr(workers.queue.reporter, "store", lambda: store)
    conn = Redis.from_url(served.info()["redis_url"])
    SimpleWorker(
        [protocol.queue(conn, q) for q in protocol.QUEUES],
        connection=conn,
        serializer=protocol.SERIALIZER,
    ).work(burst=True)
    store.close()


def test_jsonl_and_datasets_directories_with_a_field_and_a_job_over_one(
    served, tmp_path, catalogue, monkeypatch
):
    texts = synthetic_texts(300, seed=3)
    jsonl = write(tmp_path / "rows.jsonl", texts, field="sentence")
    saved = saved_dataset(tmp_path / "ds", texts)
    zipped = Path(
        shutil.make_archive(str(tmp_path / "ds"), "zip", tmp_path, "ds")
    )  # the directory itself
    tarred = Path(shutil.make_archive(str(tmp_path / "ds"), "gztar", saved))  # or its contents
    want = corpus_id(texts)
    with served.client() as client:
        for path in (jsonl, zipped, tarred):
            resp = upload(client, path, field="sentence")
            assert resp.status_code == 201, resp.text
            assert (
                resp.json()["id"] == want and resp.json()["n_texts"] == 300
            )  # same texts, same corpus
        assert client.get(f"/api/corpora/{want}").json()["format"] == "jsonl"  # the first upload's
        wrong = upload(client, zipped, field="label")
        assert (
            wrong.status_code == 422
            and "column 'label' holds int64, not text" in wrong.json()["detail"]
        )
        missing = upload(client, jsonl, field="body")
        assert (
            missing.status_code == 422
            and "line 1 has no field 'body' (its fields: id, sentence)" in missing.json()["detail"]
        )
        job = client.post(
            "/api/corpus-analyses",
            json={"corpus": want, "model": "tiny-bert", "options": {"max_tokens": 16, "top_k": 3}},
        )
        assert job.status_code == 202, job.text
        run_jobs_on(served, monkeypatch)  # reads the corpus from PostgreSQL a window at a time
        done = wait_done(client, f"/api/corpus-analyses/{job.json()['id']}")
    assert done["status"] == "finished", done
    result = done["result"]
    assert result["n_texts"] == 300 and result["corpus"] == want
    top = result["top_pairs"][0][0][0]
    assert 0 <= top["text"] < 300 and top["tokens"][top["q_at"]] == top["query_token"]


def test_a_dataset_dict_names_its_splits_and_the_cli_reads_a_directory(tmp_path, catalogue):
    import datasets

    from backend.cli import main

    texts = synthetic_texts(40, seed=5)
    ds = datasets.Dataset.from_dict({"sentence": texts})
    datasets.DatasetDict({"train": ds, "test": ds.select(range(4))}).save_to_disk(
        str(tmp_path / "dd")
    )
    with pytest.raises(
        BadFileError, match="holds the splits train, test; give one split's directory"
    ):
        stage_corpus(tmp_path / "dd", fmt="datasets", name="dd", field="sentence")
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "corpus",
                "--model",
                "tiny-bert",
                "--file",
                str(tmp_path / "dd" / "train"),
                "--field",
                "sentence",
                "--max-tokens",
                "16",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    assert json.loads(out.read_text())["n_texts"] == 40
    assert (
        main(
            [
                "corpus",
                "--model",
                "tiny-bert",
                "--file",
                str(tmp_path / "dd" / "train"),
                "--field",
                "nope",
                "--out",
                str(tmp_path / "no.json"),
                "--quiet",
            ]
        )
        == 2
    )
    assert not (tmp_path / "no.json").exists()


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def test_archives_are_unpacked_safely(tmp_path):
    saved = saved_dataset(tmp_path / "ds", synthetic_texts(30, seed=7))
    good = {f"ds/{p.name}": p.read_bytes() for p in saved.iterdir()}
    limits = Limits(max_bytes=4 * 2**20)

    def refused(path: Path, reason: str, **kw) -> None:
        with pytest.raises(BadFileError, match=reason):
            stage_corpus(
                path,
                fmt="datasets",
                name=path.name,
                field="sentence",
                limits=kw.get("limits", limits),
                spool_dir=tmp_path,
            )

    refused(
        _zip(tmp_path / "up.zip", {**good, "../escape.arrow": b"x"}), r"points outside the archive"
    )
    refused(_zip(tmp_path / "abs.zip", {**good, "/etc/x.arrow": b"x"}), "absolute path")
    refused(
        _zip(tmp_path / "bomb.zip", {**good, "ds/more.arrow": b"\0" * (5 * 2**20)}),
        "unpacks to more than",
    )
    refused(
        _zip(tmp_path / "none.zip", {"readme.txt": b"hello"}), "no dataset saved with save_to_disk"
    )
    refused(
        _zip(
            tmp_path / "two.zip", {**good, **{k.replace("ds/", "ds2/"): v for k, v in good.items()}}
        ),
        r"several datasets \(ds/, ds2/\)",
    )
    state = json.loads(good["ds/state.json"])
    state["_data_files"] = [{"filename": "../../outside.arrow"}]
    refused(
        _zip(tmp_path / "state.zip", {**good, "ds/state.json": json.dumps(state).encode()}),
        "not a plain .arrow",
    )
    with tarfile.open(tmp_path / "link.tar.gz", "w:gz") as tf:
        for p in saved.iterdir():
            tf.add(p, arcname=f"ds/{p.name}")
        link = tarfile.TarInfo("ds/extra.arrow")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(link)
    refused(tmp_path / "link.tar.gz", "is a link or a device")
    # a pickle (or anything save_to_disk does not write) is never read: skipped, the rest accepted
    import pickle

    extra = _zip(
        tmp_path / "extra.zip", {**good, "ds/cache.pkl": pickle.dumps(object), "__MACOSX/._x": b"?"}
    )
    staged = stage_corpus(
        extra, fmt="datasets", name="extra.zip", field="sentence", limits=limits, spool_dir=tmp_path
    )
    assert staged.n_texts == 30
    staged.discard()
    assert not (tmp_path.parent / "escape.arrow").exists()
    assert (
        sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("corpus")) == []
    )  # nothing left behind


def test_the_limits_come_from_settings(redis_server, tmp_path):
    settings = Settings(
        data_dir=tmp_path / "data",
        redis_url=redis_server,
        corpus_max_texts=1000,
        corpus_max_text_chars=60,
        corpus_max_bytes=40_000,
    )
    client = TestClient(
        create_app(settings, redis=Redis.from_url(redis_server), background=False, frontend=False)
    )

    def post(texts: list[str], name: str = "c.parquet") -> tuple[int, str]:
        buf = io.BytesIO()
        pq.write_table(pa.table({"text": texts}), buf, compression="zstd")
        resp = client.post("/api/corpora", files={"file": (name, buf.getvalue(), "x")})
        return resp.status_code, resp.text

    assert post([f"text {i}" for i in range(1000)])[0] == 201
    status, text = post([f"text {i}" for i in range(1001)])
    assert status == 422 and "has more than 1,000 texts; a corpus may have at most 1,000" in text
    status, text = post(["short"] * 7 + ["x" * 61])
    assert status == 422 and "the text in row 7 is longer than 60 characters" in text
    status, text = post(
        ["the same fifty-character sentence, again and again." + str(i % 10) for i in range(900)]
    )
    assert (
        status == 422 and "its texts take more than the 40,000-byte limit" in text
    )  # the file itself is small
    big = client.post("/api/corpora", files={"file": ("big.jsonl", b'{"text": "x"}\n' * 4000, "x")})
    assert big.status_code == 413 and "40,000-byte limit" in big.json()["detail"]


def test_a_staged_corpus_is_read_by_range_from_its_spool(tmp_path):
    texts = synthetic_texts(2_345, seed=9)
    staged = stage_corpus(
        write(tmp_path / "c.txt", texts), fmt="txt", name="c.txt", spool_dir=tmp_path
    )
    assert (
        staged.id == corpus_id(texts)
        and len(staged) == 2_345
        and staged.preview == [t[:200] for t in texts[:5]]
    )
    assert [n for n, _ in staged.chunks()] == [1000, 1000, 345]
    for start, stop, batch in [(0, None, 1000), (999, 2100, 300), (2000, 2001, 7), (2344, 5000, 2)]:
        got = list(staged.batches(start, stop, batch=batch))
        assert (
            all(len(b) <= batch for b in got) and [t for b in got for t in b] == texts[start:stop]
        )
    staged.discard()
    assert not staged.spool.exists()


def test_garbage_is_refused_by_name_never_a_crash(tmp_path):
    import random

    rng = random.Random(0)
    noise = bytes(rng.randrange(256) for _ in range(4096))
    gz = io.BytesIO()
    with tarfile.open(fileobj=gz, mode="w:gz") as tf:
        info = tarfile.TarInfo("ds/data-00000-of-00001.arrow")
        info.size = len(noise)
        tf.addfile(info, io.BytesIO(noise))
        body = json.dumps({"splits": ["."]}).encode()  # a split that would be the dict itself
        info = tarfile.TarInfo("ds/dataset_dict.json")
        info.size = len(body)
        tf.addfile(info, io.BytesIO(body))
    cases = {
        "noise.zip": noise,
        "noise.tar.gz": noise,
        "noise.tar.xz": b"\xfd7zXZ\x00" + noise,
        "noise.parquet": noise,
        "PAR1.parquet": b"PAR1" + noise + b"PAR1",
        "deep.jsonl": b"[" * 100_000 + b"\n",
        "split-dot.tar.gz": gz.getvalue(),
        "cut.zip": _zip(tmp_path / "x.zip", {"ds/state.json": b"{}"}).read_bytes()[:-30],
    }
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        fmt = {
            "zip": "datasets",
            "gz": "datasets",
            "xz": "datasets",
            "parquet": "parquet",
            "jsonl": "jsonl",
        }[name.rsplit(".", 1)[1]]
        with pytest.raises(BadFileError, match=name.replace(".", r"\.")):
            stage_corpus(path, fmt=fmt, name=name, spool_dir=tmp_path)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("corpus")]
