"""Screenshots of the head atlas page for docs/atlas.md: a fresh ``headscope serve`` and a headless
Chromium (Debian's, via playwright) open ``/heads?model=M&run=1`` and wait for the atlas.

    PYTHONPATH=. .venv/bin/python scripts/shots_atlas.py [--model smollm2] [--out docs/img]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]
WAIT_MS = 900_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--out", default="docs/img")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    from tests.bench.bench_service import start_serve

    path = out / f"heads-{args.model}.png"
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_serve(Path(tmp), workers=1, model=args.model, threads=2)
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(url + f"/heads?model={args.model}&run=1")
                page.wait_for_selector(
                    "#heads-table .ag-row .ag-cell[col-id='label']", timeout=WAIT_MS
                )
                label = page.locator(
                    "#heads-table .ag-header-cell[col-id='effect_z'] .ag-header-cell-label"
                )
                label.click()
                label.click()  # the heads the ablations back first
                page.wait_for_timeout(1500)
                page.screenshot(path=str(path), full_page=True)
                browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    print(path)


if __name__ == "__main__":
    main()
