"""The PE explorer's controls and panels (docs/positional.md): the checkpoints (upload, demos, each
one's tensor), the reference and its grid, the partition, the metric, and the panels of the metrics,
the distance heatmaps, the 2-D map and the sweep."""

from __future__ import annotations

from typing import Any

from dash import dcc, html

from frontend.figures import positional as P
from frontend.figures.base import empty_figure
from frontend.kit.page import graph, progress_block
from frontend.pages.pe.requests import PARTITIONS, REFERENCES, flag


def controls(request: dict[str, Any], source: dict[str, Any] | None) -> html.Div:
    """Checkpoints, reference, grid, partition and metric, Analyze, the error and the progress."""
    ref, part = request.get("reference") or {}, request.get("partition") or {}
    grid = ref.get("grid") or part.get("grid") or [4, 4]
    return html.Div(
        className="controls",
        children=[
            html.Div(
                className="control-row",
                children=[
                    dcc.Upload(
                        id="pe-upload",
                        multiple=True,
                        className="upload",
                        children=html.Div(
                            "Drop checkpoints here or click to upload (.safetensors, .npy, .npz, .pt/.bin)"
                        ),
                    ),
                    html.Button("Load demo checkpoints", id="pe-demo-button", className="button"),
                ],
            ),
            html.Div(id="pe-upload-error", className="error"),
            html.Div(id="pe-checkpoint-list", className="checkpoint-list"),
            html.Div(
                className="control-row",
                children=[
                    html.Span("reference:", className="label"),
                    dcc.RadioItems(
                        id="pe-reference",
                        options=[{"label": lab, "value": v} for v, lab in REFERENCES],
                        value=ref.get("kind", "2d-fixed"),
                        inline=True,
                        className="inline-radio",
                    ),
                ],
            ),
            html.Div(
                className="control-row",
                children=[
                    html.Label("grid rows", htmlFor="pe-grid-rows"),
                    dcc.Input(
                        id="pe-grid-rows",
                        type="number",
                        min=1,
                        value=int(grid[0]),
                        className="small-input",
                    ),
                    html.Label("columns", htmlFor="pe-grid-cols"),
                    dcc.Input(
                        id="pe-grid-cols",
                        type="number",
                        min=1,
                        value=int(grid[1]),
                        className="small-input",
                    ),
                    html.Label("σ", htmlFor="pe-sigma"),
                    dcc.Input(
                        id="pe-sigma",
                        type="number",
                        min=0,
                        value=float(ref.get("sigma", 1.0)),
                        className="small-input",
                    ),
                    html.Label("seed", htmlFor="pe-seed"),
                    dcc.Input(
                        id="pe-seed",
                        type="number",
                        min=0,
                        value=int(ref.get("seed", 0)),
                        className="small-input",
                    ),
                    html.Label("reference checkpoint", htmlFor="pe-reference-checkpoint"),
                    dcc.Dropdown(
                        id="pe-reference-checkpoint",
                        value=(ref.get("checkpoint") or {}).get("id"),
                        placeholder="(for 'another checkpoint')",
                        className="model-picker",
                    ),
                ],
            ),
            html.Div(
                className="control-row",
                children=[
                    html.Span("partition:", className="label"),
                    dcc.RadioItems(
                        id="pe-partition",
                        options=[{"label": lab, "value": v} for v, lab in PARTITIONS],
                        value=part.get("kind", "rows"),
                        inline=True,
                        className="inline-radio",
                    ),
                    dcc.Upload(
                        id="pe-partition-upload",
                        children=html.Button("upload CSV", className="button secondary"),
                    ),
                    html.Span("metric:", className="label"),
                    dcc.RadioItems(
                        id="pe-metric",
                        options=["euclidean", "cosine"],
                        value=request.get("metric", "euclidean"),
                        inline=True,
                        className="inline-radio",
                    ),
                ],
            ),
            dcc.Textarea(
                id="pe-partition-csv",
                value=part.get("csv") or "",
                className="text-input",
                placeholder="position,label\n0,a\n1,a\n…",
                style={"minHeight": "60px"},
            ),
            html.Div(
                className="control-row",
                children=[html.Button("Analyze", id="pe-run-button", className="button primary")],
            ),
            html.Div(id="pe-error", className="error"),
            progress_block("pe", running=source is not None),
        ],
    )


def panels(view: dict[str, Any]) -> list[Any]:
    """The metrics, the distance heatmaps (reorder, one scale), the 2-D map (colour, rescale,
    aligned) and the sweep."""
    colour = view.get("colour") if view.get("colour") in P.COLOUR_BY else "row"
    return [
        html.Div(className="panel", children=[html.Div(id="pe-metrics")]),
        html.Div(
            className="panel",
            children=[
                html.Div(
                    className="control-row",
                    children=[
                        dcc.Checklist(
                            id="pe-reorder",
                            options=[{"label": " reorder positions by partition", "value": "on"}],
                            value=["on"] if flag(view, "reorder", True) else [],
                            inline=True,
                        ),
                        dcc.Checklist(
                            id="pe-shared-scale",
                            options=[
                                {
                                    "label": " one colour scale for all panels (default: each its own)",
                                    "value": "shared",
                                }
                            ],
                            value=["shared"] if flag(view, "shared", False) else [],
                            inline=True,
                        ),
                    ],
                ),
                graph(
                    "pe-distance-graph",
                    figure=empty_figure("Load a checkpoint and press Analyze."),
                ),
            ],
        ),
        html.Div(
            className="panel",
            children=[
                html.Div(
                    className="control-row",
                    children=[
                        html.Span("colour by:", className="label"),
                        dcc.RadioItems(
                            id="pe-colour",
                            options=list(P.COLOUR_BY),
                            value=colour,
                            inline=True,
                            className="inline-radio",
                        ),
                        dcc.Checklist(
                            id="pe-view-options",
                            options=[
                                {"label": " quantile-equidistant axes", "value": "rescale"},
                                {"label": " aligned to the reference", "value": "aligned"},
                            ],
                            value=[
                                k
                                for k, d in (("rescale", True), ("aligned", False))
                                if flag(view, k, d)
                            ],
                            inline=True,
                        ),
                    ],
                ),
                graph("pe-map-graph", figure=empty_figure("")),
            ],
        ),
        html.Div(
            className="panel",
            children=[graph("pe-sweep-graph", figure=empty_figure("", height=200))],
        ),
    ]
