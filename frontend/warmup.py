"""The page server's one-time costs paid before ``headscope serve`` says it is ready.

A fresh page server answered its first page's callbacks several times slower than the next page's
(docs/dashboard.md, "A fresh page server warmed up"): modules the callbacks import when first called
(the pages' helpers, plotly's figure classes and validators), Dash's first-request setup, the
API's first answers in the same process (the models' list), the first JSON encodes, the first
connection of the page server to the API. ``warm_up`` asks the running server, over HTTP, for what
a stored result's link asks first: the page, Dash's layout and callbacks, the router's answer, the
first row's picture and an empty gallery (a figure built and encoded), for an analysis that does
not exist, so nothing is read or computed.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from frontend.app import PREVIEW_PATH

WARM_ID = "0" * 32  # an analysis id that is never stored (ids are random hex)
LINK = f"?analysis={WARM_ID}"


def _callback(outputs: list[tuple[str, str]], inputs: list[tuple[str, str, Any]], state: list[tuple[str, str, Any]]) -> dict[str, Any]:  # fmt: skip
    """A ``_dash-update-component`` body as dash-renderer sends it."""

    def spec(items: list[tuple[str, str, Any]]) -> list[dict[str, Any]]:
        return [{"id": i, "property": p, "value": v} for i, p, v in items]

    outs = [{"id": i, "property": p} for i, p in outputs]
    return {
        "output": (
            f"{outputs[0][0]}.{outputs[0][1]}"
            if len(outputs) == 1
            else ".." + "...".join(f"{i}.{p}" for i, p in outputs) + ".."
        ),
        "outputs": outs[0] if len(outputs) == 1 else outs,
        "inputs": spec(inputs),
        "changedPropIds": [f"{inputs[0][0]}.{inputs[0][1]}"],
        "state": spec(state),
    }


REQUESTS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", f"/{LINK}", None),
    ("GET", "/_dash-layout", None),
    ("GET", "/_dash-dependencies", None),
    ("GET", f"/{PREVIEW_PATH}{LINK}", None),
    (  # the router: the text page's layout for a stored result's link
        "POST",
        "/_dash-update-component",
        _callback(
            [("page-content", "children")], [("url", "pathname", "/")], [("url", "search", LINK)]
        ),  # fmt: skip
    ),
    (  # the gallery, empty: a figure built and encoded
        "POST",
        "/_dash-update-component",
        _callback(
            [
                ("head-gallery", "figure"),
                ("text-gallery-page", "options"),
                ("text-gallery-page", "value"),
                ("text-gallery-key", "data"),
            ],
            [("text-gallery-tick", "data", 1)],
            [
                ("text-layers", "value", None),
                ("text-gallery-page", "value", 0),
                ("text-source", "data", None),
                ("text-gallery-key", "data", None),
                ("text-job", "data", None),
            ],
        ),
    ),
]


def warm_up(client: httpx.Client) -> dict[str, Any]:
    """Ask the page server (``client``: its base URL) for what a stored result's link asks first;
    ``{"s": seconds taken, "status": [each answer's status]}``. Raises nothing: a failed request is
    a status of 0 (the server answers the user's requests as before)."""
    t0 = time.perf_counter()
    status = []
    for method, path, body in REQUESTS:
        try:
            r = client.request(
                method,
                path,
                content=None if body is None else json.dumps(body),
                headers=None if body is None else {"Content-Type": "application/json"},
            )
            status.append(r.status_code)
        except httpx.HTTPError:
            status.append(0)
    return {"s": time.perf_counter() - t0, "status": status}
