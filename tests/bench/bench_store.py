"""Benchmark: the store on SQLite and PostgreSQL, and two replicas acting as one service.

Run from the repository root (PostgreSQL's Debian package installed: scripts/system-deps.sh)::

    PYTHONPATH=. python -m tests.bench.bench_store [--reads 1000] [--result-kb 256] [--requests 200]

1. Latency: ``--reads`` share opens (the share, then its result: what ``GET /api/shares/{id}``
   reads) and result reads, p50/p99, on SQLite and on a real PostgreSQL server (started here,
   fsync on), each as a ratio to the file store this database replaced (two JSON files per
   read), measured in the same run on the same data.
2. Two replicas: two ``headscope serve`` (one worker each, different data dirs) on one Redis and
   one PostgreSQL get ``--requests`` concurrent POSTs, alternating between the replicas, a
   ``--duplicates`` share repeating an earlier request (often through the other replica). Every
   job is polled through the replica it was *not* posted to. Reported: lost requests, distinct
   requests, computations (Redis ``hs:computed``), enqueues (the store's fingerprints), and share
   open p50/p99 over HTTP (made on one replica, opened ``--reads`` times on the other).
Numbers from a shared machine are noisy: compare the ratios from one run.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from pg_server import PostgresServer  # noqa: E402
from service_helpers import ServeProcess, write_catalogue  # noqa: E402

from backend.config import Settings  # noqa: E402
from backend.store import Store  # noqa: E402
from workers.store.core import COMPRESSION_LEVEL  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def fake_result(kb: int, seed: int) -> str:
    """A result-shaped JSON document of about ``kb`` KiB (nested lists of floats)."""
    rng = random.Random(seed)
    rows = max(1, kb * 1024 // (64 * 12))
    return json.dumps(
        {
            "max-attention": {
                "values": [[round(rng.random(), 6) for _ in range(64)] for _ in range(rows)]
            },
            "tokens": ["tok"] * 64,
        }
    )


class FileStore:
    """The reference: the file store this database replaced (meta + result file, share file)."""

    def __init__(self, root: Path):
        self.root = root
        for d in ("results", "shares"):
            (root / d).mkdir(parents=True, exist_ok=True)

    def write(self, job_id: str, raw: str, share_id: str) -> None:
        (self.root / "results" / f"{job_id}.result.json").write_text(raw)
        meta = {
            "id": job_id,
            "kind": "analysis",
            "request": {"text": job_id},
            "finished_at": time.time(),
        }
        (self.root / "results" / f"{job_id}.meta.json").write_text(json.dumps(meta))
        share = {
            "id": share_id,
            "kind": "analysis",
            "target": job_id,
            "view": {},
            "created_at": time.time(),
        }
        (self.root / "shares" / f"{share_id}.json").write_text(json.dumps(share))

    def read_result(self, job_id: str) -> tuple[dict, str]:
        meta = json.loads((self.root / "results" / f"{job_id}.meta.json").read_text())
        return meta, (self.root / "results" / f"{job_id}.result.json").read_text()

    def read_share(self, share_id: str) -> dict:
        return json.loads((self.root / "shares" / f"{share_id}.json").read_text())


def timed(fn: Callable[[], object], n: int) -> tuple[float, float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times), 1000 * percentile(times, 99)


def latency(
    stores: dict[str, object], *, reads: int, result_kb: int, n_items: int = 100
) -> dict[str, dict]:
    """p50/p99 (ms) of share opens and result reads per store, over the same items."""
    job_ids = [f"{i:032x}" for i in range(n_items)]
    raws = [fake_result(result_kb, i) for i in range(n_items)]
    shares: dict[str, list[str]] = {}
    for name, store in stores.items():
        if isinstance(store, FileStore):
            ids = [f"share{i:027d}" for i in range(n_items)]
            for j, raw, s in zip(job_ids, raws, ids, strict=True):
                store.write(j, raw, s)
        else:
            ids = []
            for j, raw in zip(job_ids, raws, strict=True):
                store.write_result(j, kind="analysis", request={"text": j}, result_raw=raw)
                ids.append(store.create_share(kind="analysis", target=j, view={})["id"])
        shares[name] = ids
    rows = {}
    for name, store in stores.items():
        rng = random.Random(0)

        def open_share(store=store, ids=shares[name], rng=rng) -> None:
            share = store.read_share(rng.choice(ids))
            store.read_result(share["target"])

        def read_result(store=store, rng=rng) -> None:
            store.read_result(rng.choice(job_ids))

        timed(open_share, 50)  # warm caches and connection pools
        rows[name] = {"share": timed(open_share, reads), "result": timed(read_result, reads)}
    bodies = [zlib.compress(raw.encode(), COMPRESSION_LEVEL) for raw in raws]
    rng = random.Random(0)
    rows["zlib alone"] = {
        "decompress": timed(lambda: zlib.decompress(rng.choice(bodies)).decode(), reads)
    }
    return rows


def two_replicas(
    pg: PostgresServer,
    *,
    requests: int,
    duplicates: float,
    reads: int,
    model: str,
    words: int,
    timeout_s: float,
) -> dict:
    from redis import Redis

    from backend.serve import start_redis, stop
    from workers.data import demo_text

    base = Path(tempfile.mkdtemp(prefix="hs-bench-store-"))
    redis_proc, redis_url = start_redis(base / "redis")
    db_url = pg.new_database()
    cat = write_catalogue(base / "models.json", {})
    replicas = []
    try:
        for name in ("a", "b"):
            data = base / name
            data.mkdir()
            env = {"REDIS_URL": redis_url, "HEADSCOPE_DATABASE_URL": db_url}
            replicas.append(ServeProcess.for_tests(base / name, {}, workers=1, **env))
        replicas[0].env["HEADSCOPE_MODELS"] = replicas[1].env["HEADSCOPE_MODELS"] = str(cat)
        subprocess.run(
            [sys.executable, "-m", "backend.cli", "migrate"],
            cwd=ROOT,
            env=replicas[0].env,
            check=True,
            capture_output=True,
        )
        for r in replicas:
            r.start()
        vocab = demo_text().split()
        rng = random.Random(1)
        n_distinct = max(1, round(requests * (1 - duplicates)))
        bodies = [
            {
                "model": model,
                "text": " ".join(rng.choice(vocab) for _ in range(words)) + f" #{i}",
                "analyses": ["max-attention"],
            }
            for i in range(n_distinct)
        ]
        bodies += [rng.choice(bodies) for _ in range(requests - n_distinct)]
        rng.shuffle(bodies)
        clients = [
            httpx.Client(base_url=r.url, timeout=60, limits=httpx.Limits(max_connections=requests))
            for r in replicas
        ]

        def submit(item: tuple[int, dict]) -> tuple[int, str | None]:
            i, body = item
            try:
                resp = clients[i % 2].post("/api/analyses", json=body)
                return i % 2, resp.json()["id"] if resp.status_code == 202 else None
            except httpx.HTTPError:
                return i % 2, None

        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=requests) as pool:
            submitted = list(pool.map(submit, enumerate(bodies)))
        other = {job_id: 1 - via for via, job_id in submitted if job_id is not None}
        done: dict[str, str] = {}
        deadline = time.perf_counter() + timeout_s
        while len(done) < len(other) and time.perf_counter() < deadline:
            for job_id, via in other.items():
                if job_id not in done:
                    status = clients[via].get(f"/api/analyses/{job_id}").json()["status"]
                    if status in ("finished", "failed"):
                        done[job_id] = status
            time.sleep(0.2)
        span = time.perf_counter() - t0
        conn = Redis.from_url(redis_url)
        computed = {j: int(conn.get(f"hs:computed:{j}") or 0) for j in other}
        store = replicas[0].store()
        enqueued = {j: (store.fingerprint(j) or {}).get("submissions", 0) for j in other}
        finished = [j for j, s in done.items() if s == "finished"]
        share = (
            clients[0]
            .post("/api/shares", json={"analysis_id": finished[0], "view": {}})
            .json()["id"]
        )
        clients[1].get(f"/api/shares/{share}")
        http = timed(lambda: clients[1].get(f"/api/shares/{share}").raise_for_status(), reads)
        for c in clients:
            c.close()
        store.close()
        return {
            "requests": requests,
            "distinct": len(other),
            "lost": sum(1 for _v, j in submitted if j is None or done.get(j) != "finished"),
            "computed_total": sum(computed.values()),
            "computed_max": max(computed.values()),
            "enqueued_max": max(enqueued.values()),
            "seconds": span,
            "share_http": http,
        }
    finally:
        for r in replicas:
            r.stop()
        stop(redis_proc, grace_s=5)
        shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reads", type=int, default=1000)
    parser.add_argument(
        "--result-kb", type=int, default=256, help="size of each stored result (JSON)"
    )
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--duplicates", type=float, default=0.2)
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--words", type=int, default=30)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--skip-replicas", action="store_true")
    args = parser.parse_args(argv)

    pg = PostgresServer(fsync=True).init().start()
    try:
        with tempfile.TemporaryDirectory(prefix="hs-bench-store-") as tmp:
            root = Path(tmp)
            stores = {
                "files": FileStore(root / "files"),
                "sqlite": Store(Settings(data_dir=root / "sqlite")),
                "postgresql": Store(
                    Settings(data_dir=root / "pg", database_url=pg.new_database()), migrate=True
                ),
            }
            rows = latency(stores, reads=args.reads, result_kb=args.result_kb)
            ref = rows["files"]
            d50, d99 = rows.pop("zlib alone")["decompress"]
            for name, row in rows.items():
                (s50, s99), (r50, r99) = row["share"], row["result"]
                print(
                    f"{name:10s} share open p50 {s50:.2f} ms p99 {s99:.2f} ms "
                    f"({s50 / ref['share'][0]:.2f}x files); result read p50 {r50:.2f} ms p99 {r99:.2f} ms "
                    f"({r50 / ref['result'][0]:.2f}x files)  [{args.reads} reads, {args.result_kb} KiB results]",
                    flush=True,
                )
            print(
                f"(of which decompressing one result: p50 {d50:.2f} ms p99 {d99:.2f} ms)",
                flush=True,
            )
            for store in stores.values():
                if isinstance(store, Store):
                    store.close()
        if not args.skip_replicas:
            row = two_replicas(
                pg,
                requests=args.requests,
                duplicates=args.duplicates,
                reads=args.reads,
                model=args.model,
                words=args.words,
                timeout_s=args.timeout,
            )
            p50, p99 = row["share_http"]
            print(
                f"two replicas (one Redis, one PostgreSQL): {row['requests']} concurrent requests, "
                f"{row['distinct']} distinct, lost {row['lost']}, computed {row['computed_total']} "
                f"(at most {row['computed_max']} per request), enqueued at most {row['enqueued_max']} per "
                f"request, all done in {row['seconds']:.1f} s; share made on A opened on B over HTTP: "
                f"p50 {p50:.2f} ms p99 {p99:.2f} ms",
                flush=True,
            )
    finally:
        pg.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
