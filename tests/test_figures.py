"""Figure functions on result JSON made by the real core (MiniLM; tiny models for comparisons)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from frontend.figures import attention
from frontend.figures.attention import (
    attention_matrix_figure,
    clicked_head,
    max_attention_figure,
    max_attention_spec,
    shown_layers,
    typed_arrays,
)
from frontend.figures.base import empty_figure, graph_config, standalone_html
from frontend.figures.rescale import fit_axis
from frontend.figures.tokens import readable_tokens, token_labels
from frontend.figures.tsne import (
    head_embedding,
    head_tsne_figure,
    hidden_tsne_figure,
    kl_summary,
    words_tsne_figure,
)

TEXT = "The cat sat on the mat because the cat was tired."


@pytest.fixture(scope="module")
def head_result(minilm):
    """The text explorer's head-view request: max attention, head (1, 2), state 2."""
    from workers.engine.pipeline import analyze

    opts = {"layer": 1, "head": 2, "hidden_layer": 2, "restarts": 2}
    return json.loads(
        json.dumps(analyze(minilm, TEXT, ["max-attention", "head-tsne", "hidden-tsne"], opts))
    )


@pytest.fixture(scope="module")
def dropped_result(minilm):
    from workers.engine.pipeline import analyze

    opts = {"layer": 0, "head": 0, "hidden_layer": 1, "drop_special": True}
    return json.loads(
        json.dumps(analyze(minilm, TEXT, ["max-attention", "head-tsne", "hidden-tsne"], opts))
    )


def test_max_attention_heatmaps_have_token_labels_and_values(head_result):
    fig = max_attention_figure(head_result)
    ma = np.asarray(head_result["max-attention"]["max_attention"])  # [layer, head, token]
    tokens = readable_tokens(head_result)  # the text's own spans: "The", not the tokenizer's "the"
    assert tokens[:3] == ["[CLS]", "The", "cat"] and tokens[-1] == "[SEP]"
    assert len(fig.data) == head_result["n_layers"] == ma.shape[0]
    for layer, trace in enumerate(fig.data):
        np.testing.assert_allclose(np.asarray(trace.z), ma[layer])
        assert list(trace.y) == list(range(head_result["n_heads"]))
        assert list(trace.x) == list(range(len(tokens)))  # a column per token, by its index
        # nothing per cell but the weight: the hover and the ticks name the column's token through
        # the axis' labelalias, highlight.js reads its token in layout.meta.tokens
        assert trace.customdata is None and trace.text is None
        axis = fig.layout["xaxis" + ("" if layer == 0 else str(layer + 1))]
        assert axis.labelalias == {str(i): t for i, t in enumerate(tokens)}
        assert axis.hoverformat == "d" and "%{x}" in trace.hovertemplate
    bottom = fig.layout[f"xaxis{len(fig.data)}"]
    assert list(bottom.ticktext) == tokens  # repeated tokens ("the", "cat") keep their own column
    assert list(bottom.tickvals) == list(range(len(tokens)))
    assert fig.layout.meta["tokens"] == list(range(len(tokens)))
    assert fig.layout.meta["layers"] == list(range(ma.shape[0]))
    assert [a.text for a in fig.layout.annotations] == [f"layer {i}" for i in range(ma.shape[0])]
    mean = max_attention_figure(head_result, reduction="mean", layers=[4, 1])
    assert len(mean.data) == 2 and mean.layout.meta["layers"] == [4, 1]
    np.testing.assert_allclose(
        np.asarray(mean.data[0].z), np.asarray(head_result["max-attention"]["mean_attention"])[4]
    )


