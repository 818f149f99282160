"""Circuits on a task data set (docs/circuits.md, "Circuits on a task data set"): the data-set mode of
/circuits. A built-in task (``ioi``, ``capitals``, N examples) or a pasted/uploaded JSON Lines set (stored
first through ``POST /api/task-sets``, the job then names it by its ``cp-`` id) runs one ``circuits-set``
job; the page shows the model's accuracy on the set, the faithfulness curve on
MIB's axis with the random band, CPR and CMD beside random's, the stability per size, the circuit at a
chosen size, the top AtP node scores, and the examples, each a link to the single-pair view on /circuits;
the export bar (``exports.py``) downloads the result, the page and the circuit at k (JSON, GraphML).

URL state: ``/circuits/sets?analysis=<job>&k=<size>``; a share link holds the job's share and ``k``.
"""

from __future__ import annotations

import base64
import logging
from typing import Any

from dash import Dash, Input, Output, State, dcc, html, no_update

from frontend.figures import circuit_sets as F
from frontend.figures.base import empty_figure
from frontend.kit.api_client import ApiError
from frontend.kit.data import ResultStore
from frontend.kit.forms import decoder_choices, url_model
from frontend.kit.frontdoor import page_header
from frontend.kit.page import (
    PageView,
    graph,
    progress_block,
    register_cancel,
    register_poll,
    register_view,
    restore_view,
)
from frontend.pages.circuits_sets.exports import exports_row, register_circuit_exports
from frontend.pages.circuits_sets.requests import (
    BUILT_IN,
    SET_ID,
    UPLOAD,
    pair_link,
    set_request,
    stored_line,
)
from workers.analyses.circuits.spec import CIRCUITS_SET

logger = logging.getLogger(__name__)

NAME = "circuit-sets"
PATH = "/circuits/sets"
TITLE = "Circuit sets"
NAV_ORDER = 6  # beside /circuits
SHOWN_EXAMPLES = 50


def _number(label: str, cid: str, value: Any, lo: int, hi: int) -> list[Any]:
    return [
        html.Label(label, htmlFor=cid),
        dcc.Input(
            id=cid, type="number", min=lo, max=hi, step=1, value=value, className="small-input"
        ),
    ]


