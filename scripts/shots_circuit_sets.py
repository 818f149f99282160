"""Screenshots of the data-set mode of /circuits (``/circuits/sets``) for docs/circuits.md: a fresh
``headscope serve`` (one worker) and a headless Chromium; the built-in IOI set with a small N entered
on the page as a user would, run, and the page and its figures saved.

    PYTHONPATH=. nice -n 10 .venv/bin/python scripts/shots_circuit_sets.py [--out docs/img] [--n 16]

Prints what the page said (accuracy, CPR/CMD beside random's) and the job's wall time.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from scripts.shots_circuits import ARGS, CHROMIUM, WAIT_MS

DONE_JS = (
    "document.querySelector('#cs-status').textContent.trim() === 'done'"
    " || document.querySelector('#cs-error').textContent"
    " || document.querySelector('#cs-status').textContent.startsWith('failed')"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/img")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--task", default="ioi", choices=["ioi", "capitals"])
    parser.add_argument("--n", type=int, default=16)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    from tests.bench.bench_service import start_serve

    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_serve(Path(tmp), workers=1, model=args.model)
        try:
            with sync_playwright() as pw, tempfile.TemporaryDirectory() as profile:
                ctx = pw.chromium.launch_persistent_context(
                    profile,
                    executable_path=CHROMIUM,
                    args=ARGS,
                    viewport={"width": 1400, "height": 1000},
                )
                page = ctx.new_page()
                page.goto(url + "/circuits/sets")
                page.click("#cs-model")
                page.get_by_role("option", name=args.model).first.click()
                page.get_by_label(
                    f"{'IOI' if args.task == 'ioi' else 'capitals'} (built in)"
                ).check()
                page.fill("#cs-n", str(args.n))
                t0 = time.monotonic()
                page.click("#cs-analyze")
                page.wait_for_function(DONE_JS, timeout=WAIT_MS)
                took = time.monotonic() - t0
                page.wait_for_selector("#cs-circuit-graph .scatterlayer .point", timeout=WAIT_MS)
                page.wait_for_timeout(2000)
                print(f"{args.task} on {args.model}, N = {args.n}: job {took:.0f} s, {page.url}")
                for cid in ("cs-status", "cs-error", "cs-accuracy", "cs-warning", "cs-scores"):
                    print(f"  {cid}: {page.inner_text('#' + cid)}")
                name = f"circuit-sets-{args.task}-{args.model}"
                page.screenshot(path=str(out / f"{name}-page.png"), full_page=True)
                for g in ("curve", "stability", "circuit"):
                    page.locator(f"#cs-{g}-graph").screenshot(path=str(out / f"{name}-{g}.png"))
                ctx.close()
        finally:
            proc.terminate()
            proc.wait(timeout=60)


if __name__ == "__main__":
    main()
