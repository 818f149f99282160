"""The gallery's first row as a static SVG (``frontend/pages/text/preview.py``), for a stored result's
link: one circle per token per head of the first row's layers, where the gallery's picture puts it,
coloured by position, and the page's HTML asks for it (docs/dashboard.md, "The first row before
plotly.js")."""

from __future__ import annotations

import re

import numpy as np

from frontend.figures.gallery import PAD, SX, first_row_points, gallery_page
from frontend.figures.thumbnails import VIRIDIS
from frontend.pages.text.preview import first_row_svg, stored_preview
from workers.analyses.tsne.spec import ALL_HEADS

CIRCLE = re.compile(r'<circle cx="([-\d.]+)" cy="([-\d.]+)" r="[\d.]+" fill="(#[0-9a-f]{6})"/>')


def _result(n_layers: int, n_heads: int, n: int, *, done: int | None = None) -> dict:
    rng = np.random.default_rng(0)
    done = n_layers if done is None else done
    return {
        ALL_HEADS: {
            "layers": list(range(done)),
            "heads": list(range(n_heads)),
            "kept": list(range(n)),
            "embedding": rng.normal(size=(done, n_heads, n, 2)).tolist(),
            "kl": rng.random((done, n_heads)).tolist(),
            "partial": {"layers_done": done, "layers": list(range(n_layers))},
        }
    }


def _panels(svg: str) -> list[list[tuple[float, float, str]]]:
    groups = re.findall(r'<g class="preview-panel"[^>]*>(.*?)</g>', svg)
    return [[(float(x), float(y), c) for x, y, c in CIRCLE.findall(g)] for g in groups]


def test_one_circle_per_token_per_head_of_the_first_layer_where_the_gallery_draws_it() -> None:
    n, heads = 40, 9  # SmolLM2-shaped: 9 heads a layer, one layer a row
    result = _result(3, heads, n)
    svg = first_row_svg(result)
    assert svg is not None and svg.startswith("<svg")
    panels = _panels(svg)
    assert len(panels) == heads and all(len(p) == n for p in panels)
    assert re.findall(r'data-layer="(\d+)"', svg) == ["0"] * heads
    gp = gallery_page(result)
    assert not isinstance(gp, str)
    px = first_row_points(gp)["height"] / (1 + 2 * PAD)  # screen pixels a unit
    emb = np.asarray(result[ALL_HEADS]["embedding"][0])
    for c, panel in enumerate(panels):
        xs = np.array([x for x, _, _ in panel])
        # the head's rightmost point on its panel's right edge, its leftmost on the left, as the picture
        assert abs(xs[np.argmax(emb[c, :, 0])] - (PAD + c * SX + 1) * px) < 0.1
        assert abs(xs[np.argmin(emb[c, :, 0])] - (PAD + c * SX) * px) < 0.1
        ys = np.array([y for _, y, _ in panel])  # y points down: the highest point at the top
        assert abs(ys[np.argmax(emb[c, :, 1])] - PAD * px) < 0.1
    # coloured by position, from the scale's low end (token 0) to its high end (the last)
    assert panels[0][0][2] == VIRIDIS[0] and panels[0][-1][2] == VIRIDIS[-1]


def test_a_row_of_several_layers_and_a_row_not_computed() -> None:
    n, heads = 12, 3  # 3 heads a layer: 4 layers a row
    svg = first_row_svg(_result(6, heads, n, done=2))
    assert svg is not None
    assert re.findall(r'data-layer="(\d+)"', svg) == ["0"] * heads + ["1"] * heads
    assert sum(len(p) for p in _panels(svg)) == 2 * heads * n
    assert first_row_svg(_result(6, heads, n, done=0)) is None  # nothing computed: no picture
    assert first_row_svg({}) is None


def test_the_preview_reads_the_share_through_the_store_and_the_page_asks_for_it() -> None:
    from frontend.app import PREVIEW_PATH, preview_tag

    class Store:
        def opening(self, share_id):  # type: ignore[no-untyped-def]
            return {"id": share_id, "kind": "analysis"}

        def status(self, source):  # type: ignore[no-untyped-def]
            assert source == {"kind": "share", "id": "abc"}
            return {"status": "finished", "result": _result(2, 4, 8), "view": {"page": "text"},
                    "share_kind": "analysis"}  # fmt: skip

    svg = stored_preview(Store(), {"share": "abc"})  # type: ignore[arg-type]
    assert (
        svg is not None and len(CIRCLE.findall(svg)) == 2 * 4 * 8
    )  # 4 heads: 3 layers a row, 2 computed
    assert stored_preview(Store(), {}) is None  # type: ignore[arg-type]
    tag = preview_tag("/", {"share": "abc", "layer": "2"})
    assert 'id="stored-preview"' in tag and f'"/{PREVIEW_PATH}?share=abc"' in tag
    assert preview_tag("/", {"text": "x"}) == ""
    assert "</script>" not in preview_tag("/", {"analysis": "</script>"}).split("<script>")[1][:-9]
