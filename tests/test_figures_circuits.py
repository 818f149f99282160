"""The circuits page's pure figure functions and request builders: AtP against real patching and the
information-flow graph on real results (tiny GPT-2 and Llama, computed as the worker would), the circuit and its
faithfulness curve on a hand-made result of edge attribution's documented shape (docs/results.md), the
graphs as JSON and GraphML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from frontend.figures import circuits as F
from frontend.pages.circuits import flow_request, pair_request, top_edges_for
from workers.analyses.circuits.spec import edge_count
from workers.core.contracts import AnalysisRequest
from workers.queue.jobs import compute_analysis

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CLEAN = "The head of the model is in the text and the word is of the token"
CORRUPTED = "The head of the model is in the text and a word is of the token"
GML = "{http://graphml.graphdrawing.org/xmlns}"


def _run(req: dict) -> dict:
    return compute_analysis(
        AnalysisRequest.model_validate(req), progress=lambda f, m: None, on_partial=lambda f: None
    )


@pytest.fixture(scope="module")
def pair(catalogue) -> dict:
    req = pair_request(
        text=CLEAN, corrupted=CORRUPTED, model="tiny-gpt2", target="#5|#9", real=True
    )
    req["analyses"] = [
        "attribution-patching"
    ]  # the edge attribution is drawn from a hand-made result below
    return _run(req)


@pytest.fixture(scope="module")
def flow(catalogue) -> dict:
    return _run(flow_request(text=CLEAN, model="tiny-llama", threshold=0.001))


def eap_result() -> dict:
    """Edge attribution's documented shape on a 2-layer, 2-head model: nodes in forward order, the top
    edges by |score| (one, L1H1 -> logits, off every path from the input), the circuit and the curve."""
    nodes = [{"id": "input", "kind": "input", "layer": -1, "head": None}]
    for layer in range(2):
        nodes += [
            {"id": f"L{layer}H{h}", "kind": "head", "layer": layer, "head": h} for h in range(2)
        ]
        nodes.append({"id": f"FF{layer}", "kind": "feedforward", "layer": layer, "head": None})
    nodes.append({"id": "logits", "kind": "logits", "layer": 2, "head": None})
    edges = [
        {"source": "L1H0", "target": "logits", "input": None, "score": 0.61},
        {"source": "input", "target": "L1H0", "input": "v", "score": 0.42},
        {
            "source": "L1H1",
            "target": "logits",
            "input": None,
            "score": -0.30,
        },  # L1H1 has no input edge
        {"source": "input", "target": "L0H0", "input": "q", "score": 0.21},
        {"source": "L0H0", "target": "FF1", "input": None, "score": 0.12},
        {"source": "FF1", "target": "logits", "input": None, "score": -0.05},
    ]
    return {
        "model": "tiny",
        "edge-attribution": {
            "nodes": nodes,
            "edges": edges,
            "method": "EAP-IG",
            "n_edges": 40,
            "circuit": {
                "n_top": 6,
                "n_edges": 5,
                "edges": [0, 1, 3, 4, 5],
                "nodes": ["input", "L0H0", "FF1", "L1H0", "logits"],
            },
            "faithfulness": 0.83,
            "curve": [[1, 0.0], [2, 0.55], [3, 0.58], [6, 0.83], [40, 1.0]],
            "corrupted_text": CORRUPTED,
        },
    }


def test_request_builders_match_the_contract():
    f = flow_request(text="a b", model="m")
    assert (
        f["analyses"] == ["information-flow"] and "threshold" not in f["options"]
    )  # default: same job id
    f2 = flow_request(text="a b", model="m", threshold=0.1, position=3)
    assert f2["options"]["threshold"] == 0.1 and f2["options"]["position"] == 3
    p = pair_request(text="a b", corrupted="a c", model="m", target="␣Mary|␣John", real=False)
    assert p["analyses"][0] == "attribution-patching" and p["options"]["target"] == [
        " Mary",
        " John",
    ]
    assert "real" not in p["options"]
    assert (
        pair_request(text="a b", corrupted="a c", model="m", top_edges=1000)["options"]["top_edges"]
        == 1000
    )
    assert top_edges_for({"n_layers": 30, "n_heads": 9}) == 1000  # SmolLM2: 123,211 edges
    assert (
        top_edges_for({"n_layers": 2, "n_heads": 4}) == edge_count(2, 4, False) < 1000
    )  # every edge
    assert top_edges_for({}) is None
    for req in (f, f2, p):
        AnalysisRequest.model_validate(req)


def test_prune_and_sizes_follow_the_documented_rule():
    res = eap_result()
    edges = res["edge-attribution"]["edges"]
    assert F.prune(edges, 6) == [0, 1, 3, 4, 5]  # L1H1 -> logits is on no path from the input
    assert (
        F.prune(edges, 2) == [0, 1] and F.prune(edges, 1) == []
    )  # L1H0 -> logits alone starts nowhere
    assert F.circuit_sizes(res) == [
        1,
        2,
        3,
        6,
        40,
    ]  # the curve's whole range, past the listed edges
    assert (
        F.faithfulness_at(res, 6) == 0.83
        and F.faithfulness_at(res, 2) == 0.55
        and F.faithfulness_at(res, 5) is None
    )


def test_circuit_figure_draws_the_pruned_edges_with_scores():
    res = eap_result()
    fig = F.circuit_figure(res)
    lines = [t for t in fig.data if t.mode == "lines"]
    segments = sum(sum(1 for v in t.x if v is None) for t in lines)
    assert segments == 5  # one line per kept edge
    assert {t.line.color for t in lines} == {F.POSITIVE, F.NEGATIVE}  # colour by sign
    widths = {t.line.color: t.line.width for t in lines}
    assert len({t.line.width for t in lines}) > 1 and max(widths.values()) > min(widths.values())
    mids = next(t for t in fig.data if t.name == "edge scores")
    assert len(mids.x) == 5 and any("L1H0 → logits: +0.6100" in s for s in mids.text)
    assert not any("L1H1" in s for s in mids.text)
    nodes = next(t for t in fig.data if t.name == "nodes")
    assert len(nodes.x) == len(res["edge-attribution"]["nodes"])
    y = dict(zip([c[0] for c in nodes.customdata], nodes.y, strict=True))
    assert y["input"] < y["L0H0"] < y["FF0"] < y["L1H0"] < y["logits"]  # layers bottom to top
    assert "faithfulness 0.830" in fig.layout.title.text
    small = F.circuit_figure(res, n_top=2)
    assert len(next(t for t in small.data if t.name == "edge scores").x) == 2
    click = {"points": [{"customdata": ["L0H1", "head", 0, 1, 0.0]}]}
    assert F.clicked_head(click) == (0, 1)
    assert F.clicked_head({"points": [{"customdata": ["FF1", "feedforward", 1, -1, 0.1]}]}) is None


def test_circuit_of_a_real_edge_attribution(catalogue):
    """The page's pruning gives the worker's own circuit and the curve's kept edges (tiny GPT-2)."""
    req = pair_request(
        text=CLEAN, corrupted=CORRUPTED, model="tiny-gpt2", target="#5|#9", real=False
    )
    assert "edge-attribution" in req["analyses"]
    res = _run(req)
    sec = res["edge-attribution"]
    assert F.prune(sec["edges"], sec["circuit"]["n_top"]) == sec["circuit"]["edges"]
    assert [len(F.prune(sec["edges"], int(n))) for n, _ in sec["curve"]] == sec["curve_kept"]
    sizes = F.circuit_sizes(res)
    largest = max(sec["curve_sizes"][-1], min(sec["circuit"]["n_top"], len(sec["edges"])))
    assert sizes and sizes[-1] == largest
    fig = F.circuit_figure(res, n_top=sizes[0])
    mids = next(t for t in fig.data if t.name == "edge scores")
    assert len(mids.x) == len(F.prune(sec["edges"], sizes[0]))
    assert F.faithfulness_at(res, sizes[0]) is not None


