"""The head atlas in a notebook (workers/engine/atlas.py, ``workers.atlas``, ``hs.atlas``;
docs/notebook.md): computed on a tiny decoder with the pipeline the service runs, read back from a
saved JSON in each of its forms, a head's label named, and the views naming the labels."""

from __future__ import annotations

import json
from typing import Any

import pytest

import workers
from frontend import notebook as hs
from workers.core.errors import HeadscopeError

pytestmark = pytest.mark.usefixtures("one_torch_thread", "catalogue")
QUICK = {"random_seqs": 4, "random_len": 12, "resamples": 20, "max_texts": 6, "skip_evidence": True}


def _hand(labels: dict[tuple[int, int], tuple[str, bool]]) -> dict[str, Any]:
    return {
        "model": "tiny-gpt2",
        "n_layers": 2,
        "n_heads": 4,
        "heads": [
            {
                "layer": la,
                "head": h,
                "label": labels.get((la, h), (None, False))[0],
                "confident": labels.get((la, h), (None, False))[1],
            }
            for la in range(2)
            for h in range(4)
        ],
    }


HAND = _hand({(1, 2): ("induction", True), (0, 3): ("previous-token", False)})


def test_label_of_a_head_in_every_form_of_a_saved_atlas(tmp_path) -> None:
    for form in (HAND, {"atlas": HAND}, {"request": {}, "result": {"atlas": HAND}}):
        assert workers.label_of(form, 1, 2) == "induction"
        assert workers.label_of(form, 0, 3) == "previous-token"
        assert workers.label_of(form, 0, 0) is None
        assert workers.head_labels(form) == {
            (1, 2): ("induction", True),
            (0, 3): ("previous-token", False),
        }
        path = tmp_path / "at.json"
        path.write_text(json.dumps(form))
        assert workers.atlas(path) == HAND and hs.atlas(str(path)) == HAND
    with pytest.raises(HeadscopeError, match="not a head of this atlas"):
        workers.label_of(HAND, 2, 0)
    with pytest.raises(HeadscopeError, match="no head atlas here"):
        workers.atlas({"max-attention": {}})
    with pytest.raises(HeadscopeError, match="read as it is"):
        workers.atlas(path, random_seqs=4)


def test_an_atlas_computed_in_the_notebook_is_the_pipelines(tmp_path) -> None:
    at = workers.atlas("tiny-gpt2", **QUICK)
    assert (at["n_layers"], at["n_heads"]) == (2, 4) and len(at["heads"]) == 8
    assert at["probe"]["random_seqs"] == 4 and at["probe"]["random_len"] == 12
    for rec in at["heads"]:
        assert workers.label_of(at, rec["layer"], rec["head"]) == rec["label"]
    labelled = workers.head_labels(at)
    assert set(labelled) == {(r["layer"], r["head"]) for r in at["heads"] if r["label"]}
    (tmp_path / "at.json").write_text(json.dumps({"atlas": at}))  # `headscope atlas --out`'s shape
    assert hs.atlas(tmp_path / "at.json") == at
    grid = hs.atlas_grid(at).figures["atlas"]
    assert sum(len(t.x) for t in grid.data) == 8  # one cell per head


def test_views_name_the_heads_labels() -> None:
    result = hs.analyze(
        "tiny-gpt2", "the cat sat on the mat", ["max-attention", "head-tsne"], n_iter=100
    )
    hv = hs.head_view(result, layer=1, atlas=HAND).figures["head_view"]
    assert "L1H2 · induction" in hv.layout.title.text
    assert "L1H0 · " not in hv.layout.title.text  # no label: the bare name
    gallery = hs.gallery(result, atlas=HAND)
    assert "L1H2 · induction" in _text(gallery.figures["gallery"])
    assert "L0H3 · previous-token?" in _text(gallery.figures["gallery"])
    assert "· induction" not in _text(hs.gallery(result).figures["gallery"])


def _text(fig: Any) -> str:
    """The figure's JSON with its characters as they are (the dashboard sets plotly's json engine,
    which writes "·" as an escape)."""
    return json.dumps(json.loads(fig.to_json()), ensure_ascii=False)
