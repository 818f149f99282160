"""Screenshot of the comparison page's two head atlases side by side (docs/atlas.md): a fresh
``headscope serve`` computes both models' default atlases, then a headless Chromium (Debian's, via
playwright) opens ``/compare`` with the two models picked and shoots the atlas panel.

    PYTHONPATH=. .venv/bin/python scripts/shots_compare_atlas.py [--a minilm] [--b smollm2] [--out docs/img]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]
WAIT_S = 1800


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", default="minilm")
    parser.add_argument("--b", default="smollm2")
    parser.add_argument("--out", default="docs/img")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    from frontend.kit.api_client import ApiClient
    from frontend.kit.atlas_labels import atlas_request
    from tests.bench.bench_service import start_serve

    path = out / f"compare-atlas-{args.a}-{args.b}.png"
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_serve(Path(tmp), workers=1, model=args.b, threads=2)
        try:
            client = ApiClient(url)
            for model in (args.a, args.b):  # one after the other: one worker
                job = client.submit_analysis(**atlas_request(model=model))
                deadline = time.monotonic() + WAIT_S
                while client.analysis(job["id"], partial="none")["status"] != "finished":
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"the atlas of {model} did not finish")
                    time.sleep(2)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(url + "/compare")
                for side, model in (("a", args.a), ("b", args.b)):
                    page.click(f"#compare-model-{side}")
                    page.get_by_role("option", name=model).first.click()
                page.wait_for_function(
                    "(([a, b]) => { const gd = document.querySelector('#compare-atlas-graph .js-plotly-plot');"
                    " const bars = gd ? gd._fullData.filter(t => t.type === 'bar') : [];"
                    " return bars.length === 2 && bars[0].name.startsWith('A ' + a + ' ')"
                    " && bars[1].name.startsWith('B ' + b + ' '); })",
                    arg=[args.a, args.b],
                    timeout=120_000,
                )
                page.wait_for_timeout(1000)
                panel = page.locator("#compare-atlas-panel")
                panel.scroll_into_view_if_needed()
                panel.screenshot(path=str(path))
                browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    print(path)


if __name__ == "__main__":
    main()
