"""Head labels from the stored default atlas (frontend/kit/atlas_labels.py): read, never queued."""

from __future__ import annotations

from typing import Any

from frontend.kit.api_client import ApiError
from frontend.kit.atlas_labels import (
    AtlasLabels,
    atlas_hint,
    atlas_request,
    default_atlas_id,
    format_label,
    head_name,
    label_grid,
    labels_of,
    pair_agreement,
)
from workers.core.contracts import AnalysisRequest

SECTION = {
    "heads": [
        {"layer": 0, "head": 1, "label": "previous-token", "confident": True},
        {"layer": 1, "head": 0, "label": "induction", "confident": False},
        {"layer": 1, "head": 1, "label": None, "confident": False},
    ]
}


class FakeClient:
    """Answers ``analysis(id)`` from a dict of stored jobs; records every call; refuses submits."""

    def __init__(self, jobs: dict[str, dict[str, Any]]):
        self.jobs = jobs
        self.calls: list[str] = []

    def analysis(self, job_id: str, **_: Any) -> dict[str, Any]:
        self.calls.append(job_id)
        if job_id not in self.jobs:
            raise ApiError("not found", status=404)
        return self.jobs[job_id]

    def submit_analysis(self, **_: Any) -> dict[str, Any]:
        raise AssertionError("the labels must never queue an atlas")


def test_labels_and_names() -> None:
    labels = labels_of(SECTION)
    assert labels == {(0, 1): ("previous-token", True), (1, 0): ("induction", False)}
    assert format_label(labels[(0, 1)]) == "previous-token"
    assert format_label(labels[(1, 0)]) == "induction?"
    assert head_name(1, 0, labels) == "L1H0 · induction?"
    assert head_name(1, 1, labels) == "L1H1"  # no label: the bare name
    assert head_name(0, 1, None) == "L0H1"


def test_default_id_is_the_pages_request() -> None:
    # the /heads page's default form values give the same id as no options at all
    explicit = atlas_request(model="minilm", random_seqs=32, random_len=64)
    assert AnalysisRequest(**explicit).job_id() == default_atlas_id("minilm")
    other = atlas_request(model="minilm", random_seqs=8, random_len=None)
    assert AnalysisRequest(**other).job_id() != default_atlas_id("minilm")


def test_reads_a_finished_atlas_once() -> None:
    jid = default_atlas_id("minilm")
    assert jid is not None
    client = FakeClient({jid: {"status": "finished", "result": {"atlas": SECTION}}})
    cache = AtlasLabels(client)  # type: ignore[arg-type]
    assert cache.get("minilm")[(1, 0)] == ("induction", False)
    assert cache.get("minilm") == labels_of(SECTION)
    assert client.calls == [jid]  # a finished atlas is read once


def test_none_stored_or_unfinished_gives_nothing() -> None:
    jid = default_atlas_id("minilm")
    assert jid is not None
    client = FakeClient({})
    cache = AtlasLabels(client, miss_ttl=3600)  # type: ignore[arg-type]
    assert cache.get("minilm") == {}
    assert cache.get("minilm") == {}
    assert client.calls == [jid]  # a miss is not looked up again at once
    running = FakeClient({jid: {"status": "running", "result": None}})
    assert AtlasLabels(running, miss_ttl=0).get("minilm") == {}  # type: ignore[arg-type]
    running.jobs[jid] = {"status": "finished", "result": {"atlas": SECTION}}
    assert AtlasLabels(running, miss_ttl=0).get("minilm") != {}  # type: ignore[arg-type]
    assert cache.get(None) == {}


def test_pair_agreement_of_two_models_labels() -> None:
    a = {(1, 0): ("induction", True), (0, 1): ("previous-token", True)}
    b = {(2, 3): ("induction", False), (0, 0): ("first-token", True)}
    assert pair_agreement(a, b, (1, 0), (2, 3)) == "atlas labels agree: induction / induction?"
    assert pair_agreement(a, b, (0, 1), (0, 0)) == (
        "atlas labels differ: A previous-token, B first-token"
    )
    assert pair_agreement(a, b, (1, 0), (5, 5)) == "atlas labels differ: A induction, B none"
    assert pair_agreement(a, b, (3, 3), (5, 5)) == "atlas: neither head labelled"
    assert pair_agreement(a, {}, (1, 0), (2, 3)) == ""  # B has no stored atlas: nothing said


def test_label_grid_is_a_heatmaps_customdata() -> None:
    grid = label_grid(labels_of(SECTION), 2, 2)
    assert grid == [["", " · previous-token"], [" · induction?", ""]]
    assert label_grid(None, 1, 3) == [["", "", ""]]


def test_hint_links_the_head_atlas_only_where_none_is_stored() -> None:
    (link,) = atlas_hint("smollm2", {})
    assert link.href == "/heads?model=smollm2" and "head atlas" in link.children
    assert atlas_hint("smollm2", labels_of(SECTION)) == []


def test_a_pages_json_download_lists_each_models_labels() -> None:
    from frontend.kit.atlas_labels import export_labels

    jid = default_atlas_id("minilm")
    assert jid is not None
    client = FakeClient({jid: {"status": "finished", "result": {"atlas": SECTION}}})
    rows = [
        {"layer": 0, "head": 1, "label": "previous-token", "confident": True},
        {"layer": 1, "head": 0, "label": "induction", "confident": False},
    ]
    assert export_labels(client, {"model": "minilm"}) == {"minilm": rows}  # type: ignore[arg-type]
    # a comparison: only the model with a stored atlas is listed
    both = export_labels(client, {"model_a": "minilm", "model_b": "tiny-gpt2"})  # type: ignore[arg-type]
    assert both == {"minilm": rows}
    assert export_labels(client, {"model": "tiny-gpt2"}) == {}  # type: ignore[arg-type]
    assert export_labels(client, None) == {}  # type: ignore[arg-type]
