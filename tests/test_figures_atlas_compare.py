"""Two models' atlases side by side (frontend/figures/atlas_compare.py, frontend/pages/compare_atlas.py)
on hand-made atlas sections: the counts per type, the relative depths, the note and link where a
model has no stored atlas."""

from __future__ import annotations

from typing import Any

import pytest

from frontend.figures import atlas_compare as AC
from frontend.pages import compare_atlas as CA


def _section(n_layers: int, n_heads: int, labels: dict[tuple[int, int], str]) -> dict[str, Any]:
    return {
        "n_layers": n_layers,
        "n_heads": n_heads,
        "heads": [
            {
                "layer": la,
                "head": h,
                "label": labels.get((la, h)),
                "confident": (la, h) != (2, 1),  # one tentative label
                "evidence": {},
            }
            for la in range(n_layers)
            for h in range(n_heads)
        ],
    }


# A: 3 layers x 2 heads; B: 5 layers x 1 head
A = _section(
    3, 2, {(0, 0): "previous-token", (1, 1): "induction", (2, 0): "induction", (2, 1): "broad"}
)
B = _section(5, 1, {(0, 0): "broad", (3, 0): "induction", (4, 0): "first-token"})


def test_relative_depth() -> None:
    assert AC.relative_depth(0, 3) == 0.0
    assert AC.relative_depth(1, 3) == 0.5
    assert AC.relative_depth(2, 3) == 1.0
    assert AC.relative_depth(3, 5) == 0.75
    assert AC.relative_depth(0, 1) == 0.0  # a one-layer model


def test_counts_per_type() -> None:
    rows = {r["type"]: r for r in AC.count_rows(A, B)}
    assert list(rows) == [*AC.TYPES, "none"]
    assert (rows["induction"]["a"], rows["induction"]["b"]) == (2, 1)
    assert (rows["previous-token"]["a"], rows["previous-token"]["b"]) == (1, 0)
    assert (rows["broad"]["a"], rows["broad"]["a_confident"]) == (1, 0)  # tentative
    assert (rows["first-token"]["a"], rows["first-token"]["b"]) == (0, 1)
    assert (rows["none"]["a"], rows["none"]["b"]) == (2, 2)
    assert sum(r["a"] for r in rows.values()) == 6 and sum(r["b"] for r in rows.values()) == 5
    no_b = {r["type"]: r for r in AC.count_rows(A, None)}
    assert no_b["induction"]["a"] == 2 and no_b["induction"]["b"] is None


def test_depths_per_type() -> None:
    da, db = AC.type_depths(A), AC.type_depths(B)
    assert da["induction"] == [(0.5, "L1H1"), (1.0, "L2H0")]
    assert da["previous-token"] == [(0.0, "L0H0")]
    assert db["induction"] == [(0.75, "L3H0")]
    assert db["first-token"] == [(1.0, "L4H0")]
    assert da["self"] == [] and AC.type_depths(None)["induction"] == []


def test_the_figure_puts_both_models_on_one_depth_axis() -> None:
    fig = AC.atlas_compare_figure(A, B, name_a="toy-a", name_b="toy-b")
    rows = list(reversed(AC.TYPES))  # the y positions: the first type at the top
    bars = [t for t in fig.data if t.type == "bar"]
    assert [t.name for t in bars] == ["A toy-a (3 layers)", "B toy-b (5 layers)"]
    ind = rows.index("induction")
    assert (bars[0].x[ind], bars[1].x[ind]) == (2, 1)
    dots = [t for t in fig.data if t.type == "scatter" and "median" not in t.name]
    a_dots = sorted(zip(dots[0].text, dots[0].x, dots[0].y, strict=True))
    assert ("L2H0 · induction", 1.0, pytest.approx(ind + AC.OFFSET)) in a_dots
    b_dots = dict(zip(dots[1].text, dots[1].x, strict=True))
    assert b_dots["L3H0 · induction"] == 0.75
    assert all(y < ind for t, y in zip(dots[1].text, dots[1].y, strict=True) if "induction" in t)
    medians = [t for t in fig.data if "median" in t.name]
    a_ind = [x for x, y in zip(medians[0].x, medians[0].y, strict=True) if round(y) == ind]
    assert a_ind == [0.75]  # the median of 0.5 and 1.0


def test_a_model_without_an_atlas_gets_a_link_and_is_left_out() -> None:
    fig, note = CA.view(A, None, "toy-a", "toy-b")
    assert [t.name for t in fig.data if t.type == "bar"] == ["A toy-a (3 layers)"]
    link = note[0].children[1]
    assert link.href == "/heads?model=toy-b"
    assert note[0].children[0].startswith("B toy-b has no stored head atlas")
    assert note[1].children == (
        "heads per type (A toy-a / B toy-b): previous-token 1 / —, induction 2 / —, "
        "broad 1 / —, none 2 / —"
    )
    empty, both = CA.view(None, None, "x", "y")
    assert len(both) == 2 and not empty.data  # two links, the message figure
    assert "/heads?model=x" == both[0].children[1].href


def test_the_pairs_tables_csv_gains_label_columns_where_an_atlas_is_stored() -> None:
    from frontend.figures import compare as F

    result = {
        "model_a": {"name": "a", "n_layers": 1, "n_heads": 2},
        "model_b": {"name": "b", "n_layers": 2, "n_heads": 1},
        "matching": {
            "pairs": [{"a": 0, "b": 1, "similarity": 0.9}, {"a": 1, "b": 0, "similarity": 0.8}],
            "best_of_a": [{"b": 1, "similarity": 0.9}, {"b": 0, "similarity": 0.8}],
            "best_of_b": [{"a": 1, "similarity": 0.8}, {"a": 0, "similarity": 0.9}],
        },
    }
    labels_a = {(0, 0): ("induction", True)}
    labels_b = {(1, 0): ("induction", False), (0, 0): ("first-token", True)}
    rows = F.pair_rows(result, labels_a, labels_b)
    assert [(r["head_a"], r["label_a"], r["head_b"], r["label_b"]) for r in rows] == [
        ("L0H0", "induction", "L1H0", "induction?"),
        ("L0H1", "", "L0H0", "first-token"),  # L0H1 of A: no label
    ]
    fields = [c["field"] for c in F.pair_columns(labels_a, labels_b)]
    assert fields[:4] == ["head_a", "label_a", "head_b", "label_b"]
    only_b = F.pair_rows(result, {}, labels_b)  # A has no stored atlas: no column of A
    assert "label_a" not in only_b[0] and only_b[0]["label_b"] == "induction?"
    assert [c["field"] for c in F.pair_columns({}, labels_b)][:3] == ["head_a", "head_b", "label_b"]
    assert "label_a" not in F.pair_rows(result)[0]
    assert [c["field"] for c in F.pair_columns()] == [k for k, _ in F.PAIR_COLUMNS]
