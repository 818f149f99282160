"""The data-set mode's figures and text (frontend/figures/circuit_sets.py) on a small hand-made
``circuits-set`` result: values are plotted as given, CPR/CMD text carries the numbers."""

from __future__ import annotations

import json
import math

import pytest

from frontend.figures import circuit_sets as F
from frontend.pages.circuits_sets import pair_link, set_request

KS = [0.001, 0.01, 0.1, 0.5, 1.0]


def nodes():
    out = [{"id": "input", "kind": "input", "layer": -1, "head": None}]
    out += [
        {"id": f"L{a}H{h}", "kind": "head", "layer": a, "head": h}
        for a in range(2)
        for h in range(2)
    ]
    out += [{"id": f"FF{a}", "kind": "feedforward", "layer": a, "head": None} for a in range(2)]
    return out + [{"id": "logits", "kind": "logits", "layer": 2, "head": None}]


def result(**over):
    edges = [
        {"source": "input", "target": "L0H1", "input": "v", "score": 0.9},
        {"source": "L0H1", "target": "L1H0", "input": "k", "score": -0.5},
        {"source": "L1H0", "target": "logits", "score": 0.4},
        {"source": "input", "target": "logits", "score": 0.3},
        {"source": "FF0", "target": "L1H1", "input": "q", "score": 0.01},
    ]
    res = {
        "method": "EAP-IG", "accuracy": 0.6, "logit_diff": 1.234, "n_examples": {"discovery": 4, "evaluation": 4},
        "warning": "accuracy 60% is below MIB's 75%", "sizes": KS, "n_edges_total": 100,
        "curve": [[k, v] for k, v in zip(KS, [0.1, 0.3, 0.7, 0.95, 1.0], strict=True)],
        "curve_abs": [[k, v] for k, v in zip(KS, [0.2, 0.4, 0.8, 0.9, 1.0], strict=True)],
        "cpr": 1.8765, "cmd": 0.0312,
        "random": {"seeds": 3, "curve": [[k, v] for k, v in zip(KS, [0.0, 0.05, 0.2, 0.6, 1.0], strict=True)],
                   "cpr": 0.2468, "cmd": 0.7531,
                   "spread": {"cpr": 0.0111, "cmd": 0.0222, "curve": [[k, 0.1] for k in KS]}},
        "stability": [[k, m, s] for k, m, s in zip(KS, [0.3, 0.5, 0.7, 0.9, 1.0], [0.1, 0.1, 0.05, 0.02, 0.0], strict=True)],
        "bootstrap": 3, "edges": edges, "nodes": nodes(),
        "examples": [{"clean": "a b", "corrupted": "c b", "answer": " x", "wrong": " y"}] * 3,
        "discovery_examples": [0, 2],
    }  # fmt: skip
    return {**res, **over}


def trace(fig, name):
    return next(t for t in fig.data if t.name and t.name.startswith(name))


def test_curve_and_band_are_plotted_as_given():
    res = result()
    fig = F.faithfulness_figure(res)
    assert fig.layout.xaxis.type == "log"
    found = trace(fig, "circuit by score")
    assert list(found.x) == KS and list(found.y) == [0.1, 0.3, 0.7, 0.95, 1.0]
    assert list(trace(fig, "circuit by |score|").y) == [0.2, 0.4, 0.8, 0.9, 1.0]
    assert list(trace(fig, "random (mean").y) == [0.0, 0.05, 0.2, 0.6, 1.0]
    band = trace(fig, "random ± sd")
    ys = list(band.y)  # mean + sd along k, then mean - sd back
    assert ys[:5] == pytest.approx([0.1, 0.15, 0.3, 0.7, 1.1])
    assert ys[5:] == pytest.approx([0.9, 0.5, 0.1, -0.05, -0.1])
    assert list(band.x) == KS + KS[::-1]


def test_no_random_circuits_no_band():
    rnd = {
        "seeds": 0,
        "curve": [],
        "cpr": None,
        "cmd": None,
        "spread": {"cpr": None, "cmd": None, "curve": []},
    }
    fig = F.faithfulness_figure(result(random=rnd))
    assert [t.name for t in fig.data if "random" in (t.name or "")] == []
    assert "no random circuits" in F.scores_line(result(random=rnd))


