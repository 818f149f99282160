"""Screenshots of docs/walkthrough-smollm2.md: a fresh ``headscope serve`` with SmolLM2 preloaded and a
headless Chromium (Debian's, via playwright) on the text explorer.

    PYTHONPATH=. .venv/bin/python scripts/shots_smollm2.py [--out docs/img]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TEXT = (
    'We present a new technique called "t-SNE" that visualizes high-dimensional data by giving each '
    "datapoint a location in a two or three-dimensional map. The technique is a variation of "
    "Stochastic Neighbor Embedding that is much easier to optimize."
)
WAIT_MS = 600_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/img")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    from tests.bench.bench_service import start_serve

    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_serve(Path(tmp), workers=1, model="smollm2")
        try:
            with sync_playwright() as pw, tempfile.TemporaryDirectory() as profile:
                ctx = pw.chromium.launch_persistent_context(
                    profile,
                    executable_path=CHROMIUM,
                    args=ARGS,
                    viewport={"width": 1100, "height": 900},
                )
                page = ctx.new_page()
                page.goto(url + "/text")
                page.click("#text-model")
                page.get_by_role("option", name="smollm2").first.click()
                page.fill("#text-input", TEXT)
                page.click("#analyze-button")
                page.wait_for_function(
                    "document.querySelector('#text-status').textContent.includes('done')",
                    timeout=WAIT_MS,
                )
                page.wait_for_function("location.search.includes('analysis=')", timeout=60_000)
                analysis = page.url.split("analysis=")[1].split("&")[0]

                page.goto(f"{url}/?analysis={analysis}&layers=0,2,11,16,29&layer=16&head=0")
                page.wait_for_selector("#max-attention-graph .heatmaplayer", timeout=WAIT_MS)
                page.wait_for_function(
                    "document.querySelector('#attention-matrix-graph .js-plotly-plot')?.layout"
                    "?.title?.text?.includes('layer 16, head 0')",
                    timeout=WAIT_MS,
                )
                page.wait_for_timeout(1500)
                page.locator("#max-attention-graph").screenshot(path=str(out / "smollm2-sink.png"))
                page.locator("#attention-matrix-graph").screenshot(
                    path=str(out / "smollm2-previous-token.png")
                )
                page.wait_for_function(
                    "(document.querySelector('#head-gallery .js-plotly-plot')?.layout?.meta"
                    "?.gallery?.panels?.length || 0) > 0",
                    timeout=WAIT_MS,
                )
                page.wait_for_timeout(1500)
                page.locator("#head-gallery").screenshot(path=str(out / "smollm2-gallery.png"))
                ctx.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    for p in sorted(out.glob("smollm2-*.png")):
        print(p, f"{p.stat().st_size / 1024:.0f} kB")


if __name__ == "__main__":
    main()
