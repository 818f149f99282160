"""The causal page's pure figure functions and request builder on a real result (tiny GPT-2, every
causal view with a continuation), computed once as the worker would."""

from __future__ import annotations

import numpy as np
import pytest

from frontend.figures import causal as C
from frontend.figures.tokens import display_text
from frontend.kit.forms import parse_target
from frontend.pages.causal import causal_request
from workers.core.contracts import AnalysisRequest
from workers.queue.jobs import compute_analysis

CLEAN = "The head of the model is in the text and the word is of the token"
CORRUPTED = "The head of the model is in the text and a word is of the token"


@pytest.fixture(scope="module")
def result(catalogue):
    req = causal_request(
        text=CLEAN, model="tiny-gpt2", corrupted=CORRUPTED, k=5, target="#5|#9", continue_tokens=2
    )
    return compute_analysis(
        AnalysisRequest.model_validate(req), progress=lambda f, m: None, on_partial=lambda f: None
    )


def test_request_builder_and_target_box():
    assert (
        parse_target("") is None
        and parse_target(" Paris") == " Paris"
        and parse_target("#12") == 12
    )
    assert parse_target(" Paris| Rome") == [" Paris", " Rome"] and parse_target("#3 | #4") == [3, 4]
    assert parse_target("␣Paris|␣Rome") == [" Paris", " Rome"]  # typed as the page shows tokens
    assert parse_target("⏎") == "\n" and parse_target("␣␣x") == "  x"
    req = causal_request(text="a b", model="m")
    assert req["analyses"] == ["predictions", "logit-lens", "logit-attribution", "ablation"]
    assert "corrupted" not in req["options"] and "continue_tokens" not in req["options"]
    full = causal_request(
        text="a b", model="m", corrupted="a c", continue_tokens=3, temperature=0.5, target="#1|#2"
    )
    assert full["analyses"][0] == "continue" and full["analyses"][-1] == "patching"
    AnalysisRequest.model_validate(full)  # the contract takes what the page sends


def test_figures_read_every_section(result):
    n, L, H = result["n_tokens"], result["n_layers"], result["n_heads"]
    lab = C.labels(result)
    assert (
        len(lab) == n
        and lab[-1].startswith(C.GENERATED_MARK)
        and not lab[0].startswith(C.GENERATED_MARK)
    )
    s = C.surprisal_figure(result, position=3)
    assert (
        np.asarray(s.data[0].z).shape == (1, n) and len(s.layout.shapes) == 2
    )  # generated band + position
    lens = C.lens_figure(result)
    assert np.asarray(lens.data[0].z, dtype=float).shape == (L + 1, n)
    att = C.attribution_figure(result, position=4)
    assert np.asarray(att.data[0].z).shape == (L, H) and len(att.data[1].x) == L
    assert "position 4" in att.layout.title.text and "frozen" in att.layout.title.text
    abl = C.ablation_figure(result)
    assert (
        np.asarray(abl.data[0].z).shape == (L, H) and f"position {n - 1}" in abl.layout.title.text
    )
    res = C.patching_residual_figure(result)
    assert np.asarray(res.data[0].z).shape == (L + 1, n)
    assert np.asarray(C.patching_heads_figure(result).data[0].z).shape == (L, H)
    pairs = C.pair_rows(result)
    assert len(pairs) == n and sum(d for _, _, d in pairs) == 1  # one token differs ("the" / "a")


def test_top_k_marks_the_next_token_and_clicks_parse(result):
    sec = result["predictions"]
    p = next((t for t, r in enumerate(sec["next_rank"]) if r <= 5), None)
    if p is not None:
        rows = C.top_k_rows(result, position=p)
        assert len(rows) == 5 and [r["next"] for r in rows].count(True) == 1
        assert rows[sec["next_rank"][p] - 1]["next"]
    last = C.top_k_rows(result, position=result["n_tokens"] - 1)
    assert not any(r["next"] for r in last)  # the last position has no next token in the text
    assert C.clicked_cell({"points": [{"x": 3, "y": 1}]}) == (1, 3)
    assert C.clicked_position({"points": [{"x": 7, "y": 0}]}) == 7
    assert C.clicked_cell(None) is None and C.clicked_cell({"points": []}) is None


def test_empty_result_gives_explaining_figures():
    for fig in (
        C.surprisal_figure({}),
        C.lens_figure({}),
        C.attribution_figure({}),
        C.ablation_figure({}),
        C.patching_residual_figure({}),
        C.patching_heads_figure({}),
    ):
        assert fig.layout.annotations and fig.layout.annotations[0].text
    assert C.top_k_rows({}, position=0) == [] and C.pair_rows({}) == []


def test_long_titles_wrap_without_losing_words(result):
    """Plotly does not wrap titles: the page's long ones are broken into lines that fit, word for word."""
    figures = [
        C.surprisal_figure(result, position=3),
        C.lens_figure(result),
        C.attribution_figure(result, position=4),
        C.ablation_figure(result),
        C.patching_residual_figure(result),
        C.patching_heads_figure(result),
    ]
    titles = [f.layout.title.text for f in figures]
    assert any("<br>" in t for t in titles)
    for t in titles:
        assert all(len(line) <= C.TITLE_LINE for line in t.split("<br>")), t
    raw = "Residual stream patched from clean into corrupted: restored fraction of l[' Paris'] − l[' Rome'] (clean 4.8, corrupted -9.1)"
    wrapped = C.wrap_title(raw, 50)
    assert wrapped.replace("<br>", " ").split() == raw.split()
    assert wrapped.split("<br>")[0].endswith("corrupted:") and wrapped.split("<br>")[-1].startswith(
        "(clean"
    )
    # a pair target names both tokens as every page shows tokens (a leading space as ␣), in the
    # attribution and ablation titles
    a, b = result["ablation"]["target_tokens"][-1], result["ablation"]["target_b_tokens"][-1]
    pair = f"l[{display_text(a)}] − l[{display_text(b)}]"
    assert pair in titles[2].replace("<br>", " ")
    assert pair in titles[3].replace("<br>", " ")
    assert (
        C.wrap_title("short") == "short" and C.wrap_title("x" * 100) == "x" * 100
    )  # nothing to break at


def test_head_maps_hover_names_the_atlas_label_when_given(result):
    """The heads' hover writes ``L1H0 · induction`` where the stored atlas labels the head, the bare
    name elsewhere and with no atlas (kit/atlas_labels.py)."""
    labels = {(1, 0): ("induction", True), (0, 1): ("previous-token", False)}
    for fig in (
        C.attribution_figure(result, position=4, head_labels=labels),
        C.ablation_figure(result, head_labels=labels),
        C.patching_heads_figure(result, head_labels=labels),
    ):
        trace = fig.data[0]
        assert trace.hovertemplate.startswith("L%{y}H%{x}%{customdata}:")
        cd = [list(row) for row in trace.customdata]
        assert cd[1][0] == " · induction" and cd[0][1] == " · previous-token?"
        assert cd[0][0] == "" and len(cd) == result["n_layers"]
    bare = C.ablation_figure(result).data[0].customdata
    assert all(c == "" for row in bare for c in row)
