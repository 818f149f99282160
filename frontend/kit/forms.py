"""What several pages' forms share: the corpus and decoder pickers' options, the target box, and a
head written ``L.H``.

    >>> parse_head("2.5")
    [2, 5]
    >>> parse_target("␣Paris|␣Rome")
    [' Paris', ' Rome']
"""

from __future__ import annotations

from typing import Any

from frontend.kit.api_client import ApiError
from frontend.kit.data import ResultStore
from frontend.kit.page import model_options


def corpus_options(store: ResultStore) -> list[dict[str, str]]:
    """The corpus picker's options: the shipped corpora, then the uploaded ones (none when the API
    cannot list them)."""
    try:
        listed = store.client.corpora()
    except ApiError:
        return []
    shipped = [
        {"label": f"{c['id']} ({c['n_texts']} texts, shipped)", "value": c["id"]}
        for c in listed["shipped"]
    ]
    mine = [
        {"label": f"{c['name']} ({c['n_texts']} texts)", "value": c["id"]}
        for c in listed["corpora"]
    ]
    return shipped + mine


def decoder_choices(store: ResultStore) -> tuple[list[dict[str, Any]], str, str]:
    """Dropdown options (models without a head disabled), a default model that has one, and the
    sentence naming the models that can: the causal and circuits pages' model picker."""
    options, default, info = model_options(store)
    can = [n for n, m in info.items() if m.get("lm_head") is not False]
    out = []
    for o in options:
        m = info.get(o["value"]) or {}
        if m.get("lm_head") is False:
            out.append(
                {
                    **o,
                    "label": f"{o['label']} (no language-model head)",
                    "disabled": True,
                    "title": m.get("lm_head_reason", ""),
                }
            )
        else:
            out.append(o)
    hint = (
        f"The causal views need a decoder with a language-model head: {', '.join(can)}."
        if can
        else "No model in this catalogue has a language-model head (the causal views need a decoder with one)."
    )
    return out, (default if default in can else (can[0] if can else default)), hint


def parse_head(value: Any) -> list[int] | None:
    """``"L.H"`` (a view's ``head``) -> ``[L, H]``; None when it is not one."""
    try:
        layer, head = (int(x) for x in str(value).split("."))
        return [layer, head]
    except (TypeError, ValueError):
        return None


def parse_target(value: str | None) -> str | int | list[str | int] | None:
    """The target box: empty (the text's next token), a token's text with its leading space
    (`` Paris``, or ``␣Paris`` as the page shows tokens: ``␣`` is a space, ``⏎`` a newline, ``⇥`` a
    tab), ``#id``, or two of them separated by ``|`` (``␣Paris|␣Rome``: l[a] - l[b])."""
    if not value or not value.strip():
        return None

    def one(part: str) -> str | int:
        q = part.strip()
        if q.startswith("#") and q[1:].isdigit():
            return int(q[1:])
        return part.rstrip().replace("␣", " ").replace("⏎", "\n").replace("⇥", "\t")

    out = [one(p) for p in value.split("|")]
    return out if len(out) > 1 else out[0]
