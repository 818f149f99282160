"""The start page: what headscope is, and every view by the question it answers, each with a
one-click example on a built-in model (the table: ``frontend/kit/frontdoor.py``).

It opens at ``/`` without a query and at ``/start``; ``/`` with a query (``/?share=...``,
``/?analysis=...``, ``/?model=...``) opens the text explorer as it always did (``frontend/app.py``;
docs/dashboard.md, "The start page").
"""

from __future__ import annotations

from typing import Any

from dash import Dash, dcc, html

from frontend.kit.data import ResultStore
from frontend.kit.docs import HELP
from frontend.kit.frontdoor import GROUPS, example_href
from frontend.kit.glossary import help_link

NAME = "start"
PATH = "/start"
TITLE = "Start"
NAV_ORDER = -1

STEPS = (
    "Pick the question you have below; each view has a one-click example on a built-in model.",
    "Press Analyze on your own text (or corpus, or checkpoint): the page fills in as it computes.",
    "Click a head anywhere to open it; Share gives a link that reopens the exact view.",
)


def layout(store: ResultStore, query: dict[str, str], share: dict[str, Any] | None = None) -> Any:
    from frontend.app import PAGE_BY_NAME, PAGE_MODULES

    titles = {m.NAME: m.TITLE for m in PAGE_MODULES}  # each view's nav label beside its question

    cards = []
    for group in GROUPS:
        items = []
        for view in group.views:
            path = PAGE_BY_NAME.get(view.name)
            if path is None:  # a view this build has no page for (yet)
                continue
            example = example_href(path, view)
            items.append(
                html.Li(
                    className="start-view",
                    id=f"start-{view.name}",
                    children=[
                        dcc.Link(view.question, href=path, className="start-question"),
                        html.Span(f" {titles.get(view.name, '')}", className="start-title"),
                        " ",
                        help_link(view.docs),
                        html.Div(view.line, className="start-line"),
                        html.Div(
                            className="start-example",
                            children=[
                                "Example: ",
                                html.A(  # a page load: assets/frontdoor.js reads run=1
                                    view.example_label or "run it",
                                    href=example,
                                    id=f"start-example-{view.name}",
                                ),
                            ],
                        )
                        if example
                        else None,
                    ],
                )
            )
        if items:
            cards.append(
                html.Section(
                    className="panel start-group",
                    children=[html.H3(group.title), html.Ul(items, className="start-views")],
                )
            )
    return html.Div(
        className="page",
        id="start-page",
        children=[
            html.H2("headscope: look inside transformer models"),
            html.P(
                [
                    "Attention heads, hidden states and the causal role of each component, on "
                    "MiniLM, SmolLM2, Gemma 3 270M or a model of your own, all offline. Start with "
                    "the question you have. Every term on screen links to the ",
                    html.A("glossary", href=f"{HELP}/glossary", target="_blank"),
                    "; each page's ? opens its ",
                    html.A("docs", href=HELP, target="_blank"),
                    ".",
                ],
                className="start-intro",
            ),
            html.Ol([html.Li(s) for s in STEPS], className="start-steps", id="start-steps"),
            html.Div(cards, className="start-groups"),
        ],
    )


def register(app: Dash, store: ResultStore) -> None:
    """No callbacks: the page is links."""
