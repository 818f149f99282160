"""Figures of the corpus page (pure functions on a real result of a tiny model)."""

from __future__ import annotations

import numpy as np
import pytest

from frontend.figures import corpus as C
from workers.analyses.corpus.joint_map import joint_map
from workers.analyses.corpus.run import corpus_statistics
from workers.models import load_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TEXTS = ["The cat sat on the mat and the cat sat.", "A dog ran.", "Red blue red blue."]


@pytest.fixture(scope="module")
def result(catalogue):
    return corpus_statistics(load_model("tiny-bert", device="cpu"), TEXTS)


def test_table_rows_hold_every_head_and_statistic(result):
    rows = C.table_rows(result)
    assert len(rows) == 2 * 4 and rows[5]["head"] == "L1H1"  # named as everywhere else, not "1.1"
    assert [C.parse_head(r["head"]) for r in rows] == [(r["layer"], r["index"]) for r in rows]
    assert rows[5]["previous"] == round(result["statistics"]["previous"][1][1], 4)
    cols = C.table_columns(result)  # AG Grid column definitions, one per key of a row
    assert [c["field"] for c in cols] == list(rows[0]) and set(rows[0]) == {
        "head",
        "layer",
        "index",
        *C.STAT_LABELS,
    }
    assert [c["filter"] for c in cols] == ["agTextColumnFilter"] + ["agNumberColumnFilter"] * (
        len(cols) - 1
    )
    assert cols[0]["comparator"] == {
        "function": "headOrder"
    }  # frontend/assets/grid.js: L2H10 after L2H9


def test_map_marks_the_selected_head_and_colours_by_a_statistic(result):
    fig = C.head_map_figure(result, color_by="previous", selected=(1, 2))
    assert list(fig.data[0].customdata) == [f"L{a}H{b}" for a in range(2) for b in range(4)]
    np.testing.assert_allclose(
        fig.data[0].marker.color, np.array(result["statistics"]["previous"]).ravel()
    )
    assert (fig.data[1].x[0], fig.data[1].y[0]) == tuple(result["head_map"]["xy"][1][2])
    compare = C.head_compare_figure(result, layer=1, head=2)
    assert len([t for t in compare.data if t.type == "box"]) == 8
    hist = C.histogram_figure(result, stat="self", layer=0, head=3)
    assert sum(hist.data[0].y) == len(TEXTS)


def test_context_parts_and_joint_map(result, catalogue):
    pair = result["top_pairs"][0][0][0]
    parts = C.context_parts(pair)
    roles = [r for _, r in parts]
    assert roles.count("query") == 1 and roles.count("key") == 1
    joint = joint_map(
        load_model("tiny-bert", device="cpu"), TEXTS, layer=0, head=1, method="pca", max_points=10
    )
    fig = C.joint_map_figure(joint, color_by="position")
    assert [t.name for t in fig.data] == ["queries", "keys"]
    assert "sampled" in fig.layout.title.text and len(fig.data[0].x) == 5
    assert C.parse_head("L2H5") == C.parse_head("2.5") == (2, 5)  # and links shared before L2H5
    assert [C.parse_head(v) for v in ("x", None, "L2H", "-1.2", "L2H5x", "2.5.1")] == [None] * 6


def test_table_names_the_atlas_label_beside_the_head_when_given(result):
    """With the stored atlas' labels (kit/atlas_labels.py) the table gets an ``atlas`` column next to
    the head; without them, none."""
    labels = {(1, 1): ("induction", True), (0, 2): ("previous-token", False)}
    rows = C.table_rows(result, labels)
    by_head = {r["head"]: r["atlas"] for r in rows}
    assert by_head["L1H1"] == "induction" and by_head["L0H2"] == "previous-token?"
    assert by_head["L0H0"] == ""
    cols = C.table_columns(result, labels)
    assert [c["field"] for c in cols] == list(rows[0]) and cols[1]["field"] == "atlas"
    assert "atlas" not in C.table_rows(result)[0]
    assert "atlas" not in [c["field"] for c in C.table_columns(result)]
