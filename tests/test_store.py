"""The store's contract, run against SQLite and a real PostgreSQL server (tests/pg_server.py).

Results round-trip compressed and the first write of an id wins; share ids carry >= 128 random
bits; "create if absent" is decided by unique keys under concurrency; a writer killed before its
commit leaves nothing; checkpoints are invisible until committed and their bytes reach a process
with a different data dir; migrations are idempotent; an un-migrated PostgreSQL is refused.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import select

from backend.config import Settings
from backend.store import SchemaOutOfDate, Store
from workers.store import migrate
from workers.store.schema import checkpoint_chunks, results

ROOT = Path(__file__).resolve().parents[1]
JOB = "a" * 32


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'shared' / 'headscope.db'}"
    return request.getfixturevalue("pg_url")


def open_store(url: str, data_dir: Path, **kw) -> Store:
    store = Store(Settings(data_dir=data_dir, database_url=url, **kw), migrate=True)
    return store


@pytest.fixture
def store(db_url, tmp_path):
    s = open_store(db_url, tmp_path / "a")
    yield s
    s.close()


def test_results_round_trip_compressed_and_the_first_write_wins(store):
    raw = json.dumps({"values": [[i * 0.5 for i in range(200)] for _ in range(50)]})
    assert store.write_result(JOB, kind="analysis", request={"text": "x"}, result_raw=raw) is True
    assert (
        store.write_result(JOB, kind="analysis", request={"text": "x"}, result_raw='{"other":1}')
        is False
    )
    meta, got = store.read_result(JOB)
    assert got == raw and meta["kind"] == "analysis" and meta["request"] == {"text": "x"}
    assert abs(meta["finished_at"] - time.time()) < 60
    with store.engine.connect() as conn:
        body = conn.execute(select(results.c.body)).scalar_one()
    assert len(body) < len(raw) / 3  # stored compressed
    assert (
        body[1] >> 6 == 0
    )  # zlib's header: the fastest level (1), not the default (6, 0.6 CPU s more at 12 MB)
    assert store.has_result(JOB) and not store.has_result("b" * 32)
    assert store.read_result("b" * 32) is None
    with pytest.raises(ValueError):
        store.read_result("../../etc/passwd")


def test_share_ids_are_unguessable_and_unknown_ones_are_none(store):
    store.write_result(JOB, kind="analysis", request={}, result_raw="{}")
    ids = {
        store.create_share(kind="analysis", target=JOB, view={"layer": i})["id"] for i in range(50)
    }
    assert len(ids) == 50
    for share_id in ids:
        assert len(base64.urlsafe_b64decode(share_id + "=" * (-len(share_id) % 4))) * 8 >= 128
    one = sorted(ids)[0]
    assert store.read_share(one)["target"] == JOB
    assert store.read_share("A" * 32) is None and store.read_share("../../etc/passwd") is None
    gone = store.create_share(kind="analysis", target=JOB, view={}, expires_at=time.time() - 1)
    assert store.read_share(gone["id"]) is None  # expired (quotas): as if unknown


def test_sweep_expires_unshared_results_and_keeps_shared_ones(store):
    old_shared, old_alone, fresh = "a" * 32, "b" * 32, "c" * 32
    past = time.time() - 1
    store.write_result(
        old_shared, kind="analysis", request={"t": 1}, result_raw='{"x": 1}', expires_at=past
    )
    store.write_result(
        old_alone, kind="analysis", request={"t": 2}, result_raw='{"x": 2}', expires_at=past
    )
    store.write_result(fresh, kind="analysis", request={"t": 3}, result_raw='{"x": 3}')
    store.create_share(kind="analysis", target=old_shared, view={})
    assert store.sweep() == [old_alone]
    assert store.read_result(old_alone) is None
    assert store.read_result(old_shared)[1] == '{"x": 1}' and store.read_result(fresh) is not None
    assert store.shared_targets() == {old_shared}


def test_owner_usage_counts_what_an_owner_holds(store):
    store.write_result(JOB, kind="analysis", request={}, result_raw='{"x": 12345}', owner="alice")
    store.write_result("b" * 32, kind="analysis", request={}, result_raw="{}", owner="bob")
    store.create_share(kind="analysis", target=JOB, view={}, owner="alice")
    upload = store.new_upload_path()
    upload.write_bytes(b"0123456789")
    store.stage_checkpoint("ck-" + "5" * 32, upload, ext=".npy", owner="alice")
    assert store.usage("alice") == {
        "results": 1,
        "result_bytes": 12,
        "shares": 1,
        "checkpoints": 1,
        "checkpoint_bytes": 10,
    }
    assert store.usage("carol")["results"] == 0


def test_unique_keys_decide_concurrent_creates(store):
    with ThreadPoolExecutor(max_workers=8) as pool:
        wrote = list(
            pool.map(
                lambda i: store.write_result(
                    JOB, kind="analysis", request={}, result_raw=f'{{"n":{i}}}'
                ),
                range(16),
            )
        )
        fresh = list(
            pool.map(
                lambda i: store.record_request(JOB, kind="analysis", request={"t": 1}), range(16)
            )
        )
    assert wrote.count(True) == 1 and fresh.count(True) == 1
    assert store.fingerprint(JOB)["submissions"] == 16
    assert store.fingerprint("b" * 32) is None


@pytest.mark.parametrize("blob_dir", [False, True], ids=["bytes-in-db", "blob-dir"])
def test_checkpoints_are_staged_committed_and_read_from_another_data_dir(
    db_url, tmp_path, blob_dir
):
    extra = {"blob_dir": tmp_path / "blobs"} if blob_dir else {}
    a, b = open_store(db_url, tmp_path / "a", **extra), open_store(db_url, tmp_path / "b", **extra)
    payload = os.urandom(9 * 2**20 + 17)  # three chunks
    ck = "ck-" + "1" * 32
    upload = a.new_upload_path()
    upload.write_bytes(payload)
    a.stage_checkpoint(ck, upload, ext=".npy", filename="pe.npy")
    assert not upload.exists()
    assert a.checkpoint(ck) is None and a.list_checkpoints() == []  # staged: not listed yet
    path, name = b.checkpoint_file(ck)  # the other replica (or a worker) reads the bytes
    assert (
        name == "pe.npy"
        and path.read_bytes() == payload
        and not path.is_relative_to(tmp_path / "a")
    )
    meta = {"id": ck, "filename": "pe.npy", "size": len(payload), "uploaded_at": time.time()}
    a.commit_checkpoint(ck, meta)
    assert b.checkpoint(ck) == meta and b.list_checkpoints() == [meta]
    b.discard_checkpoint(ck)  # committed: kept
    assert a.checkpoint(ck) == meta
    rejected = "ck-" + "2" * 32
    upload = a.new_upload_path()
    upload.write_bytes(b"not a checkpoint")
    a.stage_checkpoint(rejected, upload, ext=".pt")
    a.discard_checkpoint(rejected)
    assert b.checkpoint_file(rejected) is None
    with a.engine.connect() as conn:
        left = conn.execute(select(checkpoint_chunks.c.checkpoint_id).distinct()).scalars().all()
    assert left == ([] if blob_dir else [ck])
    if blob_dir:
        assert sorted(p.name for p in (tmp_path / "blobs").iterdir()) == [f"{ck}.npy"]
    a.close()
    b.close()


KILLED_WRITER = """
import os, sys, time
sys.path.insert(0, {root!r})
from sqlalchemy import event
from backend.config import Settings
from backend.store import Store
store = Store(Settings(data_dir={data!r}, database_url={url!r}))

