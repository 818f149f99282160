"""Every-head views without a browser: the gallery, the per-head maps the browser switches between,
the head view, the model view, the packed attention they read, and the PE colour scales."""

from __future__ import annotations

import json

import numpy as np
import pytest

from frontend.figures import gallery as G
from frontend.figures import headview as HV
from frontend.figures import thumbnails as T
from frontend.figures.attention import attention_matrix_figure
from frontend.figures.positional import pe_distance_figure
from frontend.figures.tokens import readable_tokens
from frontend.figures.tsne import head_tsne_figure, hidden_tsne_figure, kl_summary
from frontend.kit.heads import grid_attention, head_attention
from workers.core.packing import MAX_PACKED_BYTES, pack_attention, unpack_attention

TEXT = "The cat sat on the mat because the dog was tired."
LAYER, HEAD = 1, 2  # the requested head; every other head comes from the gallery section


@pytest.fixture(scope="module")
def page_result(minilm):
    """What the text explorer's Analyze asks for, computed as the queue job computes it."""
    from frontend.pages.text import text_request
    from workers.core.contracts import AnalysisRequest
    from workers.queue.jobs import compute_analysis

    req = text_request(
        text=TEXT, model="minilm", drop_special=False, restarts=1, layer=LAYER, head=HEAD
    )
    res = compute_analysis(
        AnalysisRequest.model_validate(req), progress=lambda *_: None, on_partial=lambda _: None
    )
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
    too_many = pack_attention(
        np.broadcast_to(big, (8, 8, 1, 1)),
        layers=list(range(8)),
        heads=list(range(8)),
        kept=np.zeros(int(np.sqrt(MAX_PACKED_BYTES / 64)) + 2, dtype=int),
    )
    assert "attention_u8" not in too_many and "MiB" in too_many["attention_omitted"]


