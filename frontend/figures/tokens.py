"""Tokens as the figures show them: readable labels and the token axis.

A raw token (``Ġcat``, ``âĢĻ``) never reaches a figure: ``readable_tokens`` gives each token its span
of the text, else the tokenizer's own string for tokens that span none (``[CLS]``, ``<s>``), written
the one way every page, export and the CLI write tokens (``workers/core/notation.py``: ``␣cat``);
``token_ticks`` puts them on a numeric axis (numeric, so repeated tokens stay separate columns).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workers.core import notation

MAX_TICK_LABELS = 80  # beyond this many tokens, label every k-th tick (hover still names each)


def _markup(shown: str, markup: bool) -> str:
    # ``<`` and ``>`` as entities, so plotly shows Llama's ``<s>`` instead of its strike-through tag
    return shown.replace("<", "&lt;").replace(">", "&gt;") if markup else shown


def display_token(token: str, *, markup: bool = True) -> str:
    """A raw token as every page shows it (``workers.core.notation.display_token``: ``Ġtook`` ->
    ``␣took``); with ``markup``, ``<`` and ``>`` as HTML entities (plotly labels)."""
    return _markup(notation.display_token(token), markup)


def display_text(text: str, *, markup: bool = True) -> str:
    """A token's text as every page shows it (``workers.core.notation.display_text``: ``" took"`` ->
    ``␣took``); with ``markup``, ``<`` and ``>`` as HTML entities."""
    return _markup(notation.display_text(text), markup)


def readable_tokens(result: dict[str, Any], *, markup: bool = True) -> list[str]:
    """Every token of a result as every page shows it (``workers.core.notation.token_label``): its
    span of the text (``token_texts``; a chat template's tokens have theirs too, ``<|im_start|>``),
    else the tokenizer's own string (``[CLS]``, ``<s>``: added tokens span no text). Raw byte-level
    pieces (``Ġpresent``, ``âĢĻ``) never show.

    ``{"tokens": ["[CLS]", "Ġcat"], "token_texts": ["", " cat"]}`` -> ``["[CLS]", "␣cat"]``.
    ``markup``: ``<`` and ``>`` as HTML entities (plotly labels); off for plain text (the CLI).
    """
    tokens = result.get("tokens") or []
    texts = result.get("token_texts") or []
    return [
        _markup(notation.token_label(tok, texts[i] if i < len(texts) else None), markup)
        for i, tok in enumerate(tokens)
    ]


def token_labels(result: dict[str, Any], indices: list[int]) -> list[str]:
    """Labels for the tokens at ``indices`` (``#i`` when the result has no tokens yet)."""
    labels = readable_tokens(result)
    return [labels[i] if i < len(labels) else f"#{i}" for i in indices]


def token_ticks(labels: list[str]) -> dict[str, Any]:
    """Numeric axis with token labels (numeric so repeated tokens stay separate columns)."""
    n = len(labels)
    step = max(1, int(np.ceil(n / MAX_TICK_LABELS)))
    vals = list(range(0, n, step))
    return {
        "tickmode": "array",
        "tickvals": vals,
        "ticktext": [labels[i] for i in vals],
        "tickangle": -60 if n > 8 else 0,
        "tickfont": {"size": 10 if n <= 40 else 8},
        # plotly.js' default ("hide past div") measures every label of the axis again as it places
        # each one (a forced layout per label per label): ~0.1-0.2 s of the browser's main thread for
        # 76 labels at 452 tokens, per axis; "allow" draws the same labels without it, a label past
        # the figure's edge clipped there instead of hidden (docs/dashboard.md, "Between the first
        # row and page done")
        "ticklabeloverflow": "allow",
    }
