"""The front door: every view named by the question it answers, the navigation grouped the same
way, and each page's header (its nav label as title, its question, its "?" to the docs).

One table (``VIEWS``) feeds the start page (``pages/start.py``), the navigation (``nav``) and the
headers (``page_header``), so a page's name, question and docs topic are written once. A page this
table does not list still gets a nav entry (in the last group, "More"), and a listed page whose
module does not exist gets none.

Examples are one click: a link to the page with its model (and text) in the URL and ``run=1``,
which presses the page's Analyze button once the page is drawn (``assets/frontdoor.js``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from dash import dcc, html

from frontend.kit.docs import HELP
from frontend.kit.glossary import help_link, terms_note


@dataclass(frozen=True)
class View:
    name: str  # the page module's NAME
    question: str  # the question it answers: the start page's headline and the page's subtitle
    line: str  # one line on what it shows
    docs: str  # its docs topic ("causal.md", "dashboard.md#text-explorer")
    example: dict[str, str] | None = None  # the one-click example's query (run=1 added)
    example_label: str = ""  # what the example runs, in words
    terms: tuple[str, ...] = ()  # the terms of art on the page (frontend/kit/glossary.py)


@dataclass(frozen=True)
class Group:
    title: str
    views: tuple[View, ...]


GROUPS = (
    Group(
        "What heads do",
        (
            View(
                "text",
                "What does each head attend to?",
                "Paste a text: max-attention heatmaps of every layer, every head's map, one head's "
                "attention matrix and lines.",
                "dashboard.md#text-explorer",
                {
                    "model": "smollm2",
                    "text": "When Mary and John went to the store, John gave a drink to",
                },
                "SmolLM2 on one sentence",
                ("max-attention", "local", "kl", "x[l]", "qer", "1/255", "32 MiB", "head"),
            ),
            View(
                "corpus",
                "Is it the same on every text?",
                "Statistics of every head over a corpus (sink, previous token, induction, …), a "
                "table and a map of heads, each head's strongest pairs.",
                "corpus.md",
                {"model": "minilm"},
                "MiniLM on the shipped English corpus",
                ("head", "tokens"),
            ),
            View(
                "heads",
                "What kind of head is each one?",
                "The head atlas: every head labelled by what it does (previous-token, induction, "
                "sink, …), how sure, and whether ablating it matters.",
                "atlas.md",
                {"model": "minilm"},
                "MiniLM's 72 heads",
                ("head",),
            ),
            View(
                "compare",
                "Does another model do it too?",
                "Two models on the same text or corpus: every pair of heads' similarity, word-level "
                "maps side by side.",
                "compare.md",
                {},
                "MiniLM against SmolLM2 on one text",
                ("head", "tokens", "surprisal"),
            ),
        ),
    ),
    Group(
        "Whether heads matter",
        (
            View(
                "causal",
                "Does a head matter?",
                "Predictions, the logit lens, exact logit attribution, every head ablated, "
                "activation patching of a clean / corrupted pair.",
                "causal.md",
                {"model": "smollm2"},
                "SmolLM2 on the Eiffel Tower / Colosseum pair",
                ("head", "target", "tokens", "surprisal", "logit-lens", "x[l]"),
            ),
            View(
                "circuits",
                "Which heads work together?",
                "The circuit of a clean / corrupted pair (edge attribution) with its faithfulness, "
                "AtP against real patching, information-flow routes.",
                "circuits.md",
                {"model": "smollm2"},
                "SmolLM2 on the indirect-object pair (Mary / John)",
                ("head", "target", "faithfulness", "x[l]"),
            ),
            View(
                "circuit-sets",
                "Does the circuit hold on a whole task?",
                "A circuit found on a task data set (IOI, capitals, your JSON Lines), scored as MIB "
                "scores one: faithfulness curve beside random circuits, CPR, CMD, its stability.",
                "circuits.md#circuits-on-a-task-data-set-circuits-set",
                None,
                "",
                ("faithfulness",),
            ),
        ),
    ),
    Group(
        "What the model builds",
        (
            View(
                "terms",
                "How are the hidden states built?",
                "Every hidden state = input + attention + feed-forward + bias, exactly: importance "
                "curves per layer and token, each head's share.",
                "decomposition.md",
                {"model": "minilm"},
                "MiniLM on the demo text",
                ("x[l]", "head"),
            ),
            View(
                "pe",
                "What did my positional encodings learn?",
                "Uploaded checkpoints' position embeddings against a reference and a partition: "
                "distances, modularity, maps.",
                "positional.md",
                {"run": "pe-demo-button,pe-run-button"},
                "the shipped demo checkpoints",
                ("qer",),
            ),
            View(
                "words",
                "Where do the words of a list land?",
                "The t-SNE of a list's multi-token embeddings.",
                "analyses.md",
                {},
                "MiniLM on the demo list",
                ("qer", "kl"),
            ),
        ),
    ),
    Group(
        "More",
        (
            View(
                "lasf",
                "What do semantic fields find in place of a layer of heads?",
                "LasF: MiniLM with its last layer replaced by trained semantic fields; Φ, each "
                "field's weights and map, ablation, field against head.",
                "lasf.md",
                {},
                "the shipped LasF layer on the demo text",
                ("phi", "bonferroni", "qer", "kl"),
            ),
        ),
    ),
)
VIEWS: dict[str, View] = {v.name: v for g in GROUPS for v in g.views}


def example_href(path: str, view: View) -> str | None:
    """The one-click example's link (``run=1``: Analyze pressed once the page is drawn)."""
    if view.example is None:
        return None
    query = {**view.example}
    query.setdefault("run", "1")
    return f"{path}?{urlencode(query)}"


