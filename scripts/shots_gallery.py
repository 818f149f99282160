"""Screenshots of Gemma 3 270M's text explorer for docs/dashboard.md and docs/walkthrough-gemma3.md:
a fresh ``headscope serve`` with Gemma 3 preloaded and a headless Chromium (Debian's, via
playwright): Analyze on the README's first sentences, then the gallery (18 layers of 4 heads, 3
layers a row), and the page's and the gallery's heights printed.

    PYTHONPATH=. .venv/bin/python scripts/shots_gallery.py [--out docs/img]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]
WAIT_MS = 600_000
ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/img")
    parser.add_argument("--chars", type=int, default=600, help="characters of the README analysed")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    from tests.bench.bench_service import start_serve

    text = " ".join((ROOT / "README.md").read_text().split())[: args.chars]
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_serve(Path(tmp), workers=1, model="gemma3-270m", threads=None)
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(url + "/text?model=gemma3-270m")
                page.wait_for_selector("#head-gallery .js-plotly-plot", timeout=WAIT_MS)
                page.fill("#text-input", text)
                page.click("#analyze-button")
                page.wait_for_function(
                    "document.querySelector('#text-status').textContent === 'done'",
                    timeout=WAIT_MS,
                )
                page.wait_for_function(
                    "document.querySelector('#head-gallery .js-plotly-plot')"
                    ".layout.meta.gallery.complete",
                    timeout=WAIT_MS,
                )
                page.wait_for_timeout(1000)
                page.locator("#text-fold-gallery").screenshot(path=str(out / "gallery-gemma3.png"))
                height = page.evaluate("document.documentElement.scrollHeight")
                gallery = page.evaluate(
                    "document.querySelector('#head-gallery').getBoundingClientRect().height"
                )
                print(f"page {height} px tall, the gallery {gallery:.0f} px")
                browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    print(out / "gallery-gemma3.png")


if __name__ == "__main__":
    main()