def test_the_heatmaps_sent_as_a_dict_are_the_figure_plotly_validates(head_result):
    """The page sends ``max_attention_spec`` (built without plotly's validation) with its arrays typed as
    a ``go.Figure`` sends them: the same JSON as the validated figure, for every view of the heatmaps."""
    import plotly.graph_objects as go
    from plotly.io.json import to_json_plotly

    windowed = {
        **head_result,
        "max-attention": {**head_result["max-attention"], "windows": [None, 4, None, 4]},
    }
    for result, kw in (
        (head_result, {}),
        (head_result, {"reduction": "mean", "layers": [4, 1]}),
        (head_result, {"layers": [3]}),
        (windowed, {"layers": [1, 2]}),
    ):
        spec = max_attention_spec(result, **kw)
        sent = json.loads(to_json_plotly(typed_arrays(spec)))
        assert sent == json.loads(to_json_plotly(go.Figure(spec))), kw
        assert all(
            isinstance(t["z"], dict) and t["z"]["dtype"] == "f4" for t in sent["data"]
        )  # typed, not lists
        assert [a["text"] for a in sent["layout"]["annotations"]][:1] == [
            f"layer {(kw.get('layers') or [0])[0]}"
            + (" (local: each query sees the last 4 keys)" if result is windowed else "")
        ]
    assert (
        max_attention_spec({}) == empty_figure("No maximum-attention result yet.").to_plotly_json()
    )


def test_heatmap_cells_have_gaps_only_while_they_are_wide(head_result, monkeypatch):
    """Gaps between cells where a text is short; none on a long text, where plotly.js would paint every
    cell apart (the page's heatmaps at 452 tokens: ~0.25 s of the browser's main thread)."""
    n = len(head_result["max-attention"]["max_attention"][0][0])
    assert n <= attention.GAP_MAX_TOKENS
    short = max_attention_spec(head_result)
    assert all(t["xgap"] == 1 and t["ygap"] == 1 for t in short["data"])
    monkeypatch.setattr(attention, "GAP_MAX_TOKENS", n - 1)  # the same result read as a long text
    long = max_attention_spec(head_result)
    assert all("xgap" not in t and "ygap" not in t for t in long["data"])
    assert [t["name"] for t in long["data"]] == [t["name"] for t in short["data"]]


def test_clicking_a_heatmap_cell_names_layer_and_head(head_result):
    layers = shown_layers(head_result, [0, 3, 5])
    assert layers == [0, 3, 5]
    click = {
        "points": [{"curveNumber": 1, "x": 4, "y": 7, "z": 0.2}]
    }  # what Dash sends for a heatmap
    assert clicked_head(click, layers) == (3, 7)
    assert clicked_head({"points": [{"customdata": [4, 2, 9]}]}, layers) == (2, 9)
    assert clicked_head(None, layers) is None
    assert shown_layers(head_result, None) == list(range(head_result["n_layers"]))


def test_dropped_special_tokens_leave_axes_and_maps(dropped_result):
    tokens, special = readable_tokens(dropped_result), dropped_result["special"]
    kept = [t for t, s in zip(tokens, special, strict=True) if not s]
    fig = max_attention_figure(dropped_result)
    bottom = fig.layout[f"xaxis{len(fig.data)}"]
    assert list(bottom.ticktext) == kept
    assert [bottom.labelalias[str(i)] for i in range(len(kept))] == kept
    assert fig.layout.meta["tokens"] == [i for i, s in enumerate(special) if not s]
    scatter = head_tsne_figure(dropped_result, layer=0, head=0)
    assert list(scatter.data[0].text) == kept
    assert "[CLS]" not in scatter.data[0].text and "[SEP]" not in scatter.data[0].text