def grouped(modules: list[Any]) -> list[tuple[str, list[Any]]]:
    """The page modules in the table's groups and order; pages the table does not list go last,
    in "More"; listed pages without a module are left out."""
    by_name = {m.NAME: m for m in modules}
    out: list[tuple[str, list[Any]]] = []
    listed = set()
    for group in GROUPS:
        mods = [by_name[v.name] for v in group.views if v.name in by_name]
        listed.update(v.name for v in group.views)
        out.append((group.title, mods))
    extra = [m for m in modules if m.NAME not in listed and m.NAME != "start"]
    if extra:
        out[-1] = (out[-1][0], out[-1][1] + extra)
    return [(t, mods) for t, mods in out if mods]


def nav(modules: list[Any]) -> html.Nav:
    """The navigation bar: the brand (the start page), the pages in their groups, the docs."""
    groups = []
    for title, mods in grouped(modules):
        links = [
            dcc.Link(
                m.TITLE,
                href=m.PATH,
                className="nav-link",
                id=f"nav-{m.NAME}",
                title=VIEWS[m.NAME].question if m.NAME in VIEWS else m.TITLE,
            )
            for m in mods
        ]
        groups.append(
            html.Div(
                className="nav-group",
                children=[html.Span(title, className="nav-group-title"), *links],
            )
        )
    return html.Nav(
        className="nav",
        children=[
            dcc.Link("headscope", href="/", className="brand", id="nav-start"),
            *groups,
            html.A(
                "Docs", href=HELP, className="nav-link nav-docs", id="nav-docs", target="_blank"
            ),
        ],
    )


def page_header(name: str, title: str) -> html.Div:
    """A page's header: its nav label as title, the question it answers and its "?" (docs)."""
    view = VIEWS.get(name)
    return html.Div(
        className="page-header",
        children=[
            html.H2([title, " ", help_link(view.docs, id=f"{name}-help")] if view else title),
            html.P(view.question, className="page-question") if view else None,
            terms_note(*view.terms, label="Terms on this page: ") if view and view.terms else None,
        ],
    )
