"""Screenshots of the /circuits page for docs/circuits.md and docs/walkthrough-gemma3.md: a fresh
``headscope serve`` (one worker) and a headless Chromium (Debian's, via playwright); each case entered
on the page as a user would (model, clean and corrupted text, target), run, and every figure saved,
with the hover label of the flow graph's strongest attention edge into the start position shown.

    PYTHONPATH=. nice -n 10 .venv/bin/python scripts/shots_circuits.py [--out docs/img] [--cases eiffel-smollm2 ...]

Prints, per case, what the page drew (circuit size and faithfulness, AtP's correlations, the flow
graph's title) and the wall time of the jobs, so the figures in the docs can be checked against it.
"""

from __future__ import annotations

import argparse
import tempfile
import time
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
WAIT_MS = 1_800_000
IOI = (
    "When Mary and John went to the store, John gave a drink to",
    "When Mary and John went to the store, Mary gave a drink to",
    "␣Mary|␣John",
)
EIFFEL = (
    "The Eiffel Tower is located in the city of",
    "The Colosseum is located in the city of",
    "␣Paris|␣Rome",
)
CASES = {
    "ioi-smollm2": ("smollm2", *IOI),
    "eiffel-smollm2": ("smollm2", *EIFFEL),
    "eiffel-gemma3": ("gemma3-270m", *EIFFEL),
    "ioi-gemma3": ("gemma3-270m", *IOI),
}
GRAPHS = ("circuit", "curve", "atp", "flow")
DONE_JS = (
    "document.querySelector('#circuits-status').textContent.trim() === 'done'"
    " || document.querySelector('#circuits-error').textContent"
)
TITLE_JS = (
    "(id) => { const gd = document.querySelector('#' + id + ' .js-plotly-plot'); "
    "return gd && gd.layout.title ? gd.layout.title.text : null; }"
)
EDGE_JS = r"""() => {
  const gd = document.querySelector('#circuits-flow-graph .js-plotly-plot'), fl = gd._fullLayout;
  const i = gd.data.findIndex(t => t.customdata && t.customdata.length);
  if (i < 0) return null;
  const t = gd.data[i], p = gd.layout.title.text.match(/into token (\d+)/)[1], into = ' → token ' + p + ' (';
  let k = 0, best = -1;  // the strongest attention edge into the start position from another token
  t.text.forEach((s, j) => {
    const from = (s.match(/: token (\d+) /) || [])[1], v = parseFloat((s.split('via attention: ')[1] || '-1'));
    if (s.includes(into) && from !== p && v > best) { best = v; k = j; }
  });
  const r = gd.getBoundingClientRect();
  return [r.left + fl.xaxis._offset + fl.xaxis.l2p(t.x[k]), r.top + fl.yaxis._offset + fl.yaxis.l2p(t.y[k])];
}"""


def run_case(
    page, url: str, out: Path, name: str, model: str, clean: str, corrupted: str, target: str
) -> None:
    page.goto(url + "/circuits")
    page.click("#circuits-model")
    page.get_by_role("option", name=model).first.click()
    page.fill("#circuits-text", clean)
    page.fill("#circuits-corrupted", corrupted)
    page.fill("#circuits-target", target)
    page.press("#circuits-target", "Tab")
    t0 = time.monotonic()
    page.click("#circuits-analyze")
    page.wait_for_function(DONE_JS, timeout=WAIT_MS)
    took = time.monotonic() - t0
    error = page.inner_text("#circuits-error")
    for g in GRAPHS:
        if not error or g == "flow":
            page.wait_for_selector(f"#circuits-{g}-graph .scatterlayer .point", timeout=WAIT_MS)
    page.wait_for_timeout(2000)
    print(
        f"{name}: {model}, jobs {took:.0f} s, url {page.url.split('/circuits')[1]}"
        + (f", error: {error}" if error else "")
    )
    for g in GRAPHS:
        print(
            f"  {g}: {(page.evaluate(TITLE_JS, f'circuits-{g}-graph') or '').replace('<br>', ' | ')}"
        )
    page.screenshot(path=str(out / f"circuits-{name}-page.png"), full_page=True)
    for g in GRAPHS:
        page.locator(f"#circuits-{g}-graph").screenshot(path=str(out / f"circuits-{name}-{g}.png"))
    if not error:  # the size the page opened at, the slider's range, the layout by token position
        marks = page.inner_text("#circuits-n-slider").split()
        print(f"  opened at: {page.inner_text('#circuits-n-note')}; slider marks {marks}")
        page.get_by_label("by token position").check()
        page.wait_for_function(
            "new URLSearchParams(window.location.search).get('layout') === 'position'",
            timeout=WAIT_MS,
        )
        page.wait_for_timeout(2000)
        page.locator("#circuits-circuit-graph").screenshot(
            path=str(out / f"circuits-{name}-circuit-position.png")
        )
        page.get_by_label("by head").check()
        page.wait_for_timeout(1000)
        thumb = page.locator("#circuits-n-slider [role=slider]").first
        thumb.focus()
        page.keyboard.press("End")  # the curve's largest circuit, past the listed edges
        page.wait_for_function(
            "document.querySelector('#circuits-n-note').textContent.includes('page opens at')",
            timeout=WAIT_MS,
        )
        page.wait_for_timeout(2000)
        title = page.evaluate(TITLE_JS, "circuits-circuit-graph") or ""
        print(f"  largest: {title.replace('<br>', ' ')}")
        page.locator("#circuits-circuit-graph").screenshot(
            path=str(out / f"circuits-{name}-circuit-largest.png")
        )
    page.locator("#circuits-flow-graph").scroll_into_view_if_needed()
    xy = page.evaluate(EDGE_JS)
    if xy:
        page.mouse.move(*xy)
        page.wait_for_timeout(800)
        page.locator("#circuits-flow-graph").screenshot(
            path=str(out / f"circuits-{name}-flow-hover.png")
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/img")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    from tests.bench.bench_service import start_serve

    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_serve(Path(tmp), workers=1, model=CASES[args.cases[0]][0])
        try:
            with sync_playwright() as pw, tempfile.TemporaryDirectory() as profile:
                ctx = pw.chromium.launch_persistent_context(
                    profile,
                    executable_path=CHROMIUM,
                    args=ARGS,
                    viewport={"width": 1400, "height": 1000},
                )
                page = ctx.new_page()
                problems: list[str] = []
                page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
                page.on(
                    "console",
                    lambda m: problems.append(f"console: {m.text}") if m.type == "error" else None,
                )
                for name in args.cases:
                    run_case(page, url, out, name, *CASES[name])
                print("browser problems:", problems or "none")
                ctx.close()
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    for p in sorted(out.glob("circuits-*-*.png")):
        print(p, f"{p.stat().st_size / 1024:.0f} kB")


if __name__ == "__main__":
    main()
