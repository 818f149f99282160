"""Every-head views without a browser: the gallery, the per-head maps the browser switches between,
the head view, the model view, the packed attention they read, and the PE colour scales."""

from __future__ import annotations

import json

import numpy as np
import pytest

from frontend import figures as F
from frontend import figures_gallery as G
from frontend import figures_headview as HV
from frontend.figures_pe import pe_distance_figure
from frontend.heads import grid_attention, head_attention
from workers.packing import MAX_PACKED_BYTES, pack_attention, unpack_attention

TEXT = "The cat sat on the mat because the dog was tired."
LAYER, HEAD = 1, 2  # the requested head; every other head comes from the gallery section


@pytest.fixture(scope="module")
def page_result(minilm):
    """What the text explorer's Analyze asks for, computed as the queue job computes it."""
    from frontend.pages.text import text_request
    from workers.contracts import AnalysisRequest
    from workers.jobs import compute_analysis

    req = text_request(text=TEXT, model="minilm", drop_special=False, restarts=1, layer=LAYER, head=HEAD)
    res = compute_analysis(AnalysisRequest.model_validate(req), progress=lambda *_: None, on_partial=lambda _: None)
    return json.loads(json.dumps(res))  # as the API serves it


@pytest.fixture(scope="module")
def attentions(minilm):
    from workers.models import run_text

    return run_text(minilm, TEXT).attentions  # [layer, head, query, key]


def test_packed_attention_is_every_head_to_one_byte(attentions):
    n = attentions.shape[-1]
    kept = np.arange(1, n - 1)  # special tokens dropped
    packed = pack_attention(attentions, layers=[0, 3], heads=[1, 4, 7], kept=kept)
    assert packed["attention_shape"] == [2, 3, n - 2, n - 2]
    back = unpack_attention(packed)  # [layer, head, query, key]
    exact = attentions[np.ix_([0, 3], [1, 4, 7], kept, kept)]
    assert np.abs(back - exact).max() <= 0.5 / 255 + 1e-6
    big = np.zeros((1, 1, 1, 1), dtype=np.float32)
    too_many = pack_attention(np.broadcast_to(big, (8, 8, 1, 1)), layers=list(range(8)), heads=list(range(8)),
                              kept=np.zeros(int(np.sqrt(MAX_PACKED_BYTES / 64)) + 2, dtype=int))
    assert "attention_u8" not in too_many and "MiB" in too_many["attention_omitted"]


def test_gallery_has_one_panel_per_head_titled_with_its_kl(page_result):
    fig = G.gallery_figure(page_result)
    sec = page_result["head-tsne-all"]
    n_layers, n_heads = page_result["n_layers"], page_result["n_heads"]
    meta = fig.layout.meta["gallery"]
    assert meta["panels"] == [[la, h] for la in range(n_layers) for h in range(n_heads)]  # 72 for MiniLM
    titles = [a.text for a in fig.layout.annotations]
    kl = np.asarray(sec["kl"])
    assert titles[n_heads * 3 + 4] == f"L3 H4 · KL {kl[3, 4]:.2f}"
    n = len(sec["kept"])
    points = fig.data[1:]  # fig.data[0] draws the panel frames
    assert len(points) == n_layers and all(len(t.x) == n_heads * n for t in points)
    for r, trace in enumerate(points):
        x, y = np.asarray(trace.x), np.asarray(trace.y)
        col = np.repeat(np.arange(n_heads), n)
        assert np.all((x >= col * G.SX - 1e-9) & (x <= col * G.SX + 1 + 1e-9))  # each head in its panel
        assert np.all((y >= r * G.SY - 1e-9) & (y <= r * G.SY + 1 + 1e-9))
        assert list(trace.marker.color[:n]) == sec["kept"]  # coloured by position
        # quantile-equidistant: a panel's x spans [0, 1] of its cell, evenly by rank
        ux = np.sort(x[:n])
        assert ux[0] == pytest.approx(0.0) and ux[-1] == pytest.approx(1.0)
    assert [t.type for t in points] == ["scatter"] * n_layers
    assert all(t.type == "scattergl" for t in G.gallery_figure(page_result, webgl=True).data[1:])


def test_gallery_pages_by_whole_layers(page_result):
    assert G.gallery_pages(list(range(16)), 32) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11], [12, 13, 14], [15]]
    assert G.gallery_pages([0, 1], 200) == [[0], [1]]  # a layer wider than a page still gets one
    second = G.gallery_figure(page_result, page=1, max_panels=24)
    assert second.layout.meta["gallery"]["layers"] == [2, 3] and len(second.data) == 3
    assert second.layout.meta["gallery"]["pages"] == 3
    chosen = G.gallery_figure(page_result, layers=[5, 1])
    assert chosen.layout.meta["gallery"]["layers"] == [5, 1]
    assert [o["label"] for o in G.gallery_page_options(page_result)] == ["layers 0–5"]