def test_scores_and_accuracy_text_carry_the_numbers():
    line = F.scores_line(result())
    assert "CPR 1.88" in line and "random 0.25 ± 0.01" in line
    assert "CMD 0.03" in line and "random 0.75 ± 0.02" in line
    acc = F.accuracy_line(result())
    assert "accuracy 60%" in acc and "1.23" in acc and "4 discovery + 4 held-out" in acc


def test_stability_mean_and_sd_per_size():
    fig = F.stability_figure(result())
    t = fig.data[0]
    assert list(t.x) == KS and list(t.y) == [0.3, 0.5, 0.7, 0.9, 1.0]
    assert list(t.error_y.array) == [0.1, 0.1, 0.05, 0.02, 0.0]
    assert not F.stability_figure(result(stability=[])).data


def test_circuit_at_a_size_is_the_listed_edges_pruned_and_labelled():
    res = result()
    sizes = F.size_options(res)
    # 100 edges in all, 5 listed: k = 0.001 and 0.01 (1 edge each) fit, 0.1 (10) does not
    assert [o["value"] for o in sizes] == [0.001, 0.01]
    fig = F.circuit_at(res, 0.01)
    labels = {t for t in trace(fig, "nodes").text if t}
    assert labels == set()  # one edge, input -> L0H1, reaches no logits: pruned away
    big = result(n_edges_total=5, sizes=[0.2, 0.8])
    assert [o["value"] for o in F.size_options(big)] == [0.2, 0.8]
    fig = F.circuit_at(big, 0.8)  # top 4 edges: input->L0H1->L1H0->logits and input->logits
    labels = {t for t in trace(fig, "nodes").text if t}
    assert labels == {"embeddings", "L0H1", "L1H0", "logits"}
    title = fig.layout.title.text
    assert "k = 0.8" in title and f"top {math.ceil(0.8 * 5)} edges" in title


def test_request_and_pair_link():
    req = set_request(model="m", task="ioi", n=16, method="eap", bootstrap=10, random_circuits=2)
    assert req == {"model": "m", "text": "ioi", "analyses": ["circuits-set"],
                   "options": {"set_edges": 1000, "set_examples": 16, "ig_steps": 1, "random_circuits": 2}}  # fmt: skip
    with pytest.raises(ValueError, match="JSON Lines"):
        set_request(model="m", task="upload", jsonl="  ")
    link = pair_link({"clean": "a b", "corrupted": "c b", "answer": " x", "wrong": " y"}, "m")
    assert link.startswith("/circuits?") and "corrupted=c+b" in link and "run=1" in link
    rows = F.example_rows(result())
    assert [r["split"] for r in rows] == ["discovery", "held out", "discovery"]


def test_node_scores_are_bars_strongest_on_top():
    top = [
        {"id": "L1H0", "kind": "head", "layer": 1, "head": 0, "score": 0.6},
        {"id": "FF0", "kind": "feedforward", "layer": 0, "head": None, "score": -0.3},
        {"id": "L0H1", "kind": "head", "layer": 0, "head": 1, "score": 0.1},
    ]
    fig = F.node_figure(result(node_scores={"method": "AtP", "n_examples": 2, "top": top}))
    bars = fig.data[0]
    assert list(bars.y) == ["L0H1", "FF0", "L1H0"]  # the strongest drawn at the top
    assert list(bars.x) == [0.1, -0.3, 0.6]
    assert bars.marker.color[1] != bars.marker.color[0]  # the negative one in another colour
    assert "2 discovery examples" in fig.layout.title.text
    assert "No node scores" in F.node_figure(result()).layout.annotations[0].text


def test_the_circuit_downloads_are_the_export_documents():
    from xml.etree import ElementTree as ET

    from frontend.pages.circuits_sets.exports import circuit_file

    res = result(edges=result()["edges"] * 40)  # 200 listed: k = 0.01 is one edge of 100
    status = {"status": "finished", "result": {"model": "m", "circuits-set": res}}
    got = circuit_file(status, 0.01, "circuit-json")
    doc = json.loads(got["content"])
    assert doc["format"] == "headscope-circuit" and doc["model"] == "m" and doc["k"] == 0.01
    assert doc["edges"] == res["edges"][:1] and got["filename"].endswith(".json")
    xml = circuit_file(status, 0.01, "circuit-graphml")["content"]
    ns = {"g": "http://graphml.graphdrawing.org/xmlns"}
    assert len(ET.fromstring(xml).findall(".//g:edge", ns)) == 1
    assert "run the analysis first" in circuit_file({"status": "running"}, 0.01, "circuit-json")