def test_head_tsne_rescaled_axes_tick_in_original_units(head_result):
    emb = np.asarray(head_result["head-tsne"]["embedding"])  # [token, 2]
    fig = head_tsne_figure(head_result, layer=1, head=2, rescale=True)
    trace = fig.data[0]
    x, y = np.asarray(trace.x), np.asarray(trace.y)
    assert x.min() == pytest.approx(0.0) and x.max() == pytest.approx(1.0)
    assert y.min() == pytest.approx(0.0) and y.max() == pytest.approx(1.0)
    # ticks: equidistant positions, labelled with φ⁻¹ in original units (ends = min and max)
    assert list(fig.layout.xaxis.tickvals) == pytest.approx(list(np.linspace(0, 1, 6)))
    assert float(fig.layout.xaxis.ticktext[0]) == pytest.approx(emb[:, 0].min(), rel=1e-2)
    assert float(fig.layout.xaxis.ticktext[-1]) == pytest.approx(emb[:, 0].max(), rel=1e-2)
    phi = fit_axis(emb[:, 1])
    assert [float(t) for t in fig.layout.yaxis.ticktext] == pytest.approx(
        list(phi.inverse(np.linspace(0, 1, 6))), rel=1e-2
    )
    # order along each axis is preserved and hover shows the original coordinates
    assert np.array_equal(np.argsort(x, kind="stable"), np.argsort(emb[:, 0], kind="stable"))
    custom = np.asarray([c[1:3] for c in trace.customdata], dtype=float)
    np.testing.assert_allclose(custom, emb)
    assert list(trace.text) == readable_tokens(head_result)
    assert list(trace.marker.color) == list(range(len(head_result["tokens"])))  # colour = position
    assert "L1H2" in fig.layout.title.text and "best of 2" in fig.layout.title.text
    raw = head_tsne_figure(head_result, layer=1, head=2, rescale=False)
    np.testing.assert_allclose(np.c_[raw.data[0].x, raw.data[0].y], emb)
    assert raw.layout.xaxis.tickvals is None


def test_hidden_tsne_beside_the_head_and_both_kls(head_result):
    hid = head_result["hidden-tsne"]
    assert hid["layers"] == [2]
    fig = hidden_tsne_figure(head_result, state=2)
    assert "X[2] (output of layer 1)" in fig.layout.title.text
    assert f"{hid['kl'][0]:.4f}" in fig.layout.title.text
    summary = kl_summary(head_result, layer=1, head=2)
    assert (
        f"{head_result['head-tsne']['kl'][0]:.4f}" in summary and f"{hid['kl'][0]:.4f}" in summary
    )
    assert "restarts" in summary  # best of 2: both KLs listed
    assert "No hidden-state" in hidden_tsne_figure(head_result, state=3).layout.annotations[0].text


def test_attention_matrix_is_the_heads_own(head_result, dropped_result):
    fig = attention_matrix_figure(head_result, layer=1, head=2)
    a = np.asarray(fig.data[0].z)
    n = len(head_result["tokens"])
    assert a.shape == (n, n)
    np.testing.assert_allclose(a.sum(axis=1), 1.0, atol=1e-4)  # rows are queries
    np.testing.assert_allclose(
        a.max(axis=0), np.asarray(head_result["max-attention"]["max_attention"])[1, 2], atol=1e-5
    )  # its column max is the heatmap row
    assert fig.layout.yaxis.autorange == "reversed" and fig.layout.meta["highlight"] == "matrix"
    dropped = np.asarray(attention_matrix_figure(dropped_result, layer=0, head=0).data[0].z)
    assert dropped.shape == (n - 2, n - 2) and (dropped.sum(axis=1) <= 1 + 1e-6).all()
    assert (
        "No attention matrix"
        in attention_matrix_figure(head_result, layer=0, head=0).layout.annotations[0].text
    )


