"""The glossary every page uses: a term of art on screen is a link to its section of
``docs/glossary.md`` (served at ``/help/glossary``), with that section's first paragraph as its
tooltip, so each term is explained once, in the docs.

    term("kl")                      # "KL", underlined; hover: the explanation; click: its section
    term("qer", "quantile-equidistant axes")   # the term in the page's own words
    terms_note("kl", "x[l]", "qer")  # "Terms: KL · X[l] · QER" under a figure
    help_link("causal.md#ablation")  # the "?" beside a page's title: its docs topic
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from dash import html

from frontend.kit.docs import docs_dir, help_url, slug

PAGE = "glossary"
# short names the pages use -> the glossary's sections (their headings' anchors)
ALIASES = {
    "head": "l1h9",
    "qer": "quantile-equidistant-axes-qer",
    "x[l]": "xl",
    "1/255": "weights-to-1255",
    "local": "local-sliding-window",
    "32 MiB": "model-view-limit-32-mib",
    "phi": "φ",
}


@dataclass(frozen=True)
class Term:
    name: str  # the section's heading
    tip: str  # its first paragraph, plain text
    anchor: str


def _plain(markdown: str) -> str:
    text = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", markdown)  # links: their words
    return re.sub(r"\s+", " ", text.replace("`", "").replace("**", "")).strip()


@lru_cache(maxsize=1)
def terms() -> dict[str, Term]:
    """Every section of docs/glossary.md by anchor (empty when this installation has no docs)."""
    folder = docs_dir()
    path = folder / f"{PAGE}.md" if folder else None
    if path is None or not path.is_file():
        return {}
    out = {}
    for block in re.split(r"^## ", path.read_text(encoding="utf-8"), flags=re.M)[1:]:
        heading, _, body = block.partition("\n")
        first = body.strip().split("\n\n")[0]
        out[slug(heading)] = Term(heading.strip(), _plain(first), slug(heading))
    return out


def lookup(key: str) -> Term | None:
    """The term named ``key`` (an anchor of docs/glossary.md or one of ``ALIASES``)."""
    return terms().get(ALIASES.get(key, key))


def term(key: str, text: str | None = None, **kwargs: Any) -> Any:
    """``text`` (default: the term's name) as a link to its glossary section, its explanation as
    the tooltip; plain text when this installation has no glossary."""
    found = lookup(key)
    shown = text or (found.name if found else key)
    if found is None:
        return shown
    return html.A(
        shown,
        href=help_url(f"{PAGE}#{found.anchor}"),
        title=found.tip,
        target="_blank",
        className="term",
        **kwargs,
    )


def terms_note(*keys: str, label: str = "Terms: ") -> html.Div:
    """A line naming the terms of art a panel uses, each a ``term``."""
    parts: list[Any] = [label]
    for i, key in enumerate(keys):
        parts += ([" · "] if i else []) + [term(key)]
    return html.Div(parts, className="terms-note hint")


def help_link(topic: str, **kwargs: Any) -> html.A:
    """The "?" that opens a docs topic (``"causal.md#ablation"``) in a new tab."""
    return html.A(
        "?",
        href=help_url(topic),
        target="_blank",
        className="help-link",
        title=f"help: docs/{topic}",
        **kwargs,
    )
