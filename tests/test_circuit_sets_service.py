"""Circuits on a task set through the API (422s before queueing), the job and the CLI (docs/circuits.md,
SPEC 14), on the tests' tiny GPT-2: the set is JSON Lines in the request's text."""

from __future__ import annotations

import json
from xml.etree import ElementTree as ET

import pytest
import test_circuits_service
from test_circuit_tasks import TINY_NAMES

from backend.cli import main
from workers.analyses.circuits.tasks import ioi
from workers.core.contracts import AnalysisRequest
from workers.queue.jobs import compute_analysis

pytestmark = pytest.mark.usefixtures("one_torch_thread")
client = test_circuits_service.client
KIND = "circuits-set"


@pytest.fixture(scope="module")
def dataset(catalogue, tiny_model_dirs):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dirs["tiny-gpt2"]))
    exs = ioi(tok, 8, seed=0, names=TINY_NAMES)
    return "\n".join(json.dumps({k: v for k, v in ex.as_dict().items()}) for ex in exs)


@pytest.mark.parametrize(
    ("text", "kinds", "options", "words"),
    [
        ("not a set", [KIND], {}, ["line 1 is not JSON"]),
        ('{"clean": "a"}', [KIND], {}, ["line 1 has no field 'corrupted'"]),
        ("ioi", [KIND, "max-attention"], {}, ["circuits-set runs alone"]),
        ("ioi", [KIND], {"bootstrap": -1}, ["options.bootstrap"]),
        ("ioi", [KIND], {"set_fields": {"prompt": "x"}}, ["set_fields names"]),
        ("ioi", [KIND], {"discovery": 1.0}, ["options.discovery"]),
    ],
)
def test_bad_set_requests_get_422_before_queueing(client, text, kinds, options, words):
    resp = client.post(
        "/api/analyses",
        json={"model": "tiny-gpt2", "text": text, "analyses": kinds, "options": options},
    )
    assert resp.status_code == 422, resp.text
    body = json.dumps(resp.json())
    for w in words:
        assert w in body, (w, body)


def test_job_computes_a_circuit_on_a_set(catalogue, dataset):
    req = AnalysisRequest.model_validate({
        "model": "tiny-gpt2", "text": dataset, "analyses": [KIND],
        "options": {"ig_steps": 2, "bootstrap": 3, "random_circuits": 2, "set_edges": 30, "dtype": "float64"},
    })  # fmt: skip
    steps: list[tuple[float, str]] = []
    result = compute_analysis(
        req, progress=lambda f, m: steps.append((f, m)), on_partial=lambda fields: None
    )
    json.dumps(result)
    res = result[KIND]
    for key in ("accuracy", "logit_diff", "n_examples", "sizes", "curve", "cpr", "cmd", "random",
                "stability", "edges", "n_edges_total", "warning"):  # fmt: skip
        assert key in res, key
    assert res["task"] == "upload" and len(res["examples"]) == 8 and len(res["edges"]) == 30
    assert res["n_examples"] == {"discovery": 4, "evaluation": 4}
    assert abs(res["curve"][-1][1] - 1) < 1e-12 and len(res["random"]["curve"]) == 10
    nodes = res["node_scores"]  # AtP over the same discovery examples, the model's node names
    assert nodes["n_examples"] == 4 and len(nodes["top"]) == 10  # 2 layers x (4 heads + FF)
    assert {nd["id"] for nd in nodes["top"]} == {n["id"] for n in res["nodes"]} - {
        "input",
        "logits",
    }
    fractions = [f for f, _ in steps]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    messages = " | ".join(m for _, m in steps)
    assert "scores: 4/4 examples" in messages and "evaluation: 4/4 examples" in messages


def test_cli_circuits(tmp_path, catalogue, dataset):
    data = tmp_path / "set.jsonl"
    data.write_text(dataset)
    out, cj, gm = tmp_path / "r.json", tmp_path / "c.json", tmp_path / "c.graphml"
    args = ["circuits", "--model", "tiny-gpt2", "--dataset", str(data), "--random", "2", "--bootstrap", "2",
            "--dtype", "float64", "-q", "--out", str(out)]  # fmt: skip
    assert (
        main([*args, "--circuit-json", str(cj), "--graphml", str(gm), "--circuit-size", "0.1"]) == 0
    )
    res = json.loads(out.read_text())
    assert res["analysis"] == KIND and res["task"] == "set.jsonl" and res["method"] == "EAP-IG"
    assert res["model"] == "tiny-gpt2" and len(res["stability"]) == 10
    doc = json.loads(cj.read_text())
    n = res["size_edges"][res["sizes"].index(0.1)]
    assert doc["format"] == "headscope-circuit" and len(doc["edges"]) == n
    assert doc["edges"] == res["edges"][:n]
    ids = {node["id"] for node in doc["nodes"]}
    assert all(e["source"] in ids and e["target"] in ids for e in doc["edges"])
    root = ET.parse(gm).getroot()
    ns = {"g": "http://graphml.graphdrawing.org/xmlns"}
    assert len(root.findall(".//g:edge", ns)) == n and len(root.findall(".//g:node", ns)) == len(
        ids
    )
    assert all("label" not in node for node in doc["nodes"])  # no --atlas: no label
    # --atlas: the head nodes carry their labels (a hand-made atlas labelling every head)
    heads = [
        {"layer": la, "head": h, "label": "induction", "confident": h != 0}
        for la in range(2)
        for h in range(4)
    ]
    at = tmp_path / "atlas.json"
    at.write_text(json.dumps({"atlas": {"model": "tiny-gpt2", "heads": heads}}))
    assert main([*args, "--circuit-json", str(cj), "--graphml", str(gm), "--atlas", str(at)]) == 0
    labelled = [node for node in json.loads(cj.read_text())["nodes"] if node["kind"] == "head"]
    assert labelled and all(
        node["label"] == ("induction?" if node["head"] == 0 else "induction") for node in labelled
    )
    keys = {k.get("attr.name") for k in ET.parse(gm).getroot().findall(".//g:key", ns)}
    assert "label" in keys
    at.write_text(json.dumps({"atlas": {"model": "tiny-bert", "heads": heads}}))
    assert main([*args, "--atlas", str(at)]) == 2  # another model's atlas: refused
    # EAP is one step; the two sources exclude each other; the mapped field names
    assert main([*args, "--method", "eap"]) == 0 and json.loads(out.read_text())["method"] == "EAP"
    assert main([*args, "--method", "eap", "--ig-steps", "3"]) == 2
    assert main([*args, "--task", "ioi"]) == 2
    renamed = tmp_path / "mib.jsonl"
    renamed.write_text(dataset.replace('"clean"', '"prompt"'))
    assert main([*args[:4], str(renamed), *args[5:]]) == 2  # no field clean
    assert main([*args[:4], str(renamed), *args[5:], "--fields", "clean=prompt"]) == 0