def test_head_maps_are_what_the_server_would_draw(page_result):
    maps = G.head_maps(page_result)
    assert len(maps["maps"]) == page_result["n_layers"] * page_result["n_heads"]
    assert maps["labels"] == F.readable_tokens(page_result)
    for layer, head in [(LAYER, HEAD), (0, 0), (3, 4), (5, 11)]:
        m = maps["maps"][f"{layer},{head}"]
        for rescale, (xs, ys) in ((True, ("x", "y")), (False, ("xr", "yr"))):
            fig = F.head_tsne_figure(page_result, layer=layer, head=head, rescale=rescale)
            np.testing.assert_allclose(m[xs], fig.data[0].x, atol=1e-5)
            np.testing.assert_allclose(m[ys], fig.data[0].y, atol=1e-5)
            assert m["title"] == fig.layout.title.text
        assert list(m["xaxis"]["ticktext"]) == list(F.head_tsne_figure(page_result, layer=layer, head=head)
                                                    .layout.xaxis.ticktext)
    # the requested head is the exact one-head section's map, not the gallery's copy of it
    np.testing.assert_allclose(maps["maps"][f"{LAYER},{HEAD}"]["xr"],
                               np.asarray(page_result["head-tsne"]["embedding"])[:, 0], atol=1e-5)
    tpl = maps["templates"]["rescaled"]
    assert tpl["data"][0]["type"] == "scatter" and tpl["layout"]["meta"]["highlight"] == "points"


def test_matrix_and_hidden_map_follow_any_head(page_result, attentions):
    fig = F.attention_matrix_figure(page_result, layer=4, head=7)  # not the requested head
    assert "1/255" in fig.layout.title.text
    assert np.abs(np.asarray(fig.data[0].z) - attentions[4, 7]).max() <= 0.5 / 255 + 1e-6
    exact = F.attention_matrix_figure(page_result, layer=LAYER, head=HEAD)
    assert "1/255" not in exact.layout.title.text
    np.testing.assert_allclose(np.asarray(exact.data[0].z), attentions[LAYER, HEAD], atol=1e-6)
    for state in range(page_result["n_layers"] + 1):  # every hidden state is in the one result
        assert f"X[{state}]" in F.hidden_tsne_figure(page_result, state=state).layout.title.text
    assert "KL attention-head t-SNE (layer 4, head 7)" in F.kl_summary(page_result, layer=4, head=7)


def test_head_view_draws_one_line_per_pair_above_the_threshold(page_result):
    threshold = 0.1
    fig = HV.head_view_figure(page_result, layer=3, heads=[4, 9], threshold=threshold)
    meta = fig.layout.meta["headview"]
    colours: dict[str, set[str]] = {}
    for head in (4, 9):
        a = head_attention(page_result, 3, head)[0]  # [query, key]
        expected = {(int(q), int(k)) for q, k in zip(*np.nonzero(a >= threshold), strict=True)}
        drawn = []
        for t, pairs in zip(meta["traces"], meta["pairs"], strict=True):
            trace = fig.data[t]
            if trace.name != f"head {head}":
                continue
            colours.setdefault(trace.line.color, set()).add(head)
            xs, ys = list(trace.x), list(trace.y)
            segs = [(int(ys[i]), int(ys[i + 1])) for i in range(0, len(xs), 3)]  # [x0, x1, None] per line
            assert all(xs[i : i + 3] == [0.0, 1.0, None] for i in range(0, len(xs), 3))
            assert segs == [tuple(p) for p in pairs]
            drawn += segs
            if pairs:  # opacity grows with the weight bin
                w = [a[q, k] for q, k in pairs]
                assert trace.opacity == HV.BIN_OPACITY[int(np.digitize(w[0], HV.OPACITY_BINS[1:-1]))]
        assert len(drawn) == len(expected) and set(drawn) == expected
    assert len(colours) == 2 and all(len(v) == 1 for v in colours.values())  # one colour per head
    tokens = [t for t in fig.data if t.name == "querys"][0]
    assert list(tokens.text) == F.readable_tokens(page_result)
    fewer = HV.head_view_figure(page_result, layer=3, heads=[4], threshold=0.5)
    assert sum(len(p) for p in fewer.layout.meta["headview"]["pairs"]) < len(drawn)


