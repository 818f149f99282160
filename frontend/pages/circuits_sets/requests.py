"""The /circuits/sets page's requests and links (docs/circuits.md, "Circuits on a task data set"):
pure functions of the form's values, no Dash."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

from frontend.kit.forms import format_target
from workers.analyses.circuits.spec import CIRCUITS_SET

BUILT_IN = ("ioi", "capitals")
UPLOAD = "upload"
DEFAULTS = {"set_examples": 200, "ig_steps": 5, "bootstrap": 10, "random_circuits": 5}
SET_ID = re.compile(r"cp-[0-9a-f]{32}")  # a stored task set (docs/circuits.md)
PAGE_SET_EDGES = (
    1000  # edges the job lists: the circuit can be drawn at MIB's sizes up to this many
)


def set_request(
    *,
    model: str,
    task: str,
    jsonl: str | None = None,
    n: Any = None,
    method: str = "eap-ig",
    ig_steps: Any = None,
    bootstrap: Any = None,
    random_circuits: Any = None,
) -> dict[str, Any]:
    """The ``circuits-set`` job of the form (options at their defaults left out, so links keep their
    id): the request's text is the built-in task's name, or ``jsonl``: a stored set's id (what the page
    sends) or JSON Lines."""
    if task == UPLOAD:
        text = (jsonl or "").strip()
        if not text:
            raise ValueError("paste or upload a JSON Lines set (clean, corrupted, answer, wrong)")
    else:
        text = task
    given = {
        "set_examples": n if task != UPLOAD else None,
        "ig_steps": 1 if method == "eap" else ig_steps,
        "bootstrap": bootstrap,
        "random_circuits": random_circuits,
    }
    options: dict[str, Any] = {"set_edges": PAGE_SET_EDGES}
    for key, value in given.items():
        if value not in (None, "") and int(value) != DEFAULTS[key]:
            options[key] = int(value)
    return {"model": model, "text": text, "analyses": [CIRCUITS_SET], "options": options}


def pair_link(example: dict[str, Any], model: str | None) -> str:
    """/circuits with one example's clean and corrupted texts and its answer/wrong as the target."""
    query = {
        "model": model or "",
        "text": example["clean"],
        "corrupted": example["corrupted"],
        "target": format_target([example["answer"], example["wrong"]]),
        "run": "1",
    }
    return "/circuits?" + urlencode({k: v for k, v in query.items() if v})


def stored_line(meta: dict[str, Any]) -> str:
    """``stored as cp-… (name, N examples)`` for a stored set's meta."""
    return f"stored as {meta['id']} ({meta.get('name')}, {meta.get('n_examples')} examples)"