def test_gallery_has_one_panel_per_head_titled_with_its_kl(page_result):
    fig = G.gallery_figure(page_result)
    sec = page_result["head-tsne-all"]
    n_layers, n_heads = page_result["n_layers"], page_result["n_heads"]
    meta = fig.layout.meta["gallery"]
    assert meta["panels"] == [
        [la, h] for la in range(n_layers) for h in range(n_heads)
    ]  # 72 for MiniLM
    titles = list(
        fig.data[2].text
    )  # one text trace: no layout annotations (Plotly redraws all of them on any change)
    kl = np.asarray(sec["kl"])
    assert (
        titles[n_heads * 3 + 4] == f"L3H4 · KL {kl[3, 4]:.2f}" and len(titles) == n_layers * n_heads
    )
    assert fig.data[2].mode == "text" and not fig.layout.annotations
    n = len(sec["kept"])
    assert [t.type for t in fig.data] == [
        "scatter"
    ] * 3  # the frames, the colour bar, the titles: no points plotted
    assert fig.layout.meta["gallery"].get("webgl") is None and fig.layout.hovermode is False
    images = fig.layout.images
    assert len(images) == n_layers and all(im.visible for im in images)
    emb = np.asarray(sec["embedding"])  # [layer, head, token, 2]
    for r, im in enumerate(images):
        assert (im.xref, im.yref, im.x, im.y, im.sizey) == (
            "x",
            "y",
            -G.PAD,
            r * G.SY - G.PAD,
            1 + 2 * G.PAD,
        )
        img = T.read_png(im.source)  # [height, width, RGBA]
        scale = G._pixels_per_unit(G.gallery_page(page_result))  # picture pixels per data unit
        assert img.shape[:2] == (round(im.sizey * scale), round(im.sizex * scale))
        for c in range(n_heads):
            # each point is drawn at its quantile-equidistant place in the head's panel, coloured by position
            ux, uy = G._unit(emb[r, c, :, 0]), G._unit(emb[r, c, :, 1])
            px = np.rint((G.PAD + c * G.SX + ux) * scale).astype(int)
            py = np.rint((G.PAD + 1 - uy) * scale).astype(int)
            assert (img[py, px, 3] == 255).all()  # every point's centre is painted
            last = {}  # pixel -> the last point drawn there (a later point covers an earlier one)
            for k, pix in enumerate(zip(py.tolist(), px.tolist(), strict=True)):
                last[pix] = k
            colours = T.palette()[
                T.palette_index(
                    np.asarray(sec["kept"], float), lo=min(sec["kept"]), hi=max(sec["kept"])
                )
            ]
            exact = T.colour_scale(
                np.asarray(sec["kept"], float), lo=min(sec["kept"]), hi=max(sec["kept"])
            )
            assert (
                np.abs(colours.astype(int) - exact).max() <= 2
            )  # the nearest of 255 colours of the scale
            for (y, x), k in list(last.items())[:: max(1, len(last) // 20)]:
                # the point's own colour, or a later point's whose disc reaches over it
                near = [j for j in range(k, n) if abs(px[j] - x) <= 3 and abs(py[j] - y) <= 3]
                assert any((img[y, x, :3] == colours[j]).all() for j in near), (r, c, k)
        # nothing is painted between the panels: the columns of the gaps are transparent
        for c in range(n_heads - 1):
            gap = slice(
                int(np.ceil((G.PAD + c * G.SX + 1) * scale + 5)),
                int((G.PAD + (c + 1) * G.SX) * scale - 5),
            )
            assert not img[:, gap, 3].any(), (c, gap, np.argwhere(img[:, gap, 3]))
    assert ux.min() == pytest.approx(0.0) and ux.max() == pytest.approx(
        1.0
    )  # each panel spans its unit square


def test_gallery_pictures_are_valid_pngs_on_plotlys_viridis():
    """The pictures' colours are plotly's Viridis as the colour bar draws it (255 of them), and a picture
    reads back exactly."""
    import plotly.colors

    stops = plotly.colors.sequential.Viridis
    assert T.VIRIDIS == tuple(stops)
    got = T.colour_scale(np.array([0.0, 0.5, 1.0, 2.0, -1.0]), lo=0.0, hi=1.0)
    want = [
        plotly.colors.hex_to_rgb(stops[0]),
        plotly.colors.find_intermediate_color(
            plotly.colors.hex_to_rgb(stops[4]), plotly.colors.hex_to_rgb(stops[5]), 0.5
        ),
        plotly.colors.hex_to_rgb(stops[-1]),
    ]
    np.testing.assert_allclose(got[:3], np.asarray(want), atol=0.5)
    assert (got[3] == got[2]).all() and (
        got[4] == got[0]
    ).all()  # clipped to the ends, as cmin/cmax clip
    pal = T.palette()
    assert pal.shape == (256, 3) and (pal[1] == got[0]).all() and (pal[255] == got[2]).all()
    assert list(T.palette_index(np.array([0.0, 0.5, 1.0, 7.0]), lo=0.0, hi=1.0)) == [
        1,
        128,
        255,
        255,
    ]
    index = np.random.default_rng(0).integers(0, 256, size=(7, 11), dtype=np.uint8)
    back = T.read_png(T.png_data_uri(index, pal))  # RGBA, entry 0 transparent
    assert (back[..., :3] == pal[index]).all() and ((back[..., 3] == 0) == (index == 0)).all()
    img = T.draw_points(
        np.array([2.0, 9.6]), np.array([3.0, 3.4]), np.array([7, 9]), size=(11, 7), radius=1.5
    )
    assert img[3, 2] == 7 and img[3, 10] == 9 and img[0, 0] == 0
    assert (img[:, 5:8] == 0).all()  # between the two discs


def test_gallery_pages_by_whole_layers(page_result):
    assert G.gallery_pages(list(range(16)), 32) == [
        [0, 1, 2],
        [3, 4, 5],
        [6, 7, 8],
        [9, 10, 11],
        [12, 13, 14],
        [15],
    ]
    assert G.gallery_pages([0, 1], 200) == [[0], [1]]  # a layer wider than a page still gets one
    second = G.gallery_figure(page_result, page=1, max_panels=24)
    assert second.layout.meta["gallery"]["layers"] == [2, 3] and len(second.layout.images) == 2
    assert second.layout.meta["gallery"]["pages"] == 3
    chosen = G.gallery_figure(page_result, layers=[5, 1])
    assert chosen.layout.meta["gallery"]["layers"] == [5, 1]
    assert [o["label"] for o in G.gallery_page_options(page_result)] == ["layers 0–5"]


def test_head_maps_are_what_the_server_would_draw(page_result):
    maps = G.head_maps(page_result)
    assert len(maps["maps"]) == page_result["n_layers"] * page_result["n_heads"]
    assert maps["labels"] == readable_tokens(page_result)
    for layer, head in [(LAYER, HEAD), (0, 0), (3, 4), (5, 11)]:
        m = maps["maps"][f"{layer},{head}"]
        for rescale, (xs, ys) in ((True, ("x", "y")), (False, ("xr", "yr"))):
            fig = head_tsne_figure(page_result, layer=layer, head=head, rescale=rescale)
            np.testing.assert_allclose(m[xs], fig.data[0].x, atol=1e-5)
            np.testing.assert_allclose(m[ys], fig.data[0].y, atol=1e-5)
            assert m["title"] == fig.layout.title.text
        assert list(m["xaxis"]["ticktext"]) == list(
            head_tsne_figure(page_result, layer=layer, head=head).layout.xaxis.ticktext
        )
    # the requested head is the exact one-head section's map, not the gallery's copy of it
    np.testing.assert_allclose(
        maps["maps"][f"{LAYER},{HEAD}"]["xr"],
        np.asarray(page_result["head-tsne"]["embedding"])[:, 0],
        atol=1e-5,
    )
    tpl = maps["templates"]["rescaled"]
    assert tpl["data"][0]["type"] == "scatter" and tpl["layout"]["meta"]["highlight"] == "points"


def test_matrix_and_hidden_map_follow_any_head(page_result, attentions):
    fig = attention_matrix_figure(page_result, layer=4, head=7)  # not the requested head
    assert "1/255" in fig.layout.title.text
    assert np.abs(np.asarray(fig.data[0].z) - attentions[4, 7]).max() <= 0.5 / 255 + 1e-6
    exact = attention_matrix_figure(page_result, layer=LAYER, head=HEAD)
    assert "1/255" not in exact.layout.title.text
    np.testing.assert_allclose(np.asarray(exact.data[0].z), attentions[LAYER, HEAD], atol=1e-6)
    for state in range(page_result["n_layers"] + 1):  # every hidden state is in the one result
        assert f"X[{state}]" in hidden_tsne_figure(page_result, state=state).layout.title.text
    assert "KL attention-head t-SNE (L4H7)" in kl_summary(page_result, layer=4, head=7)


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
            if trace.name != f"L3H{head}":
                continue
            colours.setdefault(trace.line.color, set()).add(head)
            xs, ys = list(trace.x), list(trace.y)
            segs = [
                (int(ys[i]), int(ys[i + 1])) for i in range(0, len(xs), 3)
            ]  # [x0, x1, None] per line
            assert all(xs[i : i + 3] == [0.0, 1.0, None] for i in range(0, len(xs), 3))
            assert segs == [tuple(p) for p in pairs]
            drawn += segs
            if pairs:  # opacity grows with the weight bin
                w = [a[q, k] for q, k in pairs]
                assert (
                    trace.opacity == HV.BIN_OPACITY[int(np.digitize(w[0], HV.OPACITY_BINS[1:-1]))]
                )
        assert len(drawn) == len(expected) and set(drawn) == expected
    assert len(colours) == 2 and all(len(v) == 1 for v in colours.values())  # one colour per head
    tokens = [t for t in fig.data if t.name == "querys"][0]
    assert list(tokens.text) == readable_tokens(page_result)
    fewer = HV.head_view_figure(page_result, layer=3, heads=[4], threshold=0.5)
    assert sum(len(p) for p in fewer.layout.meta["headview"]["pairs"]) < len(drawn)


def test_head_view_names_each_heads_atlas_label(page_result):
    labels = {
        (3, 4): ("induction", True),
        (3, 9): ("previous-token", False),
        (2, 4): ("self", True),
    }
    fig = HV.head_view_figure(page_result, layer=3, heads=[4, 9, 1], threshold=0.1, labels=labels)
    assert "L3H4 · induction, L3H9 · previous-token?, L3H1 (" in fig.layout.title.text
    legend = {t.name for t in fig.data if t.showlegend}
    assert legend == {"L3H4 · induction", "L3H9 · previous-token?", "L3H1"}  # L3H1: no label
    bare = HV.head_view_figure(page_result, layer=3, heads=[4], threshold=0.1)
    assert "·" not in bare.layout.title.text  # no atlas: the bare names
    from frontend.pages.text import heads as text_heads  # what the page's HTML export draws

    exported = text_heads.figures(
        page_result,
        layer=3,
        head=4,
        layers=None,
        gpage=0,
        hv_heads=[9],
        threshold=0.1,
        labels=labels,
    )
    assert "L3H4 · induction, L3H9 · previous-token?" in exported[1].layout.title.text


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
    assert HV.model_view_click({"points": [{"x": 3 * stride + 1, "y": 2 * stride + 2}]}, meta) == (
        2,
        3,
    )
    assert HV.model_view_click({"points": [{"x": stride - 1, "y": 0}]}, meta) is None  # the gap
    assert len(fig.layout.shapes) == 1  # the selected head is framed


def test_text_export_holds_the_every_head_views(page_result):
    from frontend.pages.text import _figures

    figs = _figures(page_result, 3, 4, ["rescale"], "max", None, 0, [1], 0.2)
    kinds = [f.layout.meta for f in figs]
    assert len(figs) == 7  # heatmaps, map, hidden map, matrix, gallery, head view, model view
    assert (
        "gallery" in kinds[4]
        and kinds[5]["headview"]["heads"] == [4, 1]
        and "modelview" in kinds[6]
    )
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
    assert (
        own.layout.coloraxis2.cmax < 0.5 * own.layout.coloraxis.cmax
    )  # the narrow one is not flat
    shared = pe_distance_figure(result, shared_scale=True)
    assert [t.coloraxis for t in shared.data] == ["coloraxis", "coloraxis"]
    assert "coloraxis2" not in shared.to_plotly_json()["layout"]


def test_a_page_waits_with_an_invisible_picture_a_row(page_result):
    """A page drawn before its layers are computed holds an invisible picture in each waiting row's
    place (set by index when the layer arrives) and no points at all."""
    grid = {k: v for k, v in page_result.items() if k != "head-tsne-all"}
    skeleton = G.skeleton_section(grid)
    assert skeleton["layers"] == [] and skeleton["partial"]["layers"] == list(
        range(page_result["n_layers"])
    )
    waiting = G.gallery_figure(grid, section=skeleton)
    images = waiting.layout.images
    assert len(images) == page_result["n_layers"] and not any(
        im.visible or im.source for im in images
    )
    assert [im.y for im in images] == [r * G.SY - G.PAD for r in range(page_result["n_layers"])]
    assert (
        len(waiting.data) == 3 and len(waiting.data[0].x) == 0
    )  # no frame yet, the colour bar, the rows' notes
    assert (
        waiting.layout.meta["gallery"]["panels"] == []
        and waiting.layout.meta["gallery"]["complete"] is False
    )


def test_a_row_is_drawn_once_however_many_updates_carry_it(page_result, monkeypatch):
    """An update Dash dropped (a newer one had started) makes the next carry its rows again: the
    server draws each row's picture once and sends the same one again."""
    drawn = []
    real = G._draw_row
    monkeypatch.setattr(G, "_draw_row", lambda emb, gp: drawn.append(1) or real(emb, gp))
    monkeypatch.setattr(G, "_PICTURES", type(G._PICTURES)())  # nothing remembered from other tests
    first = G.gallery_figure(page_result)
    assert len(drawn) == page_result["n_layers"]
    again = G.gallery_figure(page_result)
    assert len(drawn) == page_result["n_layers"]  # nothing drawn again
    assert [im.source for im in again.layout.images] == [im.source for im in first.layout.images]
    moved = json.loads(json.dumps(page_result))
    xs = [pt[0] for pt in moved["head-tsne-all"]["embedding"][2][0]]  # L2H0
    moved["head-tsne-all"]["embedding"][2][0][0][0] = (
        max(xs) + 1 if xs[0] == min(xs) else min(xs) - 1
    )  # new rank
    changed = G.gallery_figure(moved)
    assert len(drawn) == page_result["n_layers"] + 1
    assert changed.layout.images[2].source != first.layout.images[2].source


def test_gallery_and_maps_name_the_atlas_label_when_given(page_result):
    """The stored atlas' labels (kit/atlas_labels.py) show in the panels' and the maps' titles;
    a head without one, or no atlas, keeps the bare name."""
    labels = {(3, 4): ("induction", True), (0, 2): ("previous-token", False)}
    n_heads = page_result["n_heads"]
    kl = np.asarray(page_result["head-tsne-all"]["kl"])
    titles = list(G.gallery_figure(page_result, labels=labels).data[2].text)
    assert titles[n_heads * 3 + 4] == f"L3H4 · induction · KL {kl[3, 4]:.2f}"
    assert titles[2] == f"L0H2 · previous-token? · KL {kl[0, 2]:.2f}"
    assert titles[n_heads * 3 + 5] == f"L3H5 · KL {kl[3, 5]:.2f}"
    bare = list(G.gallery_figure(page_result).data[2].text)
    assert bare[n_heads * 3 + 4] == f"L3H4 · KL {kl[3, 4]:.2f}"
    maps = G.head_map_entries(page_result, layers=[3], labels=labels)
    assert maps["3,4"]["title"].startswith("Attention-head t-SNE — L3H4 · induction — KL")
    assert " · " not in maps["3,5"]["title"]
