"""The /circuits page's controls and panels (docs/circuits.md): the clean and corrupted texts, the
model, target and flow settings, the graph downloads, the head panel and the four figures' panels."""

from __future__ import annotations

from typing import Any

from dash import dcc, html

from frontend.figures import circuits as F
from frontend.figures.base import empty_figure
from frontend.kit.forms import TARGET_PLACEHOLDER, TARGET_STYLE, format_target
from frontend.kit.page import graph, progress_block
from frontend.pages.circuits.requests import DEMO, DEMO_CORRUPTED


def controls(
    request: dict[str, Any],
    pair_req: dict[str, Any],
    query: dict[str, str],
    source: dict[str, Any] | None,
    *,
    models: list[dict[str, Any]],
    model: str | None,
    url_msg: Any,
    hint: str,
) -> html.Div:
    """The texts, the control row (model, target, real patching, flow threshold and position,
    dtype, Analyze, Cancel), the hint, the error and the progress."""
    opts, popts = request.get("options") or {}, pair_req.get("options") or {}
    target = format_target(popts.get("target")) or (query.get("target") or "" if not source else "")
    row = html.Div(
        className="control-row",
        children=[
            html.Label("model", htmlFor="circuits-model"),
            dcc.Dropdown(
                id="circuits-model",
                options=models,
                value=request.get("model") or model,
                clearable=False,
                className="model-picker",
            ),
            html.Label("target", htmlFor="circuits-target"),
            dcc.Input(
                id="circuits-target",
                type="text",
                value=target or "",
                debounce=True,
                style=TARGET_STYLE,
                placeholder=TARGET_PLACEHOLDER.replace(
                    "the next token", "the two texts' top predictions"
                ),
            ),
            dcc.Checklist(
                id="circuits-real",
                options=[{"label": "real patching beside AtP", "value": "real"}],
                value=["real"] if (popts.get("real") or not pair_req) else [],
                inline=True,
            ),
            html.Label("flow threshold τ", htmlFor="circuits-threshold"),
            dcc.Input(
                id="circuits-threshold",
                type="number",
                min=0.001,
                max=0.999,
                step="any",
                value=opts.get("threshold", 0.04),
                className="small-input",
            ),
            html.Label("flow from position", htmlFor="circuits-position"),
            dcc.Input(
                id="circuits-position",
                type="number",
                min=0,
                value=opts.get("position"),
                className="small-input",
                placeholder="last",
            ),
            dcc.RadioItems(
                id="circuits-dtype",
                options=["float32", "float64"],
                value=opts.get("dtype", "float32"),
                inline=True,
            ),
            html.Button("Analyze", id="circuits-analyze", className="button primary"),
            html.Button("Cancel", id="circuits-cancel", className="button secondary"),
        ],
    )
    return html.Div(
        className="controls",
        children=[
            html.Div(
                className="row",
                children=[
                    html.Div(
                        className="col",
                        children=[
                            html.Label("clean text", htmlFor="circuits-text"),
                            dcc.Textarea(
                                id="circuits-text",
                                value=request.get("text") or query.get("text") or DEMO,
                                className="text-input",
                            ),
                        ],
                    ),
                    html.Div(
                        className="col",
                        children=[
                            html.Label(
                                "corrupted text (same token length; empty: the flow graph only)",
                                htmlFor="circuits-corrupted",
                            ),
                            dcc.Textarea(
                                id="circuits-corrupted",
                                className="text-input",
                                value=popts.get("corrupted")
                                if source
                                else query.get("corrupted") or DEMO_CORRUPTED,
                            ),
                        ],
                    ),
                ],
            ),
            row,
            None if request else url_msg,
            html.P(
                [
                    hint + " The information-flow graph runs on any model. A circuit on a "
                    "task data set (IOI, capitals, your JSON Lines), scored as MIB scores "
                    "one: ",
                    dcc.Link("circuit sets", href="/circuits/sets", id="circuits-sets-link"),
                    ".",
                ],
                className="hint",
            ),
            html.Div(id="circuits-error", className="error"),
            html.Div(id="circuits-cancelled", className="hint"),
            progress_block("circuits", running=source is not None),
        ],
    )


def downloads() -> html.Div:
    """The circuit's and the flow graph's JSON and GraphML buttons."""
    return html.Div(
        className="control-row",
        children=[
            html.Span("graphs:", className="label"),
            *[
                html.Button(label, id=f"circuits-dl-{key}", className="button secondary")
                for key, label in (
                    ("circuit-json", "circuit JSON"),
                    ("circuit-graphml", "circuit GraphML"),
                    ("flow-json", "flow JSON"),
                    ("flow-graphml", "flow GraphML"),
                )
            ],
            dcc.Download(id="circuits-graph-download"),
        ],
    )


def panels(view: dict[str, Any]) -> list[Any]:
    """The head panel, the circuit beside the curve (its N slider and layout), AtP, the flow graph."""
    return [
        html.Div(
            className="panel",
            children=[
                html.H4("Head"),
                html.Div(
                    id="circuits-head-info",
                    className="hint",
                    children="Click a head in the circuit, the scatter or the flow graph.",
                ),
                html.Div(id="circuits-head-links"),
            ],
        ),
        html.Div(
            className="row",
            children=[
                html.Div(
                    className="col panel",
                    children=[
                        graph("circuits-circuit-graph", figure=empty_figure("Press Analyze."))
                    ],
                ),
                html.Div(
                    className="col panel",
                    children=[
                        graph("circuits-curve-graph", figure=empty_figure("")),
                        html.Label(
                            "circuit size N (edges, the curve's sizes)",
                            htmlFor="circuits-n-slider",
                        ),
                        dcc.Slider(
                            id="circuits-n-slider",
                            min=0,
                            max=0,
                            step=1,
                            value=0,
                            marks={},
                            included=False,
                            allow_direct_input=False,
                        ),
                        html.Div(
                            id="circuits-n-note", className="hint", style={"marginTop": "22px"}
                        ),
                        html.Span("circuit layout:", className="label"),
                        dcc.RadioItems(
                            id="circuits-layout",
                            options=[{"label": v, "value": k} for k, v in F.LAYOUTS.items()],
                            value=view.get("layout") if view.get("layout") in F.LAYOUTS else "head",
                            inline=True,
                        ),
                    ],
                ),
            ],
        ),
        html.Div(
            className="panel", children=[graph("circuits-atp-graph", figure=empty_figure(""))]
        ),
        html.Div(
            className="panel", children=[graph("circuits-flow-graph", figure=empty_figure(""))]
        ),
    ]
