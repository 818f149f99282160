"""How long a short job (a PE analysis) waits behind a long text analysis (issue 13).

Runs ``headscope serve`` twice on loopback with one general worker: without and with a short-job
worker (``HEADSCOPE_SHORT_WORKERS``). Each time it submits a long MiniLM analysis (every head's
t-SNE plus robustness), waits until it runs, then submits a PE analysis of a shipped demo
checkpoint and reports how long that waits before it starts (``queued`` -> anything else, polled
every 20 ms) and how long until it is finished.

    .venv/bin/python -m tests.bench.bench_short_queue [--cap 300]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))


def measure(short_workers: int, *, cap_s: float) -> dict:
    from service_helpers import ServeProcess

    base = Path(tempfile.mkdtemp(prefix="hs-short-"))
    serve = ServeProcess.for_tests(base, {}, workers=1, HEADSCOPE_SHORT_WORKERS=str(short_workers))
    serve.start(timeout_s=300)
    try:
        with serve.client() as c:
            while c.get("/api/health").json()["ready"] < 1 + short_workers:  # every worker up
                time.sleep(0.2)
            text = (ROOT / "tests" / "bench" / "bench_text.txt").read_text()
            words = " ".join(text.split()[:250])
            long = c.post(
                "/api/analyses",
                json={"model": "minilm", "text": words, "analyses": ["head-tsne", "robustness"]},
            ).json()["id"]
            while c.get(f"/api/analyses/{long}").json()["status"] == "queued":
                time.sleep(0.05)
            demos = []
            while not demos:
                demos = c.get("/api/checkpoints").json()["demos"]
                time.sleep(0.1)
            body = {"checkpoints": [{"id": demos[0]["id"]}], "reference": {"kind": "none"}}
            t0 = time.perf_counter()
            pe = c.post("/api/pe-analyses", json=body).json()["id"]
            started = finished = None
            while time.perf_counter() - t0 < cap_s:
                st = c.get(f"/api/pe-analyses/{pe}").json()["status"]
                now = time.perf_counter() - t0
                if st != "queued" and started is None:
                    started = now
                if st in ("finished", "failed"):
                    finished = now
                    break
                time.sleep(0.02)
            long_state = c.get(f"/api/analyses/{long}").json()["status"]
    finally:
        serve.stop()
    return {
        "short_workers": short_workers,
        "wait_s": started,
        "done_s": finished,
        "long_then": long_state,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--cap", type=float, default=300.0, help="give up waiting after this many seconds"
    )
    args = ap.parse_args()
    rows = [measure(k, cap_s=args.cap) for k in (0, 1)]
    print(f"{'short workers':>13} {'PE waits s':>11} {'PE done s':>10}  long job when the PE ended")
    for r in rows:
        wait = f"{r['wait_s']:.2f}" if r["wait_s"] is not None else f">{args.cap:.0f}"
        done = f"{r['done_s']:.2f}" if r["done_s"] is not None else f">{args.cap:.0f}"
        print(f"{r['short_workers']:>13} {wait:>11} {done:>10}  {r['long_then']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
