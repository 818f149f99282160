"""Helpers the routers share: JSON responses assembled around stored raw result JSON."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Query
from fastapi.responses import Response

from backend.queue import Lookup
from workers.core.errors import NotFoundError
from workers.core.jsonable import dumps


def raw_json(parts: dict[str, Any], raw: dict[str, str], *, status_code: int = 200) -> Response:
    """A JSON object of ``parts`` (serialised here) and ``raw`` (already JSON text, spliced in).

    Stored results are megabytes; splicing them avoids parsing and re-serialising on every read.
    """
    items = [f"{json.dumps(k)}:{dumps(v)}" for k, v in parts.items()]
    items += [f"{json.dumps(k)}:{v}" for k, v in raw.items()]
    return Response(
        "{" + ",".join(items) + "}", status_code=status_code, media_type="application/json"
    )


def partial_fields(spec: str | None) -> bool | tuple[str, ...]:
    """``?partial=``: ``all`` (the default) -> True, ``none`` -> no key, ``a,b`` -> those keys."""
    if spec is None or spec.strip() in ("", "all"):
        return True
    if spec.strip() == "none":
        return ()
    return tuple(dict.fromkeys(k.strip() for k in spec.split(",") if k.strip()))


PARTIAL_QUERY = Query(
    "all",
    max_length=2000,
    description="which keys of `partial` to send: `all`, `none` (only their names, in `partial_keys`), or a "
    "comma-separated list; a client that keeps what it has read asks only for the keys it lacks",
)


RESULT_QUERY = Query(
    "all",
    pattern="^(all|none)$",
    description="`none`: leave `result` out (null) even once the job has finished; a client that read every "
    "section from `partial` while the job ran asks only whether it has finished",
)


def status_response(job_id: str, state: Lookup, *, with_result: bool = True) -> Response:
    """``JobStatus`` (docs/api.md) for a looked-up job; the partial sections spliced in as stored
    (``with_result=False``: the result left out)."""
    finished = state.status == "finished"
    parts = {
        "id": job_id,
        "status": state.status,
        "progress": state.progress,
        "message": state.message,
        "partial_keys": [] if finished else state.partial_keys,
        "error": state.error,
        "request": state.request,
    }
    partial = {} if finished else state.partial_raw
    raw = {"partial": "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in partial.items()) + "}"}
    if state.result_raw is not None and with_result:
        return raw_json(parts, {**raw, "result": state.result_raw})
    return raw_json({**parts, "result": None}, raw)


def not_found(what: str, ident: str) -> NotFoundError:
    return NotFoundError.of(what, ident)


def job_status(
    queue: Any,
    job_id: str,
    *,
    kind: str,
    what: str,
    pattern: Any,
    partial: str | None = None,
    result: str = "all",
) -> Response:
    """The status response of job ``job_id`` of ``kind``; 404 for a malformed or unknown id.

    ``partial``: the ``?partial=`` of the request (``partial_fields``); ``result``: its ``?result=``.
    """
    if not pattern.fullmatch(job_id):
        raise not_found(what, job_id)
    with_result = result != "none"
    state = queue.lookup(job_id, with_partial=partial_fields(partial), with_result=with_result)
    if state is None or state.kind != kind:
        raise not_found(what, job_id)
    return status_response(job_id, state, with_result=with_result)
