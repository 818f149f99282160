"""PE explorer: uploaded positional-encoding checkpoints against a reference and a partition (docs/positional.md).

URL state: ``/pe?analysis=<id>`` (or ``/pe?share=<id>``) plus ``colour`` (row / column /
partition / position), ``rescale``, ``reorder``, ``aligned`` and ``shared`` (1/0: one colour scale for
all distance heatmaps instead of one per panel).
"""

from __future__ import annotations

import base64
import logging
from typing import Any

from dash import ALL, Dash, Input, Output, State, ctx, dcc, html, no_update

from frontend.figures import positional as P
from frontend.figures.base import empty_figure
from frontend.kit.api_client import ApiError
from frontend.kit.data import ResultStore
from frontend.kit.frontdoor import page_header
from frontend.kit.page import (
    PageView,
    export_bar,
    graph,
    progress_block,
    register_exports,
    register_poll,
    register_view,
)

logger = logging.getLogger(__name__)

NAME = "pe"  # a share's view names its page
PATH = "/pe"
TITLE = "PE explorer"
NAV_ORDER = 3
GRAPHS = ["pe-distance-graph", "pe-map-graph", "pe-sweep-graph"]
REFERENCES = [
    ("none", "none"),
    ("2d-fixed", "2d-fixed (grid)"),
    ("1d-fixed", "1d-fixed"),
    ("random", "random N(0, σ²)"),
    ("checkpoint", "another checkpoint"),
]
PARTITIONS = [("none", "none"), ("rows", "grid rows"), ("columns", "grid columns"), ("csv", "CSV")]


def _flag(view: dict[str, Any], key: str, default: bool) -> bool:
    v = view.get(key)
    return default if v is None else str(v) not in ("0", "false", "False")


def checkpoint_entry(info: dict[str, Any]) -> dict[str, Any]:
    """What the page keeps of a checkpoint: id, name, candidate tensors, the chosen tensor."""
    cands = [{"name": c.get("name"), "shape": c.get("shape")} for c in info.get("candidates") or []]
    return {
        "id": info["id"],
        "name": info.get("filename") or info.get("name") or info["id"],
        "candidates": cands,
        "tensor": info.get("tensor") or info.get("default"),
    }


def pe_request(
    *,
    checkpoints: list[dict[str, Any]],
    reference: str,
    grid: tuple[int, int],
    sigma: float,
    seed: int,
    reference_checkpoint: str | None,
    partition: str,
    csv: str | None,
    metric: str,
) -> dict[str, Any]:
    """The ``POST /api/pe-analyses`` body for the page's controls."""
    ref: dict[str, Any] = {"kind": reference or "none"}
    if reference in ("2d-fixed",):
        ref["grid"] = list(grid)
    if reference == "random":
        ref.update(sigma=float(sigma), seed=int(seed))
    if reference == "checkpoint":
        chosen = next((c for c in checkpoints if c["id"] == reference_checkpoint), None)
        if chosen is None:
            raise ValueError("pick the checkpoint that serves as the reference")
        ref["checkpoint"] = {"id": chosen["id"], "tensor": chosen.get("tensor")}
    part: dict[str, Any] = {"kind": partition or "none"}
    if partition in ("rows", "columns"):
        part["grid"] = list(grid)
    if partition == "csv":
        if not (csv or "").strip():
            raise ValueError("paste or upload a partition CSV (header position,label)")
        part["csv"] = csv
    return {
        "checkpoints": [{"id": c["id"], "tensor": c.get("tensor")} for c in checkpoints],
        "reference": ref,
        "partition": part,
        "metric": metric or "euclidean",
    }


