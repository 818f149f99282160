"""Size of a notebook's views: plotly.js once per notebook, each output small (frontend/notebook/__init__.py).

Run from the repository root::

    PYTHONPATH=. .venv/bin/python -m tests.bench.bench_notebook_html [--layers 3] [--heads 4] [--tokens 16]

Random attention of a ``layers`` x ``heads`` model (softmax of Gaussian scores, ``tokens`` tokens)
drawn as a notebook would, in one process: ``hs.gallery`` first, then ``hs.heatmaps``,
``hs.head_map`` and ``hs.head_view``. Printed: each output's HTML in KB, the notebook (.ipynb) and
the page nbconvert makes of it, each against plotly.js itself (the reference: what an output that
inlines the bundle cannot be smaller than).
"""

from __future__ import annotations

import argparse

import numpy as np
import plotly.offline


def notebook_outputs(*, layers: int, heads: int, tokens: int) -> list[tuple[str, str]]:
    """(view name, its inline HTML) for four views, in the order a notebook shows them."""
    import torch

    from frontend import notebook as hs

    rng = np.random.default_rng(0)
    scores = torch.tensor(rng.normal(size=(layers, 1, heads, tokens, tokens)))
    attention = tuple(torch.softmax(scores[i], dim=-1) for i in range(layers))
    words = [f"w{i}" for i in range(tokens)]
    result = hs.attention(attention, words, options={"n_iter": 100, "early_exaggeration_iter": 50})
    views = [
        ("gallery", hs.gallery(result)),
        ("heatmaps", hs.heatmaps(result)),
        ("head_map", hs.head_map(result, layer=1, head=2)),
        ("head_view", hs.head_view(result, layer=1)),
    ]
    return [(name, view._repr_html_()) for name, view in views]


def nbconvert_page(outputs: list[tuple[str, str]]) -> tuple[int, int]:
    """Bytes of the .ipynb holding these outputs and of nbconvert's HTML page of it."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.v4.new_notebook()
    for i, (name, page) in enumerate(outputs):
        cell = nbformat.v4.new_code_cell(f"hs.{name}(result)", execution_count=i + 1)
        cell.outputs = [nbformat.v4.new_output("display_data", data={"text/html": page})]
        nb.cells.append(cell)
    body, _ = HTMLExporter().from_notebook_node(nb)
    return len(nbformat.writes(nb).encode()), len(body.encode())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=16)
    args = ap.parse_args()
    bundle = len(plotly.offline.get_plotlyjs().encode())
    outputs = notebook_outputs(layers=args.layers, heads=args.heads, tokens=args.tokens)
    print(
        f"{args.layers} layers x {args.heads} heads, {args.tokens} tokens; plotly.js itself: {bundle / 1e3:,.0f} KB"
    )
    for name, page in outputs:
        size = len(page.encode())
        own = size - (bundle if "plotly.js v" in page else 0)
        print(
            f"  {name:10s} output: {size / 1e3:9,.1f} KB ({size / bundle:.3f} x plotly.js; "
            f"{'with' if own < size else 'without'} the bundle, {own / 1e3:,.1f} KB of its own)"
        )
    ipynb, html = nbconvert_page(outputs)
    print(
        f"  notebook (.ipynb): {ipynb / 1e3:,.0f} KB ({ipynb / bundle:.2f} x plotly.js); "
        f"as HTML (nbconvert): {html / 1e3:,.0f} KB ({html / bundle:.2f} x plotly.js)"
    )


if __name__ == "__main__":
    main()
