"""The comparison page's head atlases side by side (docs/atlas.md, "On the comparison page"): for the
two models picked, their stored default atlases' counts per type and where in depth each type sits.

Only read (``frontend.kit.atlas_labels.atlas_section``), never computed: a model without a finished
default atlas gets a message and a link to ``/heads?model=…``, which computes it. Not a page of its
own (no ``PAGE_API``): ``frontend/pages/compare/`` places the panel and registers its callback.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from dash import Dash, Input, Output, dcc, html

from frontend.figures import atlas_compare as AC
from frontend.figures.base import EMPTY_PX, empty_figure
from frontend.kit.atlas_labels import atlas_section
from frontend.kit.data import ResultStore
from frontend.kit.page import graph

GRAPH = "compare-atlas-graph"
NOTE = "compare-atlas-note"


def panel() -> html.Div:
    return html.Div(
        className="panel",
        id="compare-atlas-panel",
        children=[
            html.H4("Head atlases of the two models side by side"),
            html.P(
                "Each model's stored head atlas (default settings, docs/atlas.md): heads per type, "
                "and where in depth each type's heads sit (relative depth: layer / (layers − 1)).",
                className="hint",
            ),
            html.Div(id=NOTE, className="label"),
            graph(GRAPH, figure=empty_figure("", height=EMPTY_PX)),
        ],
    )


def missing_note(side: str, model: str) -> html.Div:
    """``B tiny-gpt2 has no stored head atlas: compute it on the head atlas page`` with the link."""
    return html.Div(
        [
            f"{side} {model} has no stored head atlas: ",
            dcc.Link(
                "compute it on the head atlas page",
                href="/heads?" + urlencode({"model": model}),
                className="atlas-hint",
            ),
            ".",
        ]
    )


def counts_line(rows: list[dict[str, Any]], name_a: str, name_b: str) -> str:
    """``heads per type (A smollm2 / B gemma3): induction 11 / 4, …`` for the types either has."""
    parts = [
        f"{r['type']} {'—' if r['a'] is None else r['a']} / {'—' if r['b'] is None else r['b']}"
        for r in rows
        if r["a"] or r["b"]
    ]
    return f"heads per type (A {name_a} / B {name_b}): " + ", ".join(parts) if parts else ""


def view(
    a: dict[str, Any] | None, b: dict[str, Any] | None, model_a: str, model_b: str
) -> tuple[Any, list[Any]]:
    """The figure and the note for two atlas sections (None: not stored)."""
    note: list[Any] = [
        missing_note(side, model)
        for side, model, section in (("A", model_a, a), ("B", model_b, b))
        if section is None
    ]
    if a is not None or b is not None:
        note.append(html.Div(counts_line(AC.count_rows(a, b), model_a, model_b)))
    return AC.atlas_compare_figure(a, b, name_a=model_a, name_b=model_b), note


def register(app: Dash, store: ResultStore) -> None:
    client = store.client

    @app.callback(
        Output(GRAPH, "figure"),
        Output(NOTE, "children"),
        Input("compare-model-a", "value"),
        Input("compare-model-b", "value"),
    )
    def _atlases(model_a, model_b):  # type: ignore[no-untyped-def]
        if not model_a or not model_b:
            return empty_figure("", height=EMPTY_PX), ""
        return view(
            atlas_section(client, model_a), atlas_section(client, model_b), model_a, model_b
        )
