"""Screenshots of the front door for the README and docs/dashboard.md: a fresh ``headscope serve``
and a headless Chromium (Debian's, via playwright): the start page, a page's header with its "?"
and terms, and a docs page as /help serves it.

    PYTHONPATH=. .venv/bin/python scripts/shots_frontdoor.py [--out docs/img]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]
WAIT_MS = 120_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/img")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    from tests.bench.bench_service import start_serve

    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_serve(Path(tmp), workers=1, model="minilm")
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                page = browser.new_page(viewport={"width": 1280, "height": 820})
                page.goto(url + "/")
                page.wait_for_selector("#start-page", timeout=WAIT_MS)
                page.wait_for_timeout(500)
                page.screenshot(path=str(out / "start-page.png"))
                page.goto(url + "/causal")
                page.wait_for_selector("#causal-help", timeout=WAIT_MS)
                page.hover(
                    "#causal-page a.term >> nth=0"
                )  # the term's tooltip is the browser's own
                page.locator("#causal-page .page-header").screenshot(
                    path=str(out / "page-header-causal.png")
                )
                page.goto(url + "/help/analyses#quantile-equidistant-rescaling")
                page.wait_for_selector("#help-page h2", timeout=WAIT_MS)
                page.screenshot(path=str(out / "help-analyses.png"))
                browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    for name in ("start-page.png", "page-header-causal.png", "help-analyses.png"):
        print(out / name)


if __name__ == "__main__":
    main()
