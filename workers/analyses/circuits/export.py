"""A circuit found on a task set, exported (docs/circuits.md, "Export"): a documented JSON and GraphML.

JSON (``format: "headscope-circuit"``, ``version: 1``): ``model``, ``method``, ``task``,
``n_edges_total`` (the model's graph), ``k`` (the size as a fraction of all edges, or None), ``edges``
(``source``, ``target``, ``input`` — q, k, v or None —, ``score``: the set's score, a fraction of the
set's mean logit difference), ``nodes`` (those the edges touch, in forward order: ``id`` as every page
names them — ``input``, ``L{layer}H{head}``, ``FF{layer}``, ``logits`` — ``kind``, ``layer``, ``head``).
GraphML: the same nodes and edges, directed, with ``kind``/``layer``/``head`` on nodes and
``input``/``score`` on edges. Given the model's head atlas (``headscope circuits --atlas``), head
nodes carry ``label`` in both. Torch-free.
"""

from __future__ import annotations

from typing import Any
from xml.etree import ElementTree as ET

FORMAT = "headscope-circuit"


def circuit_document(
    result: dict[str, Any],
    n_edges: int,
    k: float | None = None,
    labels: dict[tuple[int, int], tuple[str, bool]] | None = None,
) -> dict[str, Any]:
    """The top ``n_edges`` edges (by |score|) of a ``circuits-set`` result as the export JSON; with
    the model's head atlas labels (``{(layer, head): (label, confident)}``, docs/atlas.md) every head
    node gets ``label`` (``induction``; ``induction?`` when tentative; ``""`` for none)."""
    listed = result["edges"]
    if n_edges > len(listed):
        raise ValueError(
            f"the result lists {len(listed)} edges; a circuit of {n_edges} needs a result with more "
            f"(set_edges / --edges)"
        )
    edges = listed[:n_edges]
    used = {e["source"] for e in edges} | {e["target"] for e in edges}
    return {
        "format": FORMAT,
        "version": 1,
        "model": result.get("model"),
        "method": result.get("method"),
        "task": result.get("task"),
        "n_edges_total": result.get("n_edges_total"),
        "k": k,
        "nodes": [_labelled(n, labels) for n in result["nodes"] if n["id"] in used],
        "edges": edges,
    }


def _labelled(
    node: dict[str, Any], labels: dict[tuple[int, int], tuple[str, bool]] | None
) -> dict[str, Any]:
    if labels is None or node.get("kind") != "head":
        return node
    got = labels.get((int(node["layer"]), int(node["head"])))
    return {**node, "label": "" if got is None else got[0] if got[1] else f"{got[0]}?"}


def graphml(doc: dict[str, Any]) -> str:
    """The export JSON ``doc`` as GraphML (directed)."""
    ns = "http://graphml.graphdrawing.org/xmlns"
    root = ET.Element("graphml", xmlns=ns)
    for key, on, kind in (
        ("kind", "node", "string"),
        ("layer", "node", "int"),
        ("head", "node", "int"),
        *((("label", "node", "string"),) if any("label" in n for n in doc["nodes"]) else ()),
        ("input", "edge", "string"),
        ("score", "edge", "double"),
    ):
        ET.SubElement(root, "key", {"id": key, "for": on, "attr.name": key, "attr.type": kind})
    graph = ET.SubElement(
        root, "graph", id=str(doc.get("task") or "circuit"), edgedefault="directed"
    )
    for node in doc["nodes"]:
        el = ET.SubElement(graph, "node", id=node["id"])
        for key in ("kind", "layer", "head", "label"):
            if node.get(key) is not None:
                ET.SubElement(el, "data", key=key).text = str(node[key])
    for i, edge in enumerate(doc["edges"]):
        el = ET.SubElement(graph, "edge", id=f"e{i}", source=edge["source"], target=edge["target"])
        if edge.get("input") is not None:
            ET.SubElement(el, "data", key="input").text = edge["input"]
        ET.SubElement(el, "data", key="score").text = repr(float(edge["score"]))
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode")