def layout(
    store: ResultStore, query: dict[str, str], share: dict[str, Any] | None = None
) -> html.Div:
    options, default_model, hint = decoder_choices(store)
    source, request, view = restore_view(store, query, share, keys=("k",))
    model, url_msg = url_model(query, options, default_model, view="circuits on a set")
    opts = request.get("options") or {}
    text = request.get("text") or ""
    task = text if text in BUILT_IN else (UPLOAD if text else query.get("task") or "ioi")
    row = html.Div(
        className="control-row",
        children=[
            html.Label("model", htmlFor="cs-model"),
            dcc.Dropdown(
                id="cs-model",
                options=options,
                value=request.get("model") or model,
                clearable=False,
                className="model-picker",
            ),
            html.Label("method", htmlFor="cs-method"),
            dcc.RadioItems(
                id="cs-method",
                options=[{"label": "EAP", "value": "eap"}, {"label": "EAP-IG", "value": "eap-ig"}],
                value="eap" if opts.get("ig_steps") == 1 else "eap-ig",
                inline=True,
            ),
            *_number("IG steps k", "cs-ig-steps", opts.get("ig_steps", 5), 1, 50),
            *_number("bootstrap B", "cs-bootstrap", opts.get("bootstrap", 10), 0, 200),
            *_number("random R", "cs-random", opts.get("random_circuits", 5), 0, 50),
            html.Button("Analyze", id="cs-analyze", className="button primary"),
            html.Button("Cancel", id="cs-cancel", className="button secondary"),
        ],
    )
    picker = html.Div(
        className="control-row",
        children=[
            html.Label("data set", htmlFor="cs-task"),
            dcc.RadioItems(
                id="cs-task",
                options=[
                    {"label": "IOI (built in)", "value": "ioi"},
                    {"label": "capitals (built in)", "value": "capitals"},
                    {"label": "my JSON Lines", "value": UPLOAD},
                ],
                value=task,
                inline=True,
            ),
            *_number("N examples", "cs-n", opts.get("set_examples", 200), 2, 2000),
        ],
    )
    paste = html.Div(
        className="row",
        children=[
            html.Div(
                className="col",
                children=[
                    html.Label(
                        "JSON Lines: one example a line with clean, corrupted, answer, wrong "
                        "(clean and corrupted of the same token length)",
                        htmlFor="cs-jsonl",
                    ),
                    dcc.Textarea(
                        id="cs-jsonl",
                        value=text if task == UPLOAD else "",
                        className="text-input",
                    ),
                    dcc.Upload(
                        id="cs-upload",
                        children=html.Span("or drop / pick a .jsonl file", className="button"),
                    ),
                    html.Div(id="cs-set-info", className="hint"),
                ],
            )
        ],
    )
    return html.Div(
        className="page",
        id="circuit-sets-page",
        children=[
            page_header(NAME, TITLE),
            html.P(
                [
                    "The circuit of one clean / corrupted pair is on ",
                    dcc.Link("Circuits", href="/circuits"),
                    "; here a circuit is found on a task data set and scored as MIB scores it.",
                ],
                className="hint",
            ),
            html.Div(
                className="controls",
                children=[
                    picker,
                    paste,
                    row,
                    None if request else url_msg,
                    html.P(hint, className="hint"),
                    html.Div(id="cs-error", className="error"),
                    progress_block("cs", running=source is not None),
                ],
            ),
            exports_row(),
            html.Div(
                className="panel",
                children=[
                    html.Div(id="cs-accuracy", className="cs-accuracy"),
                    html.Div(id="cs-warning", className="error"),
                    html.Div(id="cs-scores", className="cs-scores"),
                ],
            ),
            html.Div(
                className="row",
                children=[
                    html.Div(
                        className="col panel",
                        children=[graph("cs-curve-graph", figure=empty_figure("Press Analyze."))],
                    ),
                    html.Div(
                        className="col panel",
                        children=[graph("cs-stability-graph", figure=empty_figure(""))],
                    ),
                ],
            ),
            html.Div(
                className="panel",
                children=[
                    html.Label("circuit size k", htmlFor="cs-size"),
                    dcc.Dropdown(
                        id="cs-size",
                        options=[],
                        value=float(view["k"]) if view.get("k") else None,
                        clearable=False,
                        style={"width": "22em"},
                    ),
                    graph("cs-circuit-graph", figure=empty_figure("")),
                ],
            ),
            html.Div(
                className="panel",
                children=[graph("cs-nodes-graph", figure=empty_figure(""))],
            ),
            html.Div(
                className="panel",
                children=[
                    html.H4("Examples (a click opens the pair on Circuits)"),
                    html.Ol(id="cs-examples"),
                ],
            ),
            dcc.Store(id="cs-source", data=source),
        ],
    )


def _result(store: ResultStore, source: dict[str, Any] | None) -> tuple[str, Any]:
    st = store.status(source)
    res = (st.get("result") or {}).get(CIRCUITS_SET)
    return st["status"], res


