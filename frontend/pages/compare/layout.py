"""The /compare page's controls and panels (docs/compare.md): the two models, the text or corpus, the
similarity matrix, the matched pairs' table, the joint map, the selected pair's word-level maps and the
surprisal."""

from __future__ import annotations

from typing import Any

import dash_ag_grid as dag
from dash import dcc, html

from frontend.figures import compare as F
from frontend.figures.base import empty_figure
from frontend.kit.data import ResultStore
from frontend.kit.forms import corpus_options
from frontend.kit.page import graph, progress_block, shown
from frontend.pages.compare.requests import DEFAULT_TEXT, text_index


def controls(
    store: ResultStore,
    request: dict[str, Any],
    source: dict[str, Any] | None,
    *,
    options: list[dict[str, Any]],
    default_model: str | None,
    second: str | None,
    kind: str,
) -> html.Div:
    """Models A and B, one text or a corpus, the token limit, Compare and Cancel, the progress."""
    return html.Div(
        className="controls",
        children=[
            html.Div(
                className="control-row",
                children=[
                    html.Label("model A", htmlFor="compare-model-a"),
                    dcc.Dropdown(
                        id="compare-model-a",
                        options=options,
                        value=request.get("model_a") or default_model,
                        clearable=False,
                        className="model-picker",
                    ),
                    html.Label("model B", htmlFor="compare-model-b"),
                    dcc.Dropdown(
                        id="compare-model-b",
                        options=options,
                        value=request.get("model_b") or second,
                        clearable=False,
                        className="model-picker",
                    ),
                ],
            ),
            html.Div(
                className="control-row",
                children=[
                    dcc.RadioItems(
                        id="compare-source-kind",
                        inline=True,
                        options=[
                            {"label": " one text", "value": "text"},
                            {"label": " a corpus", "value": "corpus"},
                        ],
                        value=kind,
                    ),
                    html.Div(
                        id="compare-corpus-box",
                        style=shown(kind == "corpus"),
                        children=[
                            dcc.Dropdown(
                                id="compare-corpus",
                                options=corpus_options(store),
                                value=request.get("corpus") or "builtin-english",
                                clearable=False,
                                style={"minWidth": "22em"},
                            ),
                        ],
                    ),
                    html.Label("max tokens per text", htmlFor="compare-max-tokens"),
                    dcc.Input(
                        id="compare-max-tokens",
                        type="number",
                        min=2,
                        max=512,
                        step=1,
                        value=request.get("max_tokens", 128),
                        style={"width": "9em"},
                    ),
                ],
            ),
            html.Div(
                id="compare-text-box",
                style=shown(kind == "text"),
                children=[
                    dcc.Textarea(
                        id="compare-text",
                        value=request.get("text") or DEFAULT_TEXT,
                        className="text-input",
                        placeholder="the text to compare the two models on",
                    ),
                ],
            ),
            html.Div(
                className="control-row",
                children=[
                    html.Button("Compare", id="compare-run", className="button primary"),
                    html.Button("Cancel", id="compare-cancel", className="button secondary"),
                ],
            ),
            html.Div(id="compare-error", className="error"),
            progress_block("compare", running=source is not None),
        ],
    )


def panels(picks: list[dict[str, Any]], view: dict[str, Any]) -> list[Any]:
    """The similarity matrix, the matched pairs, the joint map, the pair's maps, the surprisal."""
    return [
        html.Div(
            className="panel",
            children=[
                html.P(
                    "Similarity of two heads: the mean over texts and query words of 1 − JSD (bits) of their "
                    "word-level attention rows (docs/compare.md). White lines: layer boundaries; dots: the "
                    "Hungarian matching. Click a cell for the two heads' word-level maps.",
                    className="hint",
                ),
                graph(
                    "compare-sim-graph",
                    figure=empty_figure("Pick two models and a text or corpus, then Compare."),
                ),
            ],
        ),
        html.Div(
            className="panel",
            children=[
                html.H4(
                    "Matched pairs (Hungarian method; sort by any column, click a row to select the pair)"
                ),
                html.Button("Export CSV", id="compare-table-csv", className="button secondary"),
                dag.AgGrid(
                    id="compare-table",
                    rowData=[],
                    getRowId="params.data.id",
                    columnDefs=F.pair_columns(),
                    defaultColDef={
                        "sortable": True,
                        "filter": True,
                        "floatingFilter": True,
                        "resizable": True,
                        "minWidth": 90,
                        "wrapHeaderText": True,
                        "autoHeaderHeight": True,
                    },
                    dashGridOptions={
                        "pagination": True,
                        "paginationPageSize": 12,
                        "paginationPageSizeSelector": [12, 50, 200],
                        "domLayout": "autoHeight",
                        "animateRows": False,
                    },
                    columnSize="responsiveSizeToFit",
                    className="corpus-grid",
                    csvExportParams={"fileName": "headscope-compare-pairs.csv"},
                ),
            ],
        ),
        html.Div(
            className="panel",
            children=[graph("compare-joint-graph", figure=F.joint_map_figure({}))],
        ),
        html.Div(
            className="panel",
            children=[
                html.Div(
                    id="compare-text-row",
                    className="control-row",
                    style=shown(bool(picks)),
                    children=[
                        html.Label(
                            "text of the corpus (word-level maps and surprisal)",
                            htmlFor="compare-text-pick",
                        ),
                        dcc.Dropdown(
                            id="compare-text-pick",
                            options=picks,
                            value=text_index(view.get("text")),
                            clearable=False,
                            style={"minWidth": "40em"},
                        ),
                    ],
                ),
                html.Div(id="compare-cell-label", className="label"),
                progress_block("compare-maps", running=False),
                html.Div(
                    className="row",
                    children=[
                        html.Div(
                            className="col",
                            children=[
                                graph(
                                    "compare-map-a",
                                    figure=F.word_map_figure(None, layer=0, head=0, title=""),
                                ),
                                html.Button(
                                    "A's token view",
                                    id="compare-open-a",
                                    className="button secondary",
                                ),
                            ],
                        ),
                        html.Div(
                            className="col",
                            children=[
                                graph(
                                    "compare-map-b",
                                    figure=F.word_map_figure(None, layer=0, head=0, title=""),
                                ),
                                html.Button(
                                    "B's token view",
                                    id="compare-open-b",
                                    className="button secondary",
                                ),
                            ],
                        ),
                    ],
                ),
            ],
        ),
        html.Div(
            className="panel",
            children=[graph("compare-surprisal", figure=empty_figure("", height=220))],
        ),
    ]
