"""Small things a walk through the dashboard found, each fixed and held here: the surprisal strip's
colour bar has room, the logit lens prints dark text on its light cells, the PE map's top labels
are not clipped, a sliding window is named only where it cuts the text, LasF outlines no field
before one is opened, the circuits page's message keeps its words apart."""

from __future__ import annotations

import numpy as np

from frontend.figures import attention as A
from frontend.figures import causal as C
from frontend.figures import lasf as LF
from frontend.figures import positional as P
from workers.analyses.attention.spec import MAX_ATTENTION
from workers.analyses.causal.spec import LOGIT_LENS, PREDICTIONS
from workers.analyses.lasf.spec import LASF

TOKENS = ["<s>", "ĠThe", "Ġcat", "Ġsat", "Ġon"]
TEXTS = ["", " The", " cat", " sat", " on"]


def test_the_surprisal_strip_leaves_its_colour_bar_room_for_its_ticks():
    result = {
        "tokens": TOKENS,
        "token_texts": TEXTS,
        PREDICTIONS: {"surprisal_bits": [1.0, 9.5, 0.5, 3.0], "next_rank": [1, 40, 1, 2]},
    }
    fig = C.surprisal_figure(result)
    plot_px = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    assert plot_px >= 80  # at 190 px high the bar was ~30 px and "10" sat on "0"
    assert fig.data[0].colorbar.nticks <= 5


def test_the_logit_lens_prints_dark_on_light_cells_and_white_on_dark_ones():
    n_states, n = 3, 5
    prob = np.array([[0.01, 0.2, 0.9, 0.6], [0.3, 0.95, 0.05, 0.5], [0.99, 0.1, 0.7, 0.2]])
    top_probs = np.full((n_states, n), 0.8)
    result = {
        "tokens": TOKENS,
        "token_texts": TEXTS,
        LOGIT_LENS: {
            "next_prob": prob.tolist(),
            "top_tokens": [[" Paris", " the", "\n", " a", " b"]] * n_states,
            "top_probs": top_probs.tolist(),
        },
    }
    fig = C.lens_figure(result)
    heat, text = fig.data[0], fig.data[1]
    z = np.asarray(heat.z, dtype=float)
    colours = list(text.textfont.color)
    for k, (s, t) in enumerate(zip(text.y, text.x, strict=True)):
        light = z[s, t] >= C.LIGHT_FROM  # Viridis: green to yellow from here up
        assert colours[k] == ("#111" if light else "#fff"), (s, t, z[s, t])
    assert text.text[0] == "␣Paris" and text.text[2] == "⏎"  # tokens shown the one way
    assert heat.texttemplate is None  # no second, plotly-coloured copy of the text


def test_the_pe_maps_labels_are_not_clipped_at_the_top():
    xy = np.random.default_rng(0).normal(size=(16, 2))
    result = {"checkpoints": [{"name": "a", "shape": [16, 8], "coords_2d": xy.tolist()}]}
    fig = P.pe_map_figure(result, colour_by="row", grid=(4, 4))
    labelled = [t for t in fig.data if t.mode == "markers+text"]
    assert labelled and all(t.cliponaxis is False for t in labelled)
    assert fig.layout.margin.t >= 40  # the room the top row's labels draw into


def test_a_sliding_window_is_named_only_where_it_cuts_the_text():
    def result(n):
        ma = np.random.default_rng(1).random((2, 4, n)).tolist()
        return {
            "tokens": ["x"] * n,
            MAX_ATTENTION: {"max_attention": ma, "mean_attention": ma, "windows": [8, None]},
        }

    short = [a["text"] for a in A.max_attention_spec(result(5))["layout"]["annotations"]]
    assert short[:2] == ["layer 0", "layer 1"]  # 5 tokens: a window of 8 cuts nothing
    long = [a["text"] for a in A.max_attention_spec(result(12))["layout"]["annotations"]]
    assert long[:2] == ["layer 0 (local: each query sees the last 8 keys)", "layer 1"]


def test_lasf_outlines_no_field_until_one_is_opened():
    n = 4
    sec = {"phi": np.eye(n).tolist(), "phi_norm": np.eye(n).tolist(), "mode": "stable"}
    assert not LF.phi_figure({LASF: sec}, field=None).layout.shapes
    assert len(LF.phi_figure({LASF: sec}, field=2).layout.shapes) == 1
    bars = {LASF: {"ablation": [0.1, 0.2, 0.3], "r2": 0.9}}
    assert set(LF.ablation_figure(bars, field=None).data[0].marker.color) == {"#1f77b4"}


def test_the_circuits_message_keeps_its_words_apart():
    from pathlib import Path

    from frontend.pages import circuits

    source = "".join(p.read_text() for p in Path(circuits.__file__).parent.glob("*.py"))
    assert "<br>for the circuit." in source  # the message is among the files read
    # plotly draws <br> as a line break, but the text a reader copies joins the lines as written
    assert not [m for m in __import__("re").findall(r"\S<br>", source)], "a word glued to <br>"
