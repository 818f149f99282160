"""Head labels from the stored default atlas (docs/atlas.md): every page that names a head adds its
label when an atlas of that model with the /heads page's default settings is stored and finished.

Only ever READ: the default request's id is computed here (identical requests share one id,
``AnalysisRequest.job_id``) and looked up; nothing is queued, so no page computes an atlas implicitly.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any
from urllib.parse import urlencode

from frontend.kit.api_client import ApiClient, ApiError
from workers.analyses.atlas.spec import ATLAS, ATLAS_TEXT
from workers.core.contracts import AnalysisRequest
from workers.core.notation import head_label

logger = logging.getLogger(__name__)

Labels = dict[tuple[int, int], tuple[str, bool]]
MISS_TTL = 30.0  # seconds before a model without a finished atlas is looked up again
ATLAS_HINT = "label heads: open the head atlas"


def atlas_request(
    *,
    model: str,
    random_seqs: int | None = None,
    random_len: int | None = None,
    corpus: str | None = None,
    rule: str | None = None,
) -> dict[str, Any]:
    """The /heads page's request: always ``ATLAS_TEXT``, so one stored atlas per (model, settings);
    a ``corpus`` or labelling ``rule`` other than the default is sent, the default never (the other
    pages look the default atlas up by its id)."""
    options: dict[str, Any] = {}
    if random_seqs:
        options["random_seqs"] = int(random_seqs)
    if random_len:
        options["random_len"] = int(random_len)
    if corpus and corpus != "builtin-english":
        options["corpus"] = corpus
    if rule and rule != "specific-first":
        options["rule"] = rule
    return {"model": model, "text": ATLAS_TEXT, "analyses": [ATLAS], "options": options}


def default_atlas_id(model: str) -> str | None:
    """The job id of ``model``'s default atlas (None for a model the atlas refuses)."""
    try:
        return AnalysisRequest(**atlas_request(model=model)).job_id()
    except ValueError:
        return None


def atlas_hint(model: str, labels: Labels) -> list[Any]:
    """Where no default atlas of ``model`` is stored: a link to the /heads page, which computes it
    (``[]`` where one is)."""
    if labels:
        return []
    from dash import dcc

    return [
        dcc.Link(ATLAS_HINT, href="/heads?" + urlencode({"model": model}), className="atlas-hint")
    ]


def labels_of(section: dict[str, Any] | None) -> Labels:
    """``{(layer, head): (label, confident)}`` for the labelled heads of an atlas result section."""
    out: Labels = {}
    for rec in (section or {}).get("heads") or []:
        if rec.get("label"):
            out[(int(rec["layer"]), int(rec["head"]))] = (
                str(rec["label"]),
                bool(rec.get("confident")),
            )
    return out


def format_label(label: tuple[str, bool] | None) -> str:
    """``induction`` (confident) or ``induction?`` (tentative); ``""`` for none."""
    if not label:
        return ""
    return label[0] if label[1] else f"{label[0]}?"


def head_name(layer: int, head: int, labels: Labels | None) -> str:
    """``L17H5 · induction`` where the head has a label, else ``L17H5``."""
    tag = format_label((labels or {}).get((int(layer), int(head))))
    return f"{head_label(layer, head)} · {tag}" if tag else head_label(layer, head)