def layout(
    store: ResultStore, query: dict[str, str], share: dict[str, Any] | None = None
) -> html.Div:
    source, request, view, result = None, {}, {}, {}
    if share is not None:
        source = {"kind": "share", "id": share["id"]}
        request, view, result = (
            share.get("request") or {},
            dict(share.get("view") or {}),
            share.get("result") or {},
        )
    elif query.get("analysis"):
        source = {"kind": "pe", "id": query["analysis"]}
        st = store.status(source)
        request, result = st.get("request") or {}, st.get("result") or {}
    view.update(
        {
            k: v
            for k, v in query.items()
            if k in ("colour", "rescale", "reorder", "aligned", "shared")
        }
    )
    reports = result.get("checkpoints") or []
    entries = []
    for i, c in enumerate(request.get("checkpoints") or []):
        name = reports[i].get("name") if i < len(reports) else c["id"]
        entries.append(
            {"id": c["id"], "name": name or c["id"], "candidates": [], "tensor": c.get("tensor")}
        )
    ref, part = request.get("reference") or {}, request.get("partition") or {}
    grid = ref.get("grid") or part.get("grid") or [4, 4]
    colour = view.get("colour") if view.get("colour") in P.COLOUR_BY else "row"
    return html.Div(
        className="page",
        id="pe-page",
        children=[
            page_header(NAME, TITLE),
            html.Div(
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
                            html.Button(
                                "Load demo checkpoints", id="pe-demo-button", className="button"
                            ),
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
                        children=[
                            html.Button("Analyze", id="pe-run-button", className="button primary")
                        ],
                    ),
                    html.Div(id="pe-error", className="error"),
                    progress_block("pe", running=source is not None),
                ],
            ),
            export_bar("pe", GRAPHS),
            html.Div(className="panel", children=[html.Div(id="pe-metrics")]),
            html.Div(
                className="panel",
                children=[
                    html.Div(
                        className="control-row",
                        children=[
                            dcc.Checklist(
                                id="pe-reorder",
                                options=[
                                    {"label": " reorder positions by partition", "value": "on"}
                                ],
                                value=["on"] if _flag(view, "reorder", True) else [],
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
                                value=["shared"] if _flag(view, "shared", False) else [],
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
                                    if _flag(view, k, d)
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
            dcc.Store(id="pe-source", data=source),
            dcc.Store(id="pe-checkpoints", data=entries),
        ],
    )


def metrics_table(result: dict[str, Any]) -> html.Table | html.Div:
    rows = P.pe_metrics_rows(result)
    if not rows:
        return html.Div("No metrics yet.", className="hint")
    cols = list(rows[0])
    return html.Table(
        id="pe-metrics-table",
        className="metrics-table",
        children=[
            html.Thead(html.Tr([html.Th(c) for c in cols])),
            html.Tbody([html.Tr([html.Td(r[c]) for c in cols]) for r in rows]),
        ],
    )


def _grid_of(request: dict[str, Any] | None, rows: Any, cols: Any) -> tuple[int, int]:
    for part in ((request or {}).get("reference") or {}, (request or {}).get("partition") or {}):
        if part.get("grid"):
            return int(part["grid"][0]), int(part["grid"][1])
    return int(rows or 4), int(cols or 4)


def _figures(
    result: dict[str, Any],
    reorder: Any,
    colour: Any,
    view_opts: Any,
    rows: Any,
    cols: Any,
    shared: Any = None,
) -> list[Any]:
    grid = _grid_of(None, rows, cols)
    opts = view_opts or []
    return [
        P.pe_distance_figure(result, reorder=bool(reorder), shared_scale=bool(shared)),
        P.pe_map_figure(
            result,
            colour_by=colour or "row",
            grid=grid,
            rescale="rescale" in opts,
            aligned="aligned" in opts,
        ),
        P.pe_sweep_figure(result),
    ]


def upload_error(name: str, message: str) -> str:
    """An upload's error line: the file's name once (the API's reasons often start with it).

    >>> upload_error("README.md", "README.md: not a checkpoint")
    'README.md: not a checkpoint'
    """
    return message if message.startswith(f"{name}:") else f"{name}: {message}"


def register(app: Dash, store: ResultStore) -> None:
    client = store.client
    register_poll(app, store, "pe", ["pe-source"])

    @app.callback(
        Output("pe-checkpoints", "data"),
        Output("pe-upload-error", "children"),
        Input("pe-upload", "contents"),
        Input("pe-demo-button", "n_clicks"),
        Input({"type": "pe-remove", "index": ALL}, "n_clicks"),
        State("pe-upload", "filename"),
        State("pe-checkpoints", "data"),
        State({"type": "pe-tensor", "index": ALL}, "value"),
        prevent_initial_call=True,
    )
    def _checkpoints(contents, _demo, removes, filenames, entries, tensors):  # type: ignore[no-untyped-def]
        entries = [dict(e) for e in entries or []]
        for e, t in zip(entries, tensors or [], strict=False):
            e["tensor"] = t
        trig = ctx.triggered_id
        errors: list[str] = []
        if isinstance(trig, dict) and trig.get("type") == "pe-remove":
            if not any(removes or []):
                return no_update, no_update
            idx = int(trig["index"])
            return [e for i, e in enumerate(entries) if i != idx], ""
        known = {e["id"] for e in entries}
        if trig == "pe-demo-button":
            try:
                demos = client.checkpoints().get("demos") or []
            except ApiError as exc:
                return no_update, str(exc)
            entries += [checkpoint_entry(d) for d in demos if d["id"] not in known]
            if not demos:
                errors.append("the server lists no demo checkpoints")
        elif trig == "pe-upload" and contents:
            for content, name in zip(contents, filenames or [], strict=False):
                try:
                    data = base64.b64decode(content.split(",", 1)[1])
                    info = client.upload_checkpoint(name, data)
                except ApiError as exc:
                    errors.append(upload_error(name, str(exc)))
                    continue
                except (IndexError, ValueError):
                    errors.append(f"{name}: the browser sent an unreadable upload")
                    continue
                if info["id"] not in known:
                    entries.append(checkpoint_entry(info))
                    known.add(info["id"])
        return entries, "\n".join(errors)

    @app.callback(
        Output("pe-checkpoint-list", "children"),
        Output("pe-reference-checkpoint", "options"),
        Input("pe-checkpoints", "data"),
    )
    def _list(entries):  # type: ignore[no-untyped-def]
        items = []
        for i, e in enumerate(entries or []):
            opts = [
                {"label": f"{c['name']} {tuple(c.get('shape') or ())}", "value": c["name"]}
                for c in e.get("candidates") or []
            ]
            if e.get("tensor") and not any(o["value"] == e["tensor"] for o in opts):
                opts.append({"label": e["tensor"], "value": e["tensor"]})
            items.append(
                html.Div(
                    className="checkpoint",
                    children=[
                        html.Span(e["name"], className="name"),
                        dcc.Dropdown(
                            id={"type": "pe-tensor", "index": i},
                            options=opts,
                            value=e.get("tensor"),
                            placeholder="best candidate",
                            className="model-picker",
                        ),
                        html.Button(
                            "remove",
                            id={"type": "pe-remove", "index": i},
                            className="button secondary",
                        ),
                    ],
                )
            )
        if not items:
            items = [html.Div("No checkpoint yet: upload one or load the demos.", className="hint")]
        return items, [{"label": e["name"], "value": e["id"]} for e in entries or []]

    @app.callback(
        Output("pe-partition-csv", "value"),
        Output("pe-partition", "value"),
        Input("pe-partition-upload", "contents"),
        prevent_initial_call=True,
    )
    def _csv(content):  # type: ignore[no-untyped-def]
        try:
            return base64.b64decode(content.split(",", 1)[1]).decode("utf-8"), "csv"
        except (AttributeError, IndexError, ValueError, UnicodeDecodeError):
            return "", no_update

    @app.callback(
        Output("pe-source", "data"),
        Output("pe-error", "children"),
        Input("pe-run-button", "n_clicks"),
        State("pe-checkpoints", "data"),
        State({"type": "pe-tensor", "index": ALL}, "value"),
        State("pe-reference", "value"),
        State("pe-grid-rows", "value"),
        State("pe-grid-cols", "value"),
        State("pe-sigma", "value"),
        State("pe-seed", "value"),
        State("pe-reference-checkpoint", "value"),
        State("pe-partition", "value"),
        State("pe-partition-csv", "value"),
        State("pe-metric", "value"),
        prevent_initial_call=True,
    )
    def _run(
        _n, entries, tensors, reference, rows, cols, sigma, seed, ref_ckpt, partition, csv, metric
    ):  # type: ignore[no-untyped-def]
        entries = [dict(e) for e in entries or []]
        for e, t in zip(entries, tensors or [], strict=False):
            e["tensor"] = t
        if not entries:
            return no_update, "Upload a checkpoint or load the demos first."
        try:
            body = pe_request(
                checkpoints=entries,
                reference=reference,
                grid=(int(rows or 4), int(cols or 4)),
                sigma=float(sigma if sigma is not None else 1.0),
                seed=int(seed or 0),
                reference_checkpoint=ref_ckpt,
                partition=partition,
                csv=csv,
                metric=metric,
            )
            job = client.submit_pe_analysis(body)
        except (ApiError, ValueError) as exc:
            return no_update, str(exc)
        return {"kind": "pe", "id": job["id"], "request": body}, ""

    @app.callback(
        Output("pe-metrics", "children"),
        Output("pe-distance-graph", "figure"),
        Output("pe-map-graph", "figure"),
        Output("pe-sweep-graph", "figure"),
        Input("pe-job", "data"),
        Input("pe-reorder", "value"),
        Input("pe-colour", "value"),
        Input("pe-view-options", "value"),
        Input("pe-shared-scale", "value"),
        State("pe-source", "data"),
        State("pe-grid-rows", "value"),
        State("pe-grid-cols", "value"),
    )
    def _render(_job, reorder, colour, view_opts, shared, source, rows, cols):  # type: ignore[no-untyped-def]
        st = store.status(source)
        result = st["result"]
        if not result.get("checkpoints"):
            msg = {
                "none": "Load a checkpoint and press Analyze.",
                "failed": f"failed: {st.get('error')}",
            }.get(st["status"], "Computing…")
            return html.Div(), empty_figure(msg), empty_figure(""), empty_figure("", height=200)
        grid = _grid_of(st.get("request"), rows, cols)
        opts = view_opts or []
        return (
            metrics_table(result),
            P.pe_distance_figure(result, reorder=bool(reorder), shared_scale=bool(shared)),
            P.pe_map_figure(
                result,
                colour_by=colour or "row",
                grid=grid,
                rescale="rescale" in opts,
                aligned="aligned" in opts,
            ),
            P.pe_sweep_figure(result),
        )

    def _view(colour: Any, view_opts: Any, reorder: Any, shared: Any = None) -> dict[str, Any]:
        opts = view_opts or []
        return {
            "colour": colour,
            "rescale": "rescale" in opts,
            "aligned": "aligned" in opts,
            "reorder": bool(reorder),
            "shared": bool(shared),
        }

    register_view(
        app,
        client,
        PageView(
            name=NAME,
            prefix="pe",
            path=PATH,
            source="pe-source",
            inputs=(
                ("pe-colour", "value"),
                ("pe-view-options", "value"),
                ("pe-reorder", "value"),
                ("pe-shared-scale", "value"),
            ),
            view=_view,
        ),
    )

    register_exports(
        app,
        store,
        "pe",
        source="pe-source",
        graphs=GRAPHS,
        figures=_figures,
        view_states=[
            State("pe-reorder", "value"),
            State("pe-colour", "value"),
            State("pe-view-options", "value"),
            State("pe-grid-rows", "value"),
            State("pe-grid-cols", "value"),
            State("pe-shared-scale", "value"),
        ],
        title="headscope — positional encodings",
    )
