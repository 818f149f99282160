"""Resident memory of one worker over 500 jobs (issue 13: workers give memory back).

Starts a real worker process (``python -m workers.queue.worker``) on the bundled Redis, runs 500 small
analyses on the tiny BERT (max attention + one head's t-SNE, 500 different texts, so nothing is
deduplicated) and prints the worker's RSS every 50 jobs, with the first sample as the reference.

    .venv/bin/python -m tests.bench.bench_worker_memory [--jobs 500] [--max-jobs 0]

``--max-jobs N`` sets HEADSCOPE_WORKER_MAX_JOBS (0 = never recycle, to see the raw curve).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from redis import Redis

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    from service_helpers import service_env, write_catalogue
    from tiny_models import build_tiny_bert

    from backend.config import Settings
    from backend.queue import JobQueue
    from backend.serve import start_redis, stop
    from backend.store import Store
    from workers.core.contracts import AnalysisRequest
    from workers.queue import keys as protocol
    from workers.queue.recycle import rss_mb

    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--max-jobs", type=int, default=0)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="hs-mem-"))
    model = build_tiny_bert(base / "tiny-bert")
    redis_proc, url = start_redis(base)
    env = service_env(
        base / "data",
        write_catalogue(base / "models.json", {"tiny-bert": model}),
        REDIS_URL=url,
        HEADSCOPE_WORKER_MAX_JOBS=str(args.max_jobs),
    )
    worker = subprocess.Popen(
        [sys.executable, "-m", "workers.queue.worker", "--preload", "tiny-bert"], cwd=ROOT, env=env
    )
    conn = Redis.from_url(url)
    try:
        while not any(w.get("ready") for w in protocol.live_workers(conn).values()):
            time.sleep(0.2)
        settings = Settings(data_dir=base / "data", redis_url=url)
        queue = JobQueue(conn, Store(settings), settings)
        words = (ROOT / "tests" / "bench" / "bench_text.txt").read_text().split()
        print(f"{'jobs':>6} {'RSS MiB':>9} {'vs first':>9}")
        first = None
        t0 = time.perf_counter()
        for i in range(args.jobs):
            text = " ".join(words[i % 200 : i % 200 + 25]) + f" ({i})"
            req = AnalysisRequest(
                model="tiny-bert",
                text=text,
                analyses=["max-attention", "head-tsne"],
                options={
                    "layer": i % 2,
                    "head": i % 4,
                    "n_iter": 100,
                    "early_exaggeration_iter": 50,
                },
            )
            queue.submit("analysis", req.job_id(), req.normalised())
            state = queue.wait(req.job_id(), timeout_s=120)
            assert state is not None and state.status == "finished", state
            if (i + 1) % 50 == 0 or i == 0:
                rss = rss_mb(worker.pid)
                first = first or rss
                print(f"{i + 1:>6} {rss:>9.1f} {rss / first:>8.2f}x", flush=True)
        print(f"{args.jobs} jobs in {time.perf_counter() - t0:.0f} s")
    finally:
        worker.terminate()
        worker.wait(30)
        stop(redis_proc, grace_s=5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
