"""The corpus page's controls and panels (docs/corpus.md): the model, the corpus (picked, pasted or
uploaded), its settings; the map of heads, the head table, the selected head's views and contexts,
and its joint query–key map."""

from __future__ import annotations

from typing import Any

import dash_ag_grid as dag
from dash import dcc, html

from frontend.figures import corpus as C
from frontend.figures.base import empty_figure
from frontend.kit.page import graph, progress_block


def controls(
    request: dict[str, Any],
    source: dict[str, Any] | None,
    *,
    options: list[dict[str, Any]],
    corpora: list[dict[str, Any]],
    model: str | None,
) -> html.Div:
    """Model, corpus (pick, paste, upload), token limit and flags, Analyze, Cancel, the progress."""
    opts = request.get("options") or {}
    return html.Div(
        className="controls",
        children=[
            html.Div(
                className="control-row",
                children=[
                    html.Label("model", htmlFor="corpus-model"),
                    dcc.Dropdown(
                        id="corpus-model",
                        options=options,
                        value=request.get("model") or model,
                        clearable=False,
                        className="model-picker",
                    ),
                    html.Label("corpus", htmlFor="corpus-pick"),
                    dcc.Dropdown(
                        id="corpus-pick",
                        options=corpora,
                        value=request.get("corpus") or "builtin-english",
                        clearable=False,
                        style={"minWidth": "22em"},
                    ),
                ],
            ),
            html.Details(
                children=[
                    html.Summary(
                        "add a corpus: paste texts (one per line) or upload .txt / .jsonl / .csv / .parquet, "
                        "or a datasets directory (save_to_disk) as .zip / .tar.gz"
                    ),
                    dcc.Textarea(
                        id="corpus-paste",
                        placeholder="one text per line",
                        className="text-input",
                    ),
                    html.Div(
                        className="control-row",
                        children=[
                            html.Button(
                                "Store pasted texts",
                                id="corpus-store-paste",
                                className="button",
                            ),
                            dcc.Upload(
                                id="corpus-upload",
                                children=html.Button("Upload a file…", className="button"),
                            ),
                            html.Label(
                                "field / column (.jsonl, .csv, .parquet, datasets)",
                                htmlFor="corpus-field",
                            ),
                            dcc.Input(
                                id="corpus-field",
                                type="text",
                                placeholder="text",
                                debounce=True,
                            ),
                        ],
                    ),
                    html.Div(id="corpus-upload-status", className="status"),
                ]
            ),
            html.Div(
                className="control-row",
                children=[
                    html.Label("max tokens per text", htmlFor="corpus-max-tokens"),
                    dcc.Input(
                        id="corpus-max-tokens",
                        type="number",
                        min=2,
                        max=4096,
                        step=1,
                        value=opts.get("max_tokens", 128),
                    ),
                    dcc.Checklist(
                        id="corpus-flags",
                        options=[{"label": " keep special tokens", "value": "keep"}],
                        value=["keep"] if opts.get("keep_special") else [],
                        inline=True,
                    ),
                    html.Button("Analyze", id="corpus-analyze", className="button primary"),
                    html.Button("Cancel", id="corpus-cancel", className="button secondary"),
                ],
            ),
            html.Div(id="corpus-error", className="error"),
            progress_block("corpus", running=source is not None),
        ],
    )


def panels(view: dict[str, Any]) -> list[Any]:
    """The map of heads and the table, the selected head's views and contexts, the joint map."""
    return [
        html.Div(
            className="panel",
            children=[
                html.Div(
                    className="control-row",
                    children=[
                        html.P(
                            "Each statistic is a mean over the queries it applies to (docs/corpus.md). A click on a "
                            "column's name sorts by it; a number typed under it keeps the heads above it (its menu "
                            "picks another condition); a click on a row selects the head.",
                            className="hint",
                        ),
                        html.Button(
                            "Export CSV", id="corpus-table-csv", className="button secondary"
                        ),
                    ],
                ),
                dag.AgGrid(
                    id="corpus-table",
                    columnDefs=[],
                    rowData=[],
                    getRowId="params.data.head",
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
                        "paginationPageSize": 15,
                        "paginationPageSizeSelector": [15, 50, 200],
                        "domLayout": "autoHeight",
                        "animateRows": False,
                    },
                    columnSize="responsiveSizeToFit",
                    className="corpus-grid",
                    csvExportParams={"fileName": "headscope-corpus-heads.csv"},
                ),
            ],
        ),
        html.Div(
            className="panel",
            children=[
                html.Div(
                    className="control-row",
                    children=[
                        html.Label("colour the map by", htmlFor="corpus-color"),
                        dcc.Dropdown(
                            id="corpus-color",
                            value=view.get("color") or "layer",
                            clearable=False,
                            options=[{"label": "layer", "value": "layer"}]
                            + [{"label": lab, "value": s} for s, lab in C.STAT_LABELS.items()],
                            style={"minWidth": "14em"},
                        ),
                        html.Span(id="corpus-selected-label", className="label"),
                    ],
                ),
                graph("corpus-map-graph", figure=empty_figure("Pick a corpus and press Analyze.")),
            ],
        ),
        html.Div(
            className="panel",
            children=[
                html.Div(
                    className="row",
                    children=[
                        html.Div(
                            className="col",
                            children=graph(
                                "corpus-compare-graph",
                                figure=empty_figure("Click a head in the map or the table."),
                            ),
                        ),
                        html.Div(
                            className="col",
                            children=[
                                dcc.Dropdown(
                                    id="corpus-hist-stat",
                                    value=view.get("stat") or "previous",
                                    clearable=False,
                                    options=[
                                        {"label": lab, "value": s}
                                        for s, lab in C.STAT_LABELS.items()
                                    ],
                                ),
                                graph("corpus-hist-graph", figure=empty_figure("", height=260)),
                            ],
                        ),
                    ],
                ),
                html.H4("Top (query, key) pairs: query in blue, key in orange"),
                html.Div(id="corpus-contexts", className="contexts"),
            ],
        ),
        html.Div(
            className="panel",
            children=[
                html.Div(
                    className="control-row",
                    children=[
                        html.Button(
                            "Joint query–key map", id="corpus-joint-button", className="button"
                        ),
                        dcc.RadioItems(
                            id="corpus-joint-method",
                            options=[
                                {"label": "PCA", "value": "pca"},
                                {"label": "t-SNE (slow)", "value": "tsne"},
                            ],
                            value="pca",
                            inline=True,
                        ),
                        dcc.RadioItems(
                            id="corpus-joint-color",
                            options=[
                                {"label": "query / key", "value": "kind"},
                                {"label": "position", "value": "position"},
                            ],
                            value="kind",
                            inline=True,
                        ),
                    ],
                ),
                graph("corpus-joint-graph", figure=C.joint_map_figure(None)),
            ],
        ),
    ]