def test_model_view_tiles_every_head_and_names_a_clicked_one(page_result):
    fig = HV.model_view_figure(page_result, layer=2, head=3)
    meta = fig.layout.meta["modelview"]
    n = len(page_result["head-tsne-all"]["kept"])
    s, stride = meta["size"], meta["stride"]
    assert s == min(n, HV.MODEL_CELLS) and stride == s + 1
    z = np.asarray(fig.data[0].z, dtype=float)
    assert z.shape == (6 * stride - 1, 12 * stride - 1)
    grid = grid_attention(page_result["head-tsne-all"])
    block = z[2 * stride : 2 * stride + s, 3 * stride : 3 * stride + s]
    np.testing.assert_allclose(block, grid[2, 3] / grid[2, 3].max(), atol=1e-3)
    assert np.isnan(z[s, :]).all()  # a gap row between layers
    assert HV.model_view_click({"points": [{"x": 3 * stride + 1, "y": 2 * stride + 2}]}, meta) == (2, 3)
    assert HV.model_view_click({"points": [{"x": stride - 1, "y": 0}]}, meta) is None  # the gap
    assert len(fig.layout.shapes) == 1  # the selected head is framed


def test_text_export_holds_the_every_head_views(page_result):
    from frontend.pages.text import _figures

    figs = _figures(page_result, 3, 4, ["rescale"], "max", None, 0, [1], 0.2)
    kinds = [f.layout.meta for f in figs]
    assert len(figs) == 7  # heatmaps, map, hidden map, matrix, gallery, head view, model view
    assert "gallery" in kinds[4] and kinds[5]["headview"]["heads"] == [4, 1] and "modelview" in kinds[6]
    assert kinds[5]["headview"]["threshold"] == 0.2


def test_pe_heatmaps_get_their_own_colour_scales_unless_shared():
    rng = np.random.default_rng(0)

    def report(sigma: float) -> dict:
        e = rng.normal(size=(16, 8)) * sigma
        d = np.linalg.norm(e[:, None] - e[None], axis=-1)
        return {"name": f"sigma {sigma}", "distance_matrix": d.tolist(), "shape": [16, 8]}

    result = {"checkpoints": [report(1.0), report(0.2)]}
    own = pe_distance_figure(result)
    assert [t.coloraxis for t in own.data] == ["coloraxis", "coloraxis2"]
    for t, axis in zip(own.data, (own.layout.coloraxis, own.layout.coloraxis2), strict=True):
        z = np.asarray(t.z)
        assert (axis.cmin, axis.cmax) == (pytest.approx(z.min()), pytest.approx(z.max()))
    assert own.layout.coloraxis2.cmax < 0.5 * own.layout.coloraxis.cmax  # the narrow one is not flat
    shared = pe_distance_figure(result, shared_scale=True)
    assert [t.coloraxis for t in shared.data] == ["coloraxis", "coloraxis"]
    assert "coloraxis2" not in shared.to_plotly_json()["layout"]


def test_a_webgl_page_waits_with_one_transparent_point_a_row(page_result):
    """WebGL starts with the first point drawn: a WebGL page drawn before its layers are computed holds
    one transparent, unhoverable point per waiting row, so it starts while the layers are computed."""
    grid = {k: v for k, v in page_result.items() if k != "head-tsne-all"}
    skeleton = G.skeleton_section(grid)
    assert skeleton["layers"] == [] and skeleton["partial"]["layers"] == list(range(page_result["n_layers"]))
    waiting = G.gallery_figure(grid, section=skeleton, webgl=True)
    rows = waiting.data[1:]
    assert len(rows) == page_result["n_layers"] and all(t.type == "scattergl" for t in rows)
    assert all(len(t.x) == 1 and t.marker.opacity == 0 and t.hoverinfo == "skip" for t in rows)
    assert waiting.layout.meta["gallery"]["panels"] == [] and waiting.layout.meta["gallery"]["complete"] is False
    assert all(len(t.x) == 0 for t in G.gallery_figure(grid, section=skeleton, webgl=False).data[1:])  # SVG: empty


def test_a_page_of_more_points_than_webgl_points_draws_with_webgl(page_result, monkeypatch):
    """Each arriving row redraws the gallery page, so a page beyond ``WEBGL_POINTS`` points draws with
    WebGL (SVG redraws every point); at or below it, SVG. A 452-token SmolLM2 page (10 layers x 9
    heads) and a 128-token MiniLM page (72 heads) are both beyond it."""
    n_heads, n = page_result["n_heads"], len(page_result["head-tsne-all"]["kept"])
    monkeypatch.setattr(G, "WEBGL_POINTS", 2 * n_heads * n)  # two layers' points
    kinds = {k: {t.type for t in G.gallery_figure(page_result, layers=list(range(k))).data[1:]} for k in (1, 2, 3)}
    assert kinds == {1: {"scatter"}, 2: {"scatter"}, 3: {"scattergl"}}
    assert G.gallery_figure(page_result, layers=[0, 1, 2]).data[0].type == "scatter"  # the frames stay SVG
    assert G.gallery_page(page_result, layers=[0, 1, 2]).shape["webgl"] is True  # a new shape: drawn anew
    monkeypatch.undo()
    assert 10 * 9 * 452 > G.WEBGL_POINTS and 6 * 12 * 128 > G.WEBGL_POINTS
