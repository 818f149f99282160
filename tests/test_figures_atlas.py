"""The head atlas' figures and table (frontend/figures/atlas.py) on a hand-made atlas section."""

from __future__ import annotations

from typing import Any

from frontend.figures import atlas as A
from frontend.kit.atlas_labels import atlas_request
from frontend.pages.heads import explorer_href

TYPES = list(A.COLOURS)


def _head(layer: int, head: int, label: str | None, confident: bool, **ev: Any) -> dict[str, Any]:
    scores = {t: 0.1 for t in TYPES}
    if label:
        scores[label] = 0.8
    return {
        "layer": layer, "head": head, "label": label, "confident": confident, "scores": scores,
        "intervals": {t: [v - 0.05, v + 0.05] for t, v in scores.items()}, "evidence": ev,
    }  # fmt: skip


SECTION = {
    "model": "toy",
    "n_layers": 2,
    "n_heads": 2,
    "heads": [
        _head(
            0,
            0,
            "previous-token",
            True,
            effect="composition",
            induction_fall=0.2,
            rank=1,
            z=3.1,
            backed=True,
        ),  # fmt: skip
        _head(0, 1, "broad", False),
        _head(1, 0, "induction", True, effect="loss", loss_rise=0.01, rank=3, z=0.2, backed=False),
        _head(1, 1, None, False),
    ],
    "loss_repeated": {"first": 6.0, "repeated": 2.5},
    "evidence": {"method": "exact mean ablation of every head"},
}


def test_the_grid_colours_labels_with_confidence_as_saturation() -> None:
    fig = A.atlas_grid_figure(SECTION, model="toy")
    by_name = {t.name: t for t in fig.data}
    assert set(by_name) == {
        "previous-token (confident)", "broad (tentative)", "induction (confident)", "no label"
    }  # fmt: skip
    assert by_name["previous-token (confident)"].marker.color == "rgb(0,114,178)"  # #0072B2
    pale = by_name["broad (tentative)"].marker.color  # #999999 blended towards white
    assert pale.startswith("rgb(") and int(pale[4:7]) > 0x99
    assert by_name["no label"].marker.color == A.NONE_COLOUR
    assert list(by_name["induction (confident)"].customdata[0]) == [1, 0]
    assert "L1H0" in by_name["induction (confident)"].hovertext[0]
    assert "Press Analyze" in A.atlas_grid_figure(None).layout.annotations[0].text


def test_the_table_and_summary_say_what_backs_each_label() -> None:
    rows = {r["head"]: r for r in A.table_rows(SECTION)}
    assert rows["L0H0"]["confidence"] == "confident" and rows["L0H0"]["score"] == 0.8
    assert rows["L0H0"]["interval"] == "[0.750, 0.850]"
    assert rows["L0H0"]["evidence"].startswith("backed: induction score -0.200")
    assert rows["L1H0"]["evidence"].startswith("not backed: repeat loss +0.010")
    assert rows["L1H1"]["label"] == "" and rows["L1H1"]["score"] is None
    assert rows["L0H0"]["effect_z"] == 3.1 and rows["L0H1"]["effect_z"] is None
    assert rows["L0H1"]["broad"] == 0.8 and rows["L0H1"]["layer"] == 0
    counts = A.type_counts(SECTION)
    assert counts["previous-token"] == {"heads": 1, "confident": 1, "backed": 1}
    assert counts["none"]["heads"] == 1
    line = A.summary_line(SECTION)
    assert "previous-token: 1 (1 confident, 1 backed by ablation)" in line
    assert "no label: 1 of 4" in line and "exact mean ablation" in line


def test_the_page_asks_for_one_atlas_and_opens_a_head_in_the_text_explorer() -> None:
    req = atlas_request(model="minilm", random_seqs=16, random_len=None)
    assert req["analyses"] == ["atlas"] and req["options"] == {"random_seqs": 16}
    assert explorer_href("smollm2", 3, 7) == "/text?model=smollm2&layer=3&head=7&run=1"
