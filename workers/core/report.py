"""A few lines of what an analysis found, for ``headscope analyze`` (docs/results.md).

Each analysis' spec names its own report function (``AnalysisSpec.report``: ``function(section,
result) -> lines``, beside its code); ``report_lines`` runs it, or the generic report of any section
(its scalars and the shapes of its arrays) for an analysis that names none. The helpers here write
what several reports share: tokens as every page shows them, the strongest heads of a
``[layer][head]`` map, numbers in a few digits.

    >>> strongest_heads([[0.1, -0.9], [0.5, 0.0]], n=2)
    'L0H1 -0.9, L1H0 +0.5'
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

from workers.core.notation import display_text, head_label, token_label

log = logging.getLogger(__name__)

INDENT = "  "
_COMMON = {
    "model",
    "family",
    "n_layers",
    "n_heads",
    "max_tokens",
    "causal",
    "tokens",
    "token_texts",
    "offsets",
    "special",
    "n_tokens",
    "truncated_from",
    "timings",
    "analysis",
}


def num(x: Any, digits: int = 3) -> str:
    """A number in ``digits`` significant digits (``0.1235``, ``1.2e-07``); ``-`` for none."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if isinstance(x, bool) or isinstance(x, int):
        return str(x)
    return f"{float(x):.{digits}g}"


def signed(x: Any, digits: int = 3) -> str:
    """``+0.53`` / ``-0.21``: an effect with its sign."""
    if x is None:
        return "-"
    return f"{float(x):+.{digits}g}"


def shown_tokens(result: dict[str, Any]) -> list[str]:
    """The result's tokens as every page shows them (``␣cat``; ``[CLS]`` for a special token)."""
    tokens = result.get("tokens") or []
    texts = result.get("token_texts") or []
    return [token_label(t, texts[i] if i < len(texts) else None) for i, t in enumerate(tokens)]


def shown(text: str | None) -> str:
    """A decoded token text (a prediction, a target) as every page shows it."""
    return display_text(text) if text is not None else "-"


def ranked_heads(
    matrix: Sequence[Sequence[Any]], *, by_abs: bool = True
) -> list[tuple[int, int, float]]:
    """Every head of a ``[layer][head]`` map as ``(layer, head, value)``, largest first (by
    magnitude when ``by_abs``); missing values (None, NaN) left out."""
    cells = [
        (layer, head, float(v))
        for layer, row in enumerate(matrix)
        for head, v in enumerate(row)
        if v is not None and math.isfinite(float(v))
    ]
    return sorted(cells, key=lambda c: -abs(c[2]) if by_abs else -c[2])


def strongest_heads(matrix: Sequence[Sequence[Any]], *, n: int = 5, by_abs: bool = True) -> str:
    """The ``n`` strongest heads of a ``[layer][head]`` map: ``L3H1 +0.52, L5H0 -0.31``."""
    return ", ".join(
        f"{head_label(layer, h)} {signed(v)}"
        for layer, h, v in ranked_heads(matrix, by_abs=by_abs)[:n]
    )


def shape(value: Any) -> list[int]:
    """The shape of a nested list (``[[1, 2], [3, 4]]`` -> ``[2, 2]``)."""
    out: list[int] = []
    while isinstance(value, list):
        out.append(len(value))
        if not value:
            break
        value = value[0]
    return out


def generic(section: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """Any section in a few lines: its scalars (numbers, short words), then its arrays' shapes."""
    scalars, arrays = [], []
    for key, value in section.items():
        if key in _COMMON:
            continue
        if isinstance(value, bool) or value is None:
            scalars.append(f"{key} {value}")
        elif isinstance(value, (int, float)):
            scalars.append(f"{key} {num(value)}")
        elif isinstance(value, str) and len(value) <= 40:
            scalars.append(f"{key} {value}")
        elif isinstance(value, list):
            arrays.append(f"{key} {'x'.join(str(s) for s in shape(value))}")
    lines = []
    for label, items in (("", scalars), ("arrays: ", arrays)):
        if items:
            lines.append(label + ", ".join(items[:12]) + (", ..." if len(items) > 12 else ""))
    return lines


def report_lines(kind: str, section: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """The report of one analysis: a heading line, then its spec's lines (or the generic ones),
    indented. ``section``: the analysis' own keys; ``result``: the common keys (tokens, model)."""
    from workers.core import registry

    spec = registry.get(kind)
    lines: list[str] = []
    if spec.report is not None:
        try:
            lines = list(registry.resolve(spec.report)(section, result))
        except (
            Exception
        ):  # a report is a courtesy after the JSON is written: never fail the run on it
            log.exception("the report of %s failed; the generic one follows", kind)
            lines = []
    if not lines:
        lines = generic(section, result)
    head = f"{kind} on {result.get('model', '?')} ({ran_on(section, result)}):"
    return [head] + [INDENT + line for line in lines]


def ran_on(section: dict[str, Any], result: dict[str, Any]) -> str:
    """What a job ran on: the text's tokens, or, for an analysis whose request text is a
    placeholder, what its section says it read instead: a task set's ``examples`` (circuits on a
    set, docs/circuits.md) or the atlas' ``probe`` (its corpus texts and random sequences,
    docs/atlas.md).

    >>> ran_on({"task": "ioi", "examples": [{}, {}]}, {"n_tokens": 2})
    '2 examples of ioi'
    """
    examples = section.get("examples")
    if isinstance(examples, list):
        name = section.get("set_name") or section.get("task")  # "upload": a set given inline
        return f"{len(examples)} examples" + (f" of {name}" if name not in (None, "upload") else "")
    probe = section.get("probe")
    if isinstance(probe, dict) and "corpus_texts" in probe:
        return (
            f"{probe['corpus_texts']} texts of {probe.get('corpus', 'a corpus')} and "
            f"{probe.get('random_seqs', '?')} random sequences of {probe.get('random_len', '?')} "
            "tokens"
        )
    n = result.get("n_tokens") or len(result.get("tokens") or [])
    return f"{n} tokens"
