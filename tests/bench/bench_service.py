"""Benchmark: 200 concurrent requests against ``headscope serve`` on loopback, 1 worker vs 2.

Run from the repository root::

    PYTHONPATH=. python -m tests.bench.bench_service [--requests 200] [--workers 1,2] [--duplicates 0.2]

For each worker count a fresh ``serve`` (bundled Redis, workers preloading the model) gets
``--requests`` POSTs at once (a ``--duplicates`` share of them repeat an earlier request: they
must share its job). Reported per worker count: lost requests (POST refused, or not finished
within ``--timeout``), jobs actually computed (must equal the distinct requests), p50/p95 of the
POST latency and of submit-to-finished, distinct jobs per minute; then the jobs/min ratio of the
worker counts and the time to open a share link. Numbers from a shared machine are noisy: compare
ratios from one run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def start_serve(
    data: Path, *, workers: int, model: str, threads: int | None = 1
) -> tuple[subprocess.Popen, str]:
    """``headscope serve`` on a free port; ``threads``: OMP_NUM_THREADS of the whole service (None: serve's
    own default, the cores shared among the workers)."""
    port = free_port()
    env = {**os.environ, "HEADSCOPE_DATA_DIR": str(data), "PYTHONPATH": str(ROOT)}
    env.pop("OMP_NUM_THREADS", None)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    env.pop("REDIS_URL", None)
    cmd = [
        sys.executable,
        "-m",
        "backend.cli",
        "serve",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--preload",
        model,
    ]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=open(data / "serve.log", "wb")
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError((data / "serve.log").read_text()[-2000:])
        try:
            if httpx.get(f"{url}/api/health", timeout=2).json().get("ready", 0) >= workers:
                return proc, url
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.3)
    proc.terminate()
    raise RuntimeError("serve did not become ready")


def texts(n_distinct: int, *, words: int, seed: int) -> list[str]:
    from workers.data import demo_text

    vocab = demo_text().split()
    rng = random.Random(seed)
    return [" ".join(rng.choice(vocab) for _ in range(words)) + f" #{i}" for i in range(n_distinct)]


def run_load(
    url: str,
    data: Path,
    *,
    requests: int,
    duplicates: float,
    model: str,
    analysis: str,
    words: int,
    timeout_s: float,
    seed: int,
) -> dict:
    n_distinct = max(1, round(requests * (1 - duplicates)))
    distinct = texts(n_distinct, words=words, seed=seed)
    rng = random.Random(seed + 1)
    bodies = [{"model": model, "text": t, "analyses": [analysis]} for t in distinct]
    bodies += [rng.choice(bodies) for _ in range(requests - n_distinct)]
    rng.shuffle(bodies)
    client = httpx.Client(base_url=url, timeout=60, limits=httpx.Limits(max_connections=requests))

    def submit(body: dict) -> tuple[float, float, str | None]:
        start = time.perf_counter()
        try:
            resp = client.post("/api/analyses", json=body)
            ok = resp.status_code == 202
        except httpx.HTTPError:
            ok = False
        return start, time.perf_counter(), resp.json()["id"] if ok else None

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=requests) as pool:
        submitted = list(pool.map(submit, bodies))
    post_latency = [end - start for start, end, _ in submitted]
    started = {}
    for start, _end, job_id in submitted:
        if job_id is not None:
            started[job_id] = min(start, started.get(job_id, start))

    def poll(job_id: str) -> str:
        for _ in range(3):  # a GET is safe to repeat when a pooled connection was closed under it
            try:
                return client.get(f"/api/analyses/{job_id}").json()["status"]
            except httpx.TransportError:
                time.sleep(0.1)
        return "unknown"

    finished: dict[str, float] = {}
    failed: set[str] = set()
    deadline = time.perf_counter() + timeout_s
    with ThreadPoolExecutor(max_workers=16) as pool:
        while len(finished) + len(failed) < len(started) and time.perf_counter() < deadline:
            pending = [i for i in started if i not in finished and i not in failed]
            for job_id, status in zip(pending, pool.map(poll, pending), strict=True):
                if status == "finished":
                    finished[job_id] = time.perf_counter()
                elif status == "failed":
                    failed.add(job_id)
            time.sleep(0.05)
    per_request = [finished[j] - start for start, _end, j in submitted if j in finished]
    lost = sum(1 for _s, _e, j in submitted if j is None or j not in finished)
    span = max(finished.values()) - t0 if finished else float("nan")
    from redis import Redis

    redis_url = json.loads((data / "serve.json").read_text())["redis_url"]
    conn = Redis.from_url(redis_url)
    computed = sum(int(conn.get(f"hs:computed:{j}") or 0) for j in started)
    client.close()
    return {
        "requests": requests,
        "distinct": len(started),
        "computed": computed,
        "lost": lost,
        "post_p50_ms": 1000 * statistics.median(post_latency),
        "post_p95_ms": 1000 * percentile(post_latency, 95),
        "done_p50_s": statistics.median(per_request) if per_request else float("nan"),
        "done_p95_s": percentile(per_request, 95) if per_request else float("nan"),
        "jobs_per_min": 60 * len(finished) / span if finished else 0.0,
        "finished_ids": sorted(finished),
    }


def share_open_ms(url: str, job_id: str, *, repeats: int = 50) -> tuple[float, int]:
    with httpx.Client(base_url=url, timeout=30) as client:
        share = client.post(
            "/api/shares", json={"analysis_id": job_id, "view": {"page": "bench"}}
        ).json()
        times, size = [], 0
        for _ in range(repeats):
            start = time.perf_counter()
            resp = client.get(f"/api/shares/{share['id']}")
            times.append(time.perf_counter() - start)
            size = len(resp.content)
    return 1000 * statistics.median(times), size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument(
        "--workers", default="1,2", help="worker counts to compare, comma-separated"
    )
    parser.add_argument(
        "--duplicates", type=float, default=0.2, help="share of requests repeating another"
    )
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--analysis", default="max-attention")
    parser.add_argument("--words", type=int, default=60, help="words per text")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for all jobs")
    args = parser.parse_args(argv)

    rows = {}
    for n in [int(x) for x in args.workers.split(",")]:
        with tempfile.TemporaryDirectory(prefix="hs-bench-") as tmp:
            data = Path(tmp)
            proc, url = start_serve(data, workers=n, model=args.model)
            try:
                row = run_load(
                    url,
                    data,
                    requests=args.requests,
                    duplicates=args.duplicates,
                    model=args.model,
                    analysis=args.analysis,
                    words=args.words,
                    timeout_s=args.timeout,
                    seed=n,
                )
                if row["finished_ids"]:
                    row["share_open_ms"], row["share_bytes"] = share_open_ms(
                        url, row["finished_ids"][0]
                    )
            finally:
                proc.terminate()
                proc.wait(60)
        rows[n] = row
        print(
            f"{n} worker(s): {row['requests']} requests, {row['distinct']} distinct, computed "
            f"{row['computed']}, lost {row['lost']}; POST p50 {row['post_p50_ms']:.0f} ms p95 "
            f"{row['post_p95_ms']:.0f} ms; submit->finished p50 {row['done_p50_s']:.2f} s p95 "
            f"{row['done_p95_s']:.2f} s; {row['jobs_per_min']:.0f} jobs/min; share open "
            f"{row.get('share_open_ms', float('nan')):.1f} ms ({row.get('share_bytes', 0) / 1024:.0f} KiB)",
            flush=True,
        )
    counts = sorted(rows)
    if len(counts) >= 2:
        a, b = counts[0], counts[-1]
        print(
            f"jobs/min ratio {b} vs {a} worker(s): {rows[b]['jobs_per_min'] / rows[a]['jobs_per_min']:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