def register(app: Dash, store: ResultStore) -> None:
    client = store.client
    register_poll(app, store, "cs", ["cs-source"])
    register_cancel(app, "cs", kind="analysis", cancel=client.cancel_analysis)
    register_circuit_exports(app, store)
    register_view(
        app,
        client,
        PageView(
            name=NAME,
            prefix="cs",
            path=PATH,
            source="cs-source",
            inputs=(("cs-size", "value"),),
            view=lambda k: {"k": f"{float(k):g}"} if k else {},
        ),
    )

    @app.callback(
        Output("cs-jsonl", "value"),
        Output("cs-task", "value"),
        Output("cs-set-info", "children"),
        Input("cs-upload", "contents"),
        State("cs-upload", "filename"),
        prevent_initial_call=True,
    )
    def _upload(contents, filename):  # type: ignore[no-untyped-def]
        """A picked file is stored at once (``POST /api/task-sets``); the box then holds its id."""
        if not contents:
            return no_update, no_update, no_update
        data = base64.b64decode(contents.split(",", 1)[-1])
        try:
            stored = client.upload_task_set(filename=filename or "set.jsonl", data=data)
        except ApiError as exc:
            return no_update, UPLOAD, str(exc)
        return stored["id"], UPLOAD, stored_line(stored)

    @app.callback(
        Output("cs-source", "data"),
        Output("cs-error", "children"),
        Output("cs-set-info", "children", allow_duplicate=True),
        Input("cs-analyze", "n_clicks"),
        State("cs-model", "value"),
        State("cs-task", "value"),
        State("cs-jsonl", "value"),
        State("cs-n", "value"),
        State("cs-method", "value"),
        State("cs-ig-steps", "value"),
        State("cs-bootstrap", "value"),
        State("cs-random", "value"),
        prevent_initial_call=True,
    )
    def _submit(_n, model, task, jsonl, n, method, ig, boot, rnd):  # type: ignore[no-untyped-def]
        info = no_update
        try:
            if task == UPLOAD and (jsonl or "").strip() and not SET_ID.fullmatch(jsonl.strip()):
                stored = client.upload_task_set(text=jsonl)  # stored first, named by id
                jsonl, info = stored["id"], stored_line(stored)
            req = set_request(
                model=model,
                task=task,
                jsonl=jsonl,
                n=n,
                method=method,
                ig_steps=ig,
                bootstrap=boot,
                random_circuits=rnd,
            )
            job = client.submit_analysis(**req)["id"]
        except (ApiError, ValueError) as exc:
            return no_update, str(exc), info
        return {"kind": "analysis", "id": job, "request": req}, "", info

    @app.callback(
        Output("cs-accuracy", "children"),
        Output("cs-warning", "children"),
        Output("cs-scores", "children"),
        Output("cs-curve-graph", "figure"),
        Output("cs-stability-graph", "figure"),
        Output("cs-size", "options"),
        Output("cs-size", "value"),
        Output("cs-examples", "children"),
        Output("cs-nodes-graph", "figure"),
        Input("cs-job", "data"),
        State("cs-source", "data"),
        State("cs-size", "value"),
        State("cs-model", "value"),
    )
    def _views(_job, source, k, model):  # type: ignore[no-untyped-def]
        state, res = _result(store, source)
        if res is None:
            msg = "Press Analyze." if state == "none" else "Computing…"
            blank = empty_figure("")
            return "", "", "", empty_figure(msg), blank, [], None, [], blank
        sizes = F.size_options(res)
        values = [o["value"] for o in sizes]
        if k is None or float(k) not in values:
            k = values[len(values) // 2] if values else None
        req_model = (store.status(source).get("request") or {}).get("model") or model
        examples = [
            html.Li(
                html.A(
                    f"[{row['split']}] {row['clean']} → {row['answer']!r} vs {row['wrong']!r}",
                    href=pair_link(row, req_model),
                    className="cs-example",
                )
            )
            for row in F.example_rows(res, SHOWN_EXAMPLES)
        ]
        return (
            F.accuracy_line(res),
            res.get("warning") or "",
            F.scores_line(res),
            F.faithfulness_figure(res),
            F.stability_figure(res),
            sizes,
            k,
            examples,
            F.node_figure(res),
        )

    @app.callback(
        Output("cs-circuit-graph", "figure"),
        Input("cs-size", "value"),
        Input("cs-job", "data"),
        State("cs-source", "data"),
    )
    def _circuit(k, _job, source):  # type: ignore[no-untyped-def]
        _, res = _result(store, source)
        if res is None:
            return empty_figure("")
        return F.circuit_at(res, k)
