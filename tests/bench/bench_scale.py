"""A corpus job split into parts (issue 33, docs/scaling.md): texts/s with 1 and 2 workers (one thread
each), the split's overhead, and a worker's peak memory at two corpus sizes.

    nice -n 10 .venv/bin/python -m tests.bench.bench_scale [--models minilm,smollm2]
        [--texts minilm=10000,smollm2=1000] [--memory-texts 10000,100000] [--memory-model minilm]
        [--part-texts 500] [--runs one,split1,split2]

Everything is real: the bundled Redis, a SQLite store in a temporary directory holding a synthetic
corpus (``tests/bench/synthetic_corpus.py``), and workers started as ``python -m workers.queue.worker
--preload MODEL`` with ``OMP_NUM_THREADS=1`` (warmed up before any timing). For each model, on N texts:

    one job    1 worker, HEADSCOPE_SPLIT_MIN_ITEMS above N: the reference (one queue job)
    split x1   1 worker, parts of HEADSCOPE_SPLIT_PART_ITEMS (500) and the merge: overhead = its time
               over the reference's, minus 1 (target <= 5 % at 10,000 texts)
    split x2   2 workers: speed-up = split x1's time over this one's (target >= 1.7x on 2 cores)

Times run from the submit to the stored result (polled every 20 ms); the workers' CPU seconds
(user + system, /proc) are reported beside them: the split's overhead in CPU time is what a loaded
machine does not distort. ``*_jobs``: where a run's time went, from RQ's own start and end stamps
(the coordinator job, the parts' jobs summed, the merge job, the hand-offs between them, which worker
ran how many parts, each part's span from the coordinator's start). Memory: the peak resident set
(VmHWM) of each of two fresh workers after a split job over N texts, for each N of --memory-texts
(``--memory-model tiny-bert`` runs 100,000 texts in minutes on a loaded machine; memory is mechanics).
Every line carries the load average (1 min) before and after it: on a shared machine the speed-up
is only as clean as the load lets it be.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "bench"))

PART = 500  # texts per part (--part-texts)


def load() -> float:
    return os.getloadavg()[0]


class Bench:
    """One Redis, one store with the corpora, and workers started and stopped on demand."""

    def __init__(self, base: Path):
        from redis import Redis

        from backend.config import Settings
        from backend.queue import JobQueue
        from backend.serve import start_redis
        from backend.store import Store

        self.base = base
        self.redis_proc, self.url = start_redis(base / "redis")
        self.conn = Redis.from_url(self.url)
        self.settings = Settings(
            data_dir=base / "data", redis_url=self.url, job_timeout_s=24 * 3600
        )
        self.store = Store(self.settings)
        self.queue = JobQueue(self.conn, self.store, self.settings)
        self.procs: list[subprocess.Popen] = []
        self.log = open(base / "workers.log", "ab")
        self.catalogue: Path | None = None  # the tiny models', once one is asked for

    def tiny(self) -> None:
        """Register tiny-bert (random, 2 layers) for the workers: memory is about mechanics."""
        from service_helpers import write_catalogue
        from tiny_models import build_tiny_bert

        if self.catalogue is None:
            self.catalogue = write_catalogue(
                self.base / "models.json", {"tiny-bert": build_tiny_bert(self.base / "tiny-bert")}
            )

    def corpus(self, n: int) -> str:
        from synthetic_corpus import synthetic_texts

        from workers.inputs.corpora import corpus_id

        texts = synthetic_texts(n, seed=33)
        cid = corpus_id(texts)
        self.store.put_corpus(cid, texts, meta={"id": cid, "name": f"synthetic-{n}", "n_texts": n})
        return cid

    def start(self, n: int, model: str, *, split: bool) -> list[int]:
        """Start ``n`` workers (one thread each) and wait until they are warm; their pids."""
        from service_helpers import service_env

        from workers.queue import keys as protocol

        if model.startswith("tiny-"):
            self.tiny()
        env = service_env(
            self.base / "data",
            self.catalogue or self.base / "none.json",
            REDIS_URL=self.url,
            HEADSCOPE_SPLIT_MIN_ITEMS=str(2 * PART if split else 10**9),
            HEADSCOPE_SPLIT_PART_ITEMS=str(PART),
            HEADSCOPE_JOB_TIMEOUT_S=str(24 * 3600),
            HEADSCOPE_DEVICE="cpu",
        )
        if self.catalogue is None:
            env.pop("HEADSCOPE_MODELS")
        env.setdefault(
            "HEADSCOPE_MODEL_CACHE_DIR", str(Path.home() / ".cache" / "headscope" / "models")
        )
        before = len(self.procs)
        for _ in range(n):
            self.procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "workers.queue.worker",
                        "--preload",
                        model,
                        "--queues",
                        protocol.QUEUE,
                    ],
                    cwd=ROOT,
                    env=env,
                    stdout=self.log,
                    stderr=subprocess.STDOUT,
                )
            )
        while sum(w.get("ready", False) for w in protocol.live_workers(self.conn).values()) < len(
            self.procs
        ):
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"a worker exited; see {self.base / 'workers.log'}")
            time.sleep(0.2)
        return [p.pid for p in self.procs[before:]]

    def stop(self) -> None:
        from service_helpers import stop_all

        stop_all(self.procs)
        self.procs = []
        deadline = time.monotonic() + 30
        from workers.queue import keys as protocol

        while protocol.live_workers(self.conn) and time.monotonic() < deadline:
            time.sleep(0.2)

    def run(self, corpus: str, model: str) -> tuple[float, dict[str, Any]]:
        """Submit the corpus job, wait for its stored result; (seconds, result)."""
        from workers.core.contracts import CorpusRequest

        req = CorpusRequest(model=model, corpus=corpus, options={"max_tokens": 64})
        job_id = req.job_id()
        self.store.delete_result(
            job_id
        )  # the same request again: submit() sees it expired and reruns it
        self.conn.delete(f"hs:result:{job_id}")
        t0 = time.perf_counter()
        self.queue.submit("corpus", job_id, req.normalised())
        while True:
            state = self.queue.lookup(job_id, with_partial=False)
            if state.status in ("finished", "failed"):
                break
            time.sleep(0.02)
        seconds = time.perf_counter() - t0
        if state.status != "finished":
            raise RuntimeError(f"the corpus job failed: {state.error}")
        return seconds, json.loads(state.result_raw)

    def close(self) -> None:
        from backend.serve import stop

        self.stop()
        self.store.close()
        stop(self.redis_proc, grace_s=5)
        self.log.close()


def cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes have used: unlike wall time, not stretched by the
    other processes of a loaded machine."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def peak_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def max_diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    import numpy as np

    worst = 0.0
    for stat, grid in a["statistics"].items():
        x, y = np.array(grid, dtype=float), np.array(b["statistics"][stat], dtype=float)
        both = np.isfinite(x) & np.isfinite(y)
        worst = max(worst, float(np.max(np.abs(x[both] - y[both]), initial=0.0)))
    return worst


def job_seconds(bench: Bench, job_id: str, n_parts: int) -> dict[str, float]:
    """Where a run's time went, from RQ's own start and end stamps: the coordinator job, the parts'
    jobs (summed), the merge job; and the gaps between them (queue hand-offs)."""
    from workers.queue import keys as protocol
    from workers.queue import parts

    workers: dict[str, int] = {}

    def span(jid: str) -> tuple[float, float]:
        job = protocol.fetch_job(bench.conn, jid)
        if job is None or job.started_at is None or job.ended_at is None:
            return (float("nan"), float("nan"))
        if "-part-" in jid:
            workers[job.worker_name or "?"] = workers.get(job.worker_name or "?", 0) + 1
        return job.started_at.timestamp(), job.ended_at.timestamp()

    coord = span(job_id)
    out = {"coordinator_job_s": round(coord[1] - coord[0], 3)}
    if n_parts:
        spans = [span(parts.part_id(job_id, i)) for i in range(n_parts)]
        merge = span(parts.merge_id(job_id))
        out.update(
            parts_jobs_s=round(sum(b - a for a, b in spans), 3),
            merge_job_s=round(merge[1] - merge[0], 3),
            first_part_after_coordinator_s=round(min(a for a, _ in spans) - coord[1], 3),
            merge_after_last_part_s=round(merge[0] - max(b for _, b in spans), 3),
            parts_per_worker=sorted(workers.values()),
            part_spans=[(round(a - coord[0], 2), round(b - coord[0], 2)) for a, b in spans],
        )
    return out


def timed(
    bench: Bench, corpus: str, model: str, pids: list[int], name: str, n: int
) -> tuple[dict[str, Any], float, float, dict[str, Any]]:
    """Run the corpus job once on the workers ``pids``: (its figures under ``name``, seconds, CPU seconds, result)."""
    from workers.core.contracts import CorpusRequest

    l0, c0 = load(), cpu_s(pids)
    t, result = bench.run(corpus, model)
    cpu = cpu_s(pids) - c0
    jobs = job_seconds(
        bench,
        CorpusRequest(model=model, corpus=corpus, options={"max_tokens": 64}).job_id(),
        int((result.get("split") or {}).get("parts", 0)),
    )
    return (
        {
            f"{name}_s": round(t, 2),
            f"{name}_texts_per_s": round(n / t, 2),
            f"{name}_cpu_s": round(cpu, 2),
            f"load_{name}": (l0, load()),
            f"{name}_jobs": jobs,
        },
        t,
        cpu,
        result,
    )


def speed(bench: Bench, model: str, n: int, runs: set[str]) -> dict[str, Any]:
    """The runs of ``runs`` (one, split1, split2) over ``n`` texts, and the ratios between them."""
    corpus = bench.corpus(n)
    out: dict[str, Any] = {"model": model, "texts": n, "part_texts": PART}
    if "one" in runs:
        figures, t_one, cpu_one, one = timed(
            bench, corpus, model, bench.start(1, model, split=False), "one_job", n
        )
        out.update(figures)
        bench.stop()
    pids = bench.start(1, model, split=True)
    figures, t1, cpu_1, split1 = timed(bench, corpus, model, pids, "split1", n)
    out.update(
        figures, parts=split1["split"]["parts"], part_seconds_sum=split1["split"]["part_seconds"]
    )
    if "split2" in runs:
        pids += bench.start(1, model, split=True)  # a second worker
        figures, t2, _, split2 = timed(bench, corpus, model, pids, "split2", n)
        out.update(
            figures,
            speedup_2_workers=round(t1 / t2, 3),
            two_workers_equal_one=max_diff(split1, split2) == 0.0,
        )
    bench.stop()
    if "one" in runs:
        out.update(
            overhead=round(t1 / t_one - 1, 4),
            overhead_cpu=round(cpu_1 / cpu_one - 1, 4),
            max_abs_diff_split_vs_one_job=max_diff(one, split1),
        )
    return out


def memory(bench: Bench, model: str, sizes: list[int]) -> list[dict[str, Any]]:
    rows = []
    for n in sizes:
        corpus = bench.corpus(n)
        pids = bench.start(2, model, split=True)
        l0 = load()
        t, _ = bench.run(corpus, model)
        rows.append(
            {
                "model": model,
                "texts": n,
                "seconds": round(t, 1),
                "texts_per_s": round(n / t, 1),
                "worker_peak_mib": [round(peak_mib(p), 1) for p in pids],
                "load": (l0, load()),
            }
        )
        bench.stop()
    return rows


def main() -> int:
    global PART
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="minilm,smollm2")
    ap.add_argument(
        "--texts", default="minilm=10000,smollm2=1000", help="texts per model for the speed runs"
    )
    ap.add_argument("--memory-texts", default="10000,100000")
    ap.add_argument(
        "--memory-model", default="minilm", help="minilm, smollm2 or tiny-bert (random, 2 layers)"
    )
    ap.add_argument(
        "--part-texts", type=int, default=PART, help="HEADSCOPE_SPLIT_PART_ITEMS (the default 500)"
    )
    ap.add_argument(
        "--runs",
        default="one,split1,split2",
        help="which speed runs: one (one job), split1 (1 worker, always run), split2 (2 workers)",
    )
    args = ap.parse_args()
    PART = args.part_texts
    texts = {k: int(v) for k, v in (kv.split("=") for kv in args.texts.split(","))}
    base = Path(tempfile.mkdtemp(prefix="hs-scale-"))
    bench = Bench(base)
    try:
        print(json.dumps({"cpus": os.cpu_count(), "load_at_start": os.getloadavg()}), flush=True)
        for model in [m for m in args.models.split(",") if m]:
            print(
                json.dumps(speed(bench, model, texts.get(model, 1000), set(args.runs.split(",")))),
                flush=True,
            )
        sizes = [int(n) for n in args.memory_texts.split(",") if n]
        for row in memory(bench, args.memory_model, sizes) if sizes else []:
            print(json.dumps(row), flush=True)
    finally:
        bench.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
