"""The PE explorer's list of checkpoints (docs/positional.md): uploads and the demos added (each file's
error on its own line), one removed, each one's tensor chosen; and a partition CSV read from a file."""

from __future__ import annotations

import base64

from dash import ALL, Dash, Input, Output, State, ctx, dcc, html, no_update

from frontend.kit.api_client import ApiError
from frontend.kit.data import ResultStore
from frontend.pages.pe.requests import checkpoint_entry, upload_error


def register_checkpoints(app: Dash, store: ResultStore) -> None:
    """The callbacks of the checkpoint list and the partition CSV upload."""
    client = store.client

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
