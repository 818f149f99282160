"""What several pages' forms share: the corpus and decoder pickers' options, the target box, and a
head written ``L2H5`` (both read by workers/core/notation.py, as the CLI reads them).

    >>> parse_head("L2H5"), parse_head("2.5")
    ([2, 5], [2, 5])
    >>> parse_target('" Paris" " Rome"'), parse_target("␣Paris|␣Rome")
    ([' Paris', ' Rome'], [' Paris', ' Rome'])
"""

from __future__ import annotations

from typing import Any

from dash import html

from frontend.kit.api_client import ApiError
from frontend.kit.data import ResultStore
from frontend.kit.page import model_options
from workers.core import notation


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
    preferred = DECODER_DEFAULT if DECODER_DEFAULT in can else default
    return out, (preferred if preferred in can else (can[0] if can else default)), hint


def url_model(
    query: dict[str, str], options: list[dict[str, Any]], default: str, *, view: str
) -> tuple[str, Any]:
    """(the model the picker shows, a message or None) for a page opened with ``?model=NAME``.

    ``NAME`` when the picker offers it and it can run ``view``; otherwise the page shows ``default``
    under a visible message naming ``NAME``, why it cannot be used and what to pick instead, never
    a silent substitute (and a one-click example does not run: ``assets/frontdoor.js``)."""
    name = query.get("model")
    if not name:
        return default, None
    offered = {o["value"]: o for o in options}
    if name in offered and not offered[name].get("disabled"):
        return name, None
    can = [v for v, o in offered.items() if not o.get("disabled")]
    if name not in offered:
        why = "is not a model of this service"
    else:
        reason = offered[name].get("title") or "it has no language-model head"
        why = f"cannot run {view} ({reason})"
    return default, html.Div(
        f"The link asks for the model “{name}”, which {why}. Pick one of: {', '.join(can)}. "
        f"Showing {default}.",
        className="error url-model-error",
        id="url-model-error",
    )


def parse_head(value: Any) -> list[int] | None:
    """A view's ``head`` (``"L2H5"``, or ``"2.5"`` as links shared before wrote it) -> ``[L, H]``;
    None when it is not one (workers/core/notation.py reads every head)."""
    got = notation.parse_head(value)
    return list(got) if got else None


def parse_target(value: str | None) -> str | int | list[str | int] | None:
    """The target box, typed as the CLI's ``--target`` is (``TARGET_PLACEHOLDER``; read by
    ``workers.core.notation.parse_target``, which also reads links' older ``␣Paris|␣Rome``)."""
    return notation.parse_target(value)


def format_target(value: Any) -> str:
    """A request's target as it is typed in the box: ``" Paris" " Rome"``, ``#12``."""
    return notation.format_target(value)


# the causal and circuits pages' model: the decoder the README and the docs use
DECODER_DEFAULT = "smollm2"

# the target box's hint: the notation the CLI's --target takes too (workers/core/notation.py)
TARGET_PLACEHOLDER = 'empty: the next token · " Paris" · a pair: " Paris" " Rome" · an id: #123'
TARGET_STYLE = {"width": "34em"}  # the placeholder fits