def hold(conn):
    open({marker!r}, "w").close()
    time.sleep(600)  # killed here: the row is written, the commit never happens

event.listen(store.engine, "commit", hold)
store.write_result({job!r}, kind="analysis", request={{}}, result_raw='{{"half": true}}')
"""


def test_a_writer_killed_before_its_commit_leaves_no_result(db_url, tmp_path):
    store = open_store(db_url, tmp_path / "a")
    marker = tmp_path / "written"
    code = KILLED_WRITER.format(
        root=str(ROOT), data=str(tmp_path / "w"), url=db_url, marker=str(marker), job=JOB
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, (
                "the writer never reached its commit"
            )
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert store.read_result(JOB) is None and not store.has_result(JOB)
    assert (
        store.write_result(JOB, kind="analysis", request={}, result_raw='{"whole": true}') is True
    )
    assert store.read_result(JOB)[1] == '{"whole": true}'
    store.close()


def test_migrations_are_idempotent_and_head_matches_the_scripts(db_url, tmp_path):
    assert migrate.script_head() == migrate.HEAD
    store = Store(Settings(data_dir=tmp_path, database_url=db_url), migrate=False)
    assert store.migrate() == (None, migrate.HEAD)
    assert store.migrate() == (migrate.HEAD, migrate.HEAD)
    store.prepare()
    store.close()


def test_an_unmigrated_postgresql_is_refused_naming_the_command(pg_url, tmp_path):
    store = Store(
        Settings(data_dir=tmp_path, database_url=pg_url)
    )  # PostgreSQL: never migrated implicitly
    with pytest.raises(SchemaOutOfDate, match="headscope migrate"):
        store.prepare()
    store.close()


def _file_store(root: Path) -> dict:
    """A data dir as the file store (before the database) left it, with a few broken pieces."""
    import numpy as np

    job, job2 = "d" * 32, "e" * 32
    (root / "results").mkdir(parents=True)
    (root / "results" / f"{job}.result.json").write_text(
        '{"max-attention": {"values": [[0.5, 0.25]]}}'
    )
    (root / "results" / f"{job}.meta.json").write_text(
        json.dumps(
            {"id": job, "kind": "analysis", "request": {"text": "old"}, "finished_at": 1.7e9}
        )
    )
    (root / "results" / f"{job2}.result.json").write_text('{"torn": ')  # never committed: no meta
    (root / "shares").mkdir()
    share = {
        "id": "S" * 32,
        "kind": "analysis",
        "target": job,
        "view": {"layer": 2},
        "created_at": 1.7e9,
    }
    (root / "shares" / f"{share['id']}.json").write_text(json.dumps(share))
    (root / "shares" / "broken.json").write_text("{not json")
    ck = "ck-" + "3" * 32
    (root / "checkpoints" / ck).mkdir(parents=True)
    np.save(root / "checkpoints" / ck / "blob.npy", np.arange(12.0).reshape(3, 4))
    ck_meta = {"id": ck, "filename": "pe.npy", "size": 224, "candidates": [], "uploaded_at": 1.7e9}
    (root / "checkpoints" / ck / "meta.json").write_text(json.dumps(ck_meta))
    (root / "checkpoints" / ("ck-" + "4" * 32)).mkdir()  # an upload never committed
    return {"job": job, "share": share, "ck": ck, "ck_meta": ck_meta}


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_migrate_imports_a_file_store_idempotently_and_loses_nothing(
    db_url, tmp_path, monkeypatch, capsys
):
    from backend.cli import main
    from backend.config import get_settings

    old = tmp_path / "old-data"
    made = _file_store(old)
    before = _tree(old)
    monkeypatch.setenv("HEADSCOPE_DATA_DIR", str(tmp_path / "new-data"))
    monkeypatch.setenv("HEADSCOPE_DATABASE_URL", db_url)
    get_settings.cache_clear()
    try:
        assert main(["migrate", "--import-files", str(old)]) == 1  # the broken share is reported
        out, err = capsys.readouterr()
        assert (
            "results: 1 imported" in out
            and "shares: 1 imported" in out
            and "checkpoints: 1 imported" in out
        )
        assert "broken.json" in err
        assert main(["migrate", "--import-files", str(old)]) == 1
        out, _ = capsys.readouterr()
        assert (
            "results: 0 imported, 1 already present" in out
            and "shares: 0 imported, 1 already present" in out
        )
        assert "checkpoints: 0 imported, 1 already present" in out
    finally:
        get_settings.cache_clear()
    assert _tree(old) == before  # the source is only read
    store = open_store(db_url, tmp_path / "reader")
    meta, raw = store.read_result(made["job"])
    assert raw == (old / "results" / f"{made['job']}.result.json").read_text()
    assert meta["request"] == {"text": "old"}
    assert store.read_share(made["share"]["id"]) == made["share"]
    assert store.checkpoint(made["ck"]) == made["ck_meta"]
    assert (
        store.checkpoint_blob(made["ck"]).read_bytes()
        == before[f"checkpoints/{made['ck']}/blob.npy"]
    )
    assert store.read_result("e" * 32) is None and store.checkpoint("ck-" + "4" * 32) is None
    store.close()