def test_faithfulness_curve_marks_the_chosen_size():
    res = eap_result()
    fig = F.faithfulness_figure(res, n_top=2)
    assert list(fig.data[0].x) == [1, 2, 3, 6, 40] and fig.layout.xaxis.type == "log"
    assert list(fig.data[1].x) == [2] and list(fig.data[1].y) == [0.55]
    assert "40" in fig.layout.title.text


def test_atp_scatter_one_point_per_head(pair):
    atp = pair["attribution-patching"]
    L, H = pair["n_layers"], pair["n_heads"]
    fig = F.atp_scatter_figure(pair)
    pts = fig.data[1]
    assert len(pts.x) == L * H
    assert np.allclose(pts.x, np.ravel(atp["real"]["heads"])) and np.allclose(
        pts.y, np.ravel(atp["heads"])
    )
    k = int(np.argmax(np.abs(np.ravel(atp["heads"]))))
    assert F.clicked_head({"points": [{"customdata": pts.customdata[k]}]}) == (k // H, k % H)
    assert f"Pearson {atp['pearson']:.3f}" in fig.layout.title.text.replace("<br>", " ")
    no_real = {**pair, "attribution-patching": {**atp, "real": None}}
    assert "real patching" in F.atp_scatter_figure(no_real).layout.annotations[0].text


def test_flow_figure_over_the_tokens(flow):
    sec = flow["information-flow"]
    fig = F.flow_figure(flow)
    lines = [t for t in fig.data if t.mode == "lines"]
    drawn = [e for e in sec["edges"] if e["kind"] in ("attention", "residual")]
    assert sum(sum(1 for v in t.x if v is None) for t in lines) == len(drawn)
    mids = next(t for t in fig.data if t.name == "attention edges")
    att = [e for e in sec["edges"] if e["kind"] == "attention"]
    assert att, "the tiny model's graph has attention edges at this threshold"
    assert len(mids.x) == len(att) and list(mids.marker.color) == [e["importance"] for e in att]
    ffs = next(t for t in fig.data if t.name == "feed-forward")
    assert len(ffs.x) == sum(e["kind"] == "feedforward" for e in sec["edges"])
    top = max(nd["layer"] for nd in sec["nodes"] if nd["kind"] == "state")
    assert top == flow["n_layers"] and f"token {sec['position']}" in fig.layout.title.text
    nodes = next(t for t in fig.data if t.name == "nodes")
    assert list(nodes.marker.symbol).count("star") == 1  # the position the graph starts from
    assert list(fig.layout.xaxis.range) == [
        -0.5,
        flow["n_tokens"] - 0.5,
    ]  # every token, reached or not
    k = max(range(len(att)), key=lambda i: att[i]["importance"])
    assert F.clicked_head({"points": [{"customdata": mids.customdata[k]}]}) == (
        att[k]["layer"],
        int(np.argmax(att[k]["heads"])),
    )
    assert F.clicked_head({"points": [{"x": 1, "y": 2}]}) is None  # a state node carries no head


def test_graphs_as_json_and_graphml(flow):
    for g in (F.circuit_graph(eap_result(), n_top=6), F.flow_graph(flow)):
        json.dumps(g)
        root = ET.fromstring(F.graphml(g))
        graph = root.find(f"{GML}graph")
        assert graph is not None and graph.get("edgedefault") == "directed"
        nodes, edges = graph.findall(f"{GML}node"), graph.findall(f"{GML}edge")
        assert [n.get("id") for n in nodes] == [str(nd["id"]) for nd in g["nodes"]]
        assert len(edges) == len(g["edges"])
        ids = {n.get("id") for n in nodes}
        assert all(e.get("source") in ids and e.get("target") in ids for e in edges)
        keys = {k.get("attr.name"): k for k in root.findall(f"{GML}key")}
        weight = "score" if "score" in keys else "importance"
        assert keys[weight].get("attr.type") == "double"
        first = [d.text for d in edges[0].findall(f"{GML}data") if d.get("key") == f"edge_{weight}"]
        assert float(first[0]) == g["edges"][0][weight]
    circuit = F.circuit_graph(eap_result(), n_top=6)
    assert circuit["faithfulness"] == 0.83 and len(circuit["edges"]) == 5
    assert "L1H1" not in {nd["id"] for nd in circuit["nodes"]}


def test_the_circuits_json_and_graphml_carry_the_heads_atlas_labels():
    labels = {(1, 0): ("induction", True), (1, 1): ("previous-token", False)}
    circuit = F.circuit_graph(eap_result(), n_top=6, head_labels=labels)
    by_id = {nd["id"]: nd for nd in circuit["nodes"]}
    assert by_id["L1H0"]["label"] == "induction" and by_id["L0H0"]["label"] == ""  # none: empty
    assert "label" not in by_id["FF1"] and "label" not in by_id["input"]  # not heads
    root = ET.fromstring(F.graphml(circuit))
    keys = {k.get("attr.name"): k.get("id") for k in root.findall(f"{GML}key")}
    node = next(n for n in root.iter(f"{GML}node") if n.get("id") == "L1H0")
    assert [d.text for d in node.findall(f"{GML}data") if d.get("key") == keys["label"]] == [
        "induction"
    ]
    bare = F.circuit_graph(eap_result(), n_top=6)  # no stored atlas: no label field
    assert all("label" not in nd for nd in bare["nodes"])
    assert "label" not in F.graphml(bare)


def _with_atp(res: dict, best: dict[str, int]) -> dict:
    """``res`` with attribution patching by position over 5 tokens: each head's and feed-forward's
    largest |effect| at the token ``best`` names (token 0 elsewhere), the embeddings' at token 1."""
    n = 5
    heads = [[[0.01] * n for _ in range(2)] for _ in range(2)]
    ffs = [[0.01] * n for _ in range(2)]
    for node, t in best.items():
        if node.startswith("FF"):
            ffs[int(node[2:])][t] = -0.9  # by magnitude
        else:
            layer, head = int(node[1]), int(node[3])
            heads[layer][head][t] = 0.7
    residual = [[0.0, 0.5, 0.0, 0.0, 0.0]] + [[0.0] * n for _ in range(2)]
    atp = {"heads_by_position": heads, "feedforward_by_position": ffs, "residual": residual}
    return {**res, "tokens": list("abcde"), "attribution-patching": atp}


def test_circuit_nodes_are_labelled_as_everywhere():
    fig = F.circuit_figure(eap_result())
    nodes = next(t for t in fig.data if t.name == "nodes")
    named = {c[0]: text for c, text in zip(nodes.customdata, nodes.text, strict=True)}
    assert named["L1H0"] == "L1H0" and named["FF1"] == "FF1" and named["logits"] == "logits"
    assert named["input"] == "embeddings"  # the input node is the token embeddings
    assert named["L1H1"] == "" and named["FF0"] == ""  # off the circuit: a grey dot, no label
    assert "markers+text" in nodes.mode
    assert "embeddings" in fig.layout.yaxis.ticktext


def test_drawn_edges_are_capped_and_the_title_says_so():
    res = eap_result()
    capped = F.circuit_figure(res, max_edges=2)
    lines = [t for t in capped.data if t.mode == "lines"]
    assert sum(sum(1 for v in t.x if v is None) for t in lines) == 2
    mids = next(t for t in capped.data if t.name == "edge scores")
    assert [m.split(":")[0] for m in mids.text] == ["L1H0 → logits", "embeddings → L1H0 (v)"]
    assert "5 on a path" in capped.layout.title.text.replace(
        "<br>", " "
    )  # the circuit's size, not what is drawn
    assert (
        "its 2 strongest edges drawn (capped for legibility)"
        in capped.layout.title.text.replace("<br>", " ")
    )
    assert "drawn" not in F.circuit_figure(res, max_edges=5).layout.title.text.replace("<br>", " ")


def test_the_layout_by_token_position_moves_each_node_to_its_token():
    best = {"L0H0": 3, "L0H1": 2, "L1H0": 4, "L1H1": 4, "FF0": 2, "FF1": 1}
    res = _with_atp(eap_result(), best)
    by_head = next(t for t in F.circuit_figure(res).data if t.name == "nodes")
    by_pos_fig = F.circuit_figure(res, layout="position")
    by_pos = next(t for t in by_pos_fig.data if t.name == "nodes")
    ids = [c[0] for c in by_pos.customdata]
    x = dict(zip(ids, by_pos.x, strict=True))
    for node, t in best.items():
        assert abs(x[node] - t) <= 0.4, node  # at its token (side by side when two share it)
    assert abs(x["input"] - 1) <= 0.4 and abs(x["logits"] - 4) <= 0.4  # the last token
    assert x["L1H0"] != x["L1H1"]  # two heads of a layer at one token sit apart
    assert list(by_pos.y) == list(by_head.y)  # the layers stay the rows
    assert list(by_pos.x) != list(by_head.x)
    assert list(by_pos_fig.layout.xaxis.ticktext) == list("abcde")
    assert "token" in by_pos_fig.layout.xaxis.title.text
    # no AtP by position in the result: by head, and the title says why
    plain = F.circuit_figure(eap_result(), layout="position")
    assert list(next(t for t in plain.data if t.name == "nodes").x) == list(by_head.x)
    assert "no AtP by position" in plain.layout.title.text.replace("<br>", " ")


def test_the_whole_curve_is_offered_and_the_page_opens_at_the_faithful_size():
    res = eap_result()
    assert F.opening_size(res) == 6  # the smallest size with faithfulness >= 0.8 (0.83)
    assert F.opening_size(res, level=0.5) == 2 and F.opening_size(res, level=1.5) == 40
    sec = res["edge-attribution"]
    sec["curve_kept"] = [0, 2, 2, 5, 30]
    old = F.circuit_figure(res, n_top=40)  # a result from before larger circuits kept edges
    assert (
        "drawn: the 5 of the 6 listed edges on a path among themselves"
        in old.layout.title.text.replace("<br>", " ")
    )
    strongest = [
        {"source": "L1H0", "target": "logits", "input": None, "score": 0.61},
        {"source": "input", "target": "L1H0", "input": "v", "score": 0.42},
        {"source": "L0H1", "target": "L1H0", "input": "k", "score": -0.33},
    ]
    sec["curve_edges"] = [{"n_top": 40, "edges": strongest}]
    fig = F.circuit_figure(res, n_top=40, max_edges=2)
    mids = next(t for t in fig.data if t.name == "edge scores")
    assert len(mids.x) == 2
    title = fig.layout.title.text.replace("<br>", " ")
    assert "top 40 edges" in title and "30 on a path" in title and "faithfulness 1.000" in title
    assert "its 2 strongest edges drawn" in title
    whole = F.circuit_figure(res, n_top=40)
    assert any(
        m.startswith("L0H1 → L1H0 (k)")
        for m in next(t for t in whole.data if t.name == "edge scores").text
    )
    g = F.circuit_graph(res, n_top=40)
    assert g["n_edges"] == 30 and len(g["edges"]) == 3 and not g["edges_complete"]


def test_circuit_and_atp_hover_name_the_atlas_label_when_given(pair):
    """A head node's and an AtP point's hover name the stored atlas' label (kit/atlas_labels.py);
    other nodes, unlabelled heads and figures drawn without an atlas say nothing more."""
    labels = {(1, 0): ("induction", True), (0, 0): ("previous-token", False)}
    fig = F.circuit_figure(eap_result(), head_labels=labels)
    nodes = next(t for t in fig.data if t.name == "nodes")
    tag = {c[0]: c[5] for c in nodes.customdata}
    assert tag["L1H0"] == " · induction" and tag["L0H0"] == " · previous-token?"
    assert tag["L1H1"] == "" and tag["FF0"] == "" and tag["logits"] == ""
    assert "%{customdata[0]}%{customdata[5]}" in nodes.hovertemplate
    bare = next(t for t in F.circuit_figure(eap_result()).data if t.name == "nodes")
    assert all(c[5] == "" for c in bare.customdata)
    H = pair["n_heads"]
    pts = F.atp_scatter_figure(pair, head_labels=labels).data[1]
    assert pts.customdata[H][2] == " · induction" and pts.customdata[1][2] == ""
    assert F.clicked_head({"points": [{"customdata": pts.customdata[H]}]}) == (1, 0)
    assert all(c[2] == "" for c in F.atp_scatter_figure(pair).data[1].customdata)