class AtlasLabels:
    """Per page server: each model's labels, read once when its default atlas is finished (a finished
    result never changes), looked up again after ``MISS_TTL`` while none is."""

    def __init__(self, client: ApiClient, *, miss_ttl: float = MISS_TTL):
        self.client = client
        self.miss_ttl = miss_ttl
        self._found: dict[str, Labels] = {}
        self._sections: dict[str, dict[str, Any]] = {}
        self._missed: dict[str, float] = {}
        self._lock = threading.Lock()

    def get(self, model: str | None) -> Labels:
        """``{(layer, head): (label, confident)}``; ``{}`` where no finished default atlas is stored."""
        return self._found.get(model or "", {}) if self.section(model) is not None else {}

    def section(self, model: str | None) -> dict[str, Any] | None:
        """The whole stored default atlas section of ``model`` (None where none is finished)."""
        if not model:
            return None
        with self._lock:
            if model in self._sections:
                return self._sections[model]
            missed = self._missed.get(model)
            if missed is not None and time.monotonic() - missed < self.miss_ttl:
                return None
        section = self._read(model)
        with self._lock:
            if section is None:
                self._missed[model] = time.monotonic()
                return None
            self._sections[model] = section
            self._found[model] = labels_of(section)
            self._missed.pop(model, None)
        return section

    def _read(self, model: str) -> dict[str, Any] | None:
        job_id = default_atlas_id(model)
        if job_id is None:
            return None
        try:
            raw = self.client.analysis(job_id, partial="none")
        except ApiError:  # 404: none stored
            return None
        except Exception:  # the labels are an extra: they never break the page that asks
            logger.warning("atlas labels of %s not read", model, exc_info=True)
            return None
        if raw.get("status") != "finished" or not raw.get("result"):
            return None
        section = raw["result"].get(ATLAS)
        return section if isinstance(section, dict) else None


_BY_CLIENT: dict[int, AtlasLabels] = {}


def _cache(client: ApiClient) -> AtlasLabels:
    got = _BY_CLIENT.get(id(client))
    if got is None or got.client is not client:
        got = _BY_CLIENT[id(client)] = AtlasLabels(client)
    return got


def atlas_labels(client: ApiClient, model: str | None) -> Labels:
    """The labels of ``model``'s stored default atlas, ``{}`` where none is finished (cached per client)."""
    return _cache(client).get(model)


def atlas_section(client: ApiClient, model: str | None) -> dict[str, Any] | None:
    """``model``'s stored default atlas section (counts, depth: the comparison page), None where none
    is finished (cached per client, like the labels)."""
    return _cache(client).section(model)


def export_labels(
    client: ApiClient, request: dict[str, Any] | None
) -> dict[str, list[dict[str, Any]]]:
    """What a page's JSON download adds (``atlas_labels``): for each model of the request (``model``,
    or ``model_a`` and ``model_b``) whose default atlas is stored, its labelled heads as
    ``[{"layer", "head", "label", "confident"}]``; ``{}`` where none is."""
    out: dict[str, list[dict[str, Any]]] = {}
    for key in ("model", "model_a", "model_b"):
        model = (request or {}).get(key)
        labels = atlas_labels(client, model) if isinstance(model, str) else {}
        if labels:
            out[str(model)] = [
                {"layer": la, "head": h, "label": lab, "confident": sure}
                for (la, h), (lab, sure) in sorted(labels.items())
            ]
    return out


def label_grid(labels: Labels | None, n_layers: int, n_heads: int) -> list[list[str]]:
    """``[layer][head]`` of `` · induction`` (or ``""``): a heatmap's customdata, so its hover writes
    ``L%{y}H%{x}%{customdata}``."""
    return [
        [
            f" · {tag}" if (tag := format_label((labels or {}).get((la, h)))) else ""
            for h in range(n_heads)
        ]
        for la in range(n_layers)
    ]


def pair_agreement(
    labels_a: Labels | None, labels_b: Labels | None, a: tuple[int, int], b: tuple[int, int]
) -> str:
    """Whether a matched pair of heads (``a`` of model A, ``b`` of model B) has the same atlas label:
    ``""`` unless both models' default atlases are stored."""
    if not labels_a or not labels_b:
        return ""
    la, lb = labels_a.get(a), labels_b.get(b)
    if la is None and lb is None:
        return "atlas: neither head labelled"
    if la is not None and lb is not None and la[0] == lb[0]:
        return f"atlas labels agree: {format_label(la)} / {format_label(lb)}"
    return f"atlas labels differ: A {format_label(la) or 'none'}, B {format_label(lb) or 'none'}"
