"""The head atlas in a notebook (docs/notebook.md; definitions: docs/atlas.md): compute a model's atlas
or load a saved one, and name a head's label::

    from workers import atlas, label_of
    at = atlas("smollm2")                                    # the `headscope atlas` defaults
    at = atlas("minilm", random_seqs=8, thresholds={"induction": 0.4})
    at = atlas("smollm2-atlas.json")                         # `headscope atlas --out`, Download JSON
    label_of(at, 17, 3)                                      # "induction" (None: no label)

An atlas here is the result's ``atlas`` section (``heads``, ``thresholds``, ``evidence``, …:
docs/results.md#atlas), computed in this process with the pipeline the service runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workers.analyses.atlas.spec import ATLAS, ATLAS_TEXT
from workers.core.errors import HeadscopeError


def section_of(data: dict[str, Any]) -> dict[str, Any]:
    """The atlas section of a section itself, an analysis result (``{ATLAS: …}``) or an export
    (``{"request": …, "result": {"atlas": …}}``)."""
    for candidate in (data, data.get(ATLAS), (data.get("result") or {}).get(ATLAS)):
        if isinstance(candidate, dict) and isinstance(candidate.get("heads"), list):
            return candidate
    raise HeadscopeError(
        "no head atlas here: expected an atlas result (`headscope atlas --out`, the head atlas "
        "page's Download JSON) or its `atlas` section"
    )


def _is_file(source: str | Path) -> bool:
    return isinstance(source, Path) or str(source).endswith(".json") or Path(source).is_file()


def atlas(source: Any, **options: Any) -> dict[str, Any]:
    """The atlas of ``source``: a catalogue model name or a loaded model (computed here, with the
    options of ``headscope atlas``: ``corpus``, ``max_texts``, ``random_seqs``, ``random_len``,
    ``seed``, ``resamples``, ``thresholds``, ``skip_evidence``, …), a saved JSON path, or a dict
    (a result, an export or the section itself)."""
    if isinstance(source, dict):
        return section_of(source)
    if isinstance(source, (str, Path)) and _is_file(source):
        if options:
            raise HeadscopeError("a saved atlas is read as it is: options apply to a computed one")
        return section_of(json.loads(Path(source).read_text(encoding="utf-8")))
    from workers.engine.pipeline import analyze
    from workers.models import load_model

    loaded = load_model(source) if isinstance(source, str) else source
    return section_of(analyze(loaded, ATLAS_TEXT, [ATLAS], options))


def head_labels(at: dict[str, Any]) -> dict[tuple[int, int], tuple[str, bool]]:
    """``{(layer, head): (label, confident)}`` for the labelled heads of an atlas (a section, a
    result or an export)."""
    return {
        (int(h["layer"]), int(h["head"])): (str(h["label"]), bool(h.get("confident")))
        for h in section_of(at)["heads"]
        if h.get("label")
    }


def label_of(at: dict[str, Any], layer: int, head: int) -> str | None:
    """The label of head (``layer``, ``head``): ``"induction"``, …; None for a head without one.
    Whether it is confident: ``head_labels(at)[(layer, head)][1]``."""
    sec = section_of(at)
    n_layers, n_heads = int(sec.get("n_layers", 0)), int(sec.get("n_heads", 0))
    if n_layers and n_heads and not (0 <= layer < n_layers and 0 <= head < n_heads):
        raise HeadscopeError(
            f"L{layer}H{head} is not a head of this atlas ({n_layers} layers x {n_heads} heads)"
        )
    for h in sec["heads"]:
        if (int(h["layer"]), int(h["head"])) == (int(layer), int(head)):
            return h.get("label")
    return None
