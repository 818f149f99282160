"""A comparison of two models split into parts of texts (docs/scaling.md): wall time and workers' CPU
seconds in one job, in parts on 1 worker and on 2 workers (one thread each), and whether they agree.

    nice -n 10 .venv/bin/python -m tests.bench.bench_compare_scale [--texts 800] [--part-texts 200]
        [--model-a minilm] [--model-b smollm2] [--runs one,split1,split2]

As tests/bench/bench_scale.py (whose ``Bench`` it uses: the bundled Redis, a SQLite store holding a
synthetic corpus, ``python -m workers.queue.worker`` workers with ``OMP_NUM_THREADS=1``), with both models
preloaded in every worker before any timing. Times run from the submit to the stored result.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_scale import ROOT, Bench, cpu_s, load


class CompareBench(Bench):
    def start_both(self, n: int, models: tuple[str, str], *, part: int, split: bool) -> list[int]:
        """Start ``n`` workers with both models preloaded; their pids once ready."""
        from service_helpers import service_env

        from workers.queue import keys as protocol

        env = service_env(
            self.base / "data",
            self.base / "none.json",
            REDIS_URL=self.url,
            HEADSCOPE_SPLIT_COMPARE_MIN_TEXTS=str(2 * part if split else 10**9),
            HEADSCOPE_SPLIT_COMPARE_PART_TEXTS=str(part),
            HEADSCOPE_JOB_TIMEOUT_S=str(24 * 3600),
            HEADSCOPE_DEVICE="cpu",
        )
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
                        models[0],
                        "--preload",
                        models[1],
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

    def compare(self, corpus: str, models: tuple[str, str]) -> tuple[float, dict[str, Any]]:
        """Submit the comparison, wait for its stored result; (seconds, result)."""
        from workers.core.contracts import CompareRequest

        req = CompareRequest(model_a=models[0], model_b=models[1], corpus=corpus, max_tokens=64)
        job_id = req.job_id()
        self.store.delete_result(job_id)
        self.conn.delete(f"hs:result:{job_id}")
        t0 = time.perf_counter()
        self.queue.submit("compare", job_id, req.normalised())
        while (state := self.queue.lookup(job_id, with_partial=False)).status not in (
            "finished",
            "failed",
        ):
            time.sleep(0.02)
        seconds = time.perf_counter() - t0
        if state.status != "finished":
            raise RuntimeError(f"the comparison failed: {state.error}")
        return seconds, json.loads(state.result_raw)


def comparable(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k not in ("seconds", "split")}


def max_diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The largest difference between two comparisons' numbers (similarity, matched pairs, profiles)."""
    import numpy as np

    def num(x: Any) -> np.ndarray:
        return np.array(
            [np.nan if v is None else v for v in np.ravel(np.array(x, dtype=object))], dtype=float
        )

    pairs = [num(r["similarity"]) for r in (a, b)]
    pairs += [num([p["similarity"] for p in r["matching"]["pairs"]]) for r in (a, b)]
    for key in ("raw", "z"):
        for stat in a["profiles"]["statistics"]:
            pairs += [num(r["profiles"][key][stat]) for r in (a, b)]
    pairs += [num(r["profiles"]["xy_a"] + r["profiles"]["xy_b"]) for r in (a, b)]
    return max(
        float(np.nanmax(np.abs(x - y), initial=0.0))
        for x, y in zip(pairs[::2], pairs[1::2], strict=True)
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=800)
    ap.add_argument("--part-texts", type=int, default=200)
    ap.add_argument("--model-a", default="minilm")
    ap.add_argument("--model-b", default="smollm2")
    ap.add_argument("--runs", default="one,split1,split2")
    args = ap.parse_args()
    runs, models, n, part = (
        set(args.runs.split(",")),
        (args.model_a, args.model_b),
        args.texts,
        args.part_texts,
    )
    out: dict[str, Any] = {"models": models, "texts": n, "part_texts": part}
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        bench = CompareBench(Path(tmp))
        try:
            corpus = bench.corpus(n)
            for name, workers, split in (
                ("one", 1, False),
                ("split1", 1, True),
                ("split2", 2, True),
            ):
                if name not in runs:
                    continue
                pids = bench.start_both(workers, models, part=part, split=split)
                l0, c0 = load(), cpu_s(pids)
                t, results[name] = bench.compare(corpus, models)
                out[name] = {
                    "s": round(t, 1),
                    "texts_per_s": round(n / t, 2),
                    "cpu_s": round(cpu_s(pids) - c0, 1),
                    "load": (round(l0, 1), round(load(), 1)),
                }
                print(
                    name, json.dumps(out[name]), flush=True
                )  # as it goes: a run can take many minutes
                bench.stop()
        finally:
            bench.close()
    if "one" in out and "split1" in out:
        out["overhead_wall"] = round(out["split1"]["s"] / out["one"]["s"] - 1, 3)
        out["overhead_cpu"] = round(out["split1"]["cpu_s"] / out["one"]["cpu_s"] - 1, 3)
        out["split_equals_one_job"] = comparable(results["split1"]) == comparable(results["one"])
        out["max_abs_diff_split_vs_one_job"] = max_diff(results["split1"], results["one"])
    if "split1" in out and "split2" in out:
        out["speedup_2_workers"] = round(out["split1"]["s"] / out["split2"]["s"], 3)
        out["two_workers_equal_one"] = comparable(results["split1"]) == comparable(
            results["split2"]
        )
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