def test_attention_matrix_sends_only_weights_per_cell(head_result, dropped_result):
    """The matrix carries nothing per cell but its weight: the hover names query and key through the
    axes' labelalias, highlight.js finds a column's token in meta.tokens (per-cell hover text and
    customdata made a 452-token matrix ~5 MB)."""
    import plotly.io as pio

    for result, kept in ((head_result, None), (dropped_result, 1)):
        fig = attention_matrix_figure(
            result, layer=1 if kept is None else 0, head=2 if kept is None else 0
        )
        trace = fig.data[0]
        n = len(trace.z)
        assert trace.text is None and trace.hovertext is None and trace.customdata is None
        assert "%{y}" in trace.hovertemplate and "%{x}" in trace.hovertemplate
        size = len(pio.to_json(fig.data[0], engine="json"))
        assert size < 6_000 + 8 * n * n, size  # float32 base64: ~5.3 bytes a cell, no text
        labels = token_labels(result, fig.layout.meta["tokens"])
        for axis in (fig.layout.xaxis, fig.layout.yaxis):
            assert axis.labelalias == {str(i): label for i, label in enumerate(labels)}
            assert axis.tickformat == "d" and axis.hoverformat == "d" and axis.ticktext is None
        assert fig.layout.meta["tokens"] == list(range(kept or 0, (kept or 0) + n))


def test_token_axes_draw_their_labels_without_the_overflow_check(head_result):
    """Every labelled axis of the heatmaps and the matrix has ``ticklabeloverflow`` "allow": plotly.js'
    default measures each label of the axis again as it places each one (quadratic in the labels; a
    forced layout each), ~0.1-0.2 s of the browser per token axis at 452 tokens."""
    heat = max_attention_figure(head_result).layout
    axes = [k for k in heat.to_plotly_json() if k.startswith(("xaxis", "yaxis"))]
    labelled = [k for k in axes if k.startswith("yaxis") or heat[k].tickvals is not None]
    assert len(labelled) == head_result["n_layers"] + 1  # a head axis per layer, the token axis
    assert all(heat[k].ticklabeloverflow == "allow" for k in labelled)
    matrix = attention_matrix_figure(head_result, layer=1, head=2).layout
    assert matrix.xaxis.ticklabeloverflow == matrix.yaxis.ticklabeloverflow == "allow"


def test_grid_form_of_head_tsne_is_read_too(minilm):
    from workers.engine.pipeline import analyze

    res = analyze(
        minilm, "tiny text here", ["head-tsne"], {"layer": "all", "head": "all", "n_iter": 50}
    )
    emb = np.asarray(res["head-tsne"]["embedding"])  # [layer, head, token, 2]
    found = head_embedding(res["head-tsne"], 3, 7)
    np.testing.assert_allclose(found["embedding"], emb[3, 7])
    assert found["kl"] == pytest.approx(res["head-tsne"]["kl"][3][7])
    fig = head_tsne_figure(res, layer=3, head=7, rescale=False)
    np.testing.assert_allclose(fig.data[0].x, emb[3, 7, :, 0])


def test_words_tsne_labels_are_the_items(minilm):
    from workers.engine.pipeline import analyze

    words = "cat\ndog\nNew York\nBuenos Aires\nred\nblue"
    res = analyze(minilm, words, ["word-tsne"], {"layer": "all", "n_iter": 100})
    fig = words_tsne_figure(res, state=3)
    assert list(fig.data[0].text) == words.split("\n")
    emb = np.asarray(res["word-tsne"]["embedding"])[3]
    np.testing.assert_allclose(
        np.asarray([c[1:3] for c in fig.data[0].customdata], dtype=float), emb
    )
    assert "state 3" in fig.layout.title.text


def test_export_helpers():
    fig = empty_figure("x")
    page = standalone_html([fig, fig], title="a <b> view", notes="n")
    assert page.count('class="figure"') == 2
    assert "a &lt;b&gt; view" in page
    assert "<script src=" not in page  # plotly.js inline, nothing fetched: works offline
    assert (
        len(page) > 1_000_000 and page.count("Plotly.newPlot") == 2
    )  # one inline bundle, two plots
    assert graph_config("g", image_format="svg")["toImageButtonOptions"]["format"] == "svg"
    with pytest.raises(ValueError, match="png or svg"):
        graph_config("g", image_format="gif")
