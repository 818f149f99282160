"""The routes of every job kind, made by one factory: submit, status and cancel (docs/api.md).

A job kind (text analyses, PE analyses, corpus analyses and joint maps, comparisons) keeps only what
is its own: its request model and its checks before queueing. ``job_routes`` adds the rest::

    job_routes(router, path="/api/compare", kind="compare", request_model=CompareRequest,
               check=check_compare, what="comparison",
               names=("submit_compare", "get_compare", "cancel_compare"))

    POST   /api/compare       202 {"id", "status"}: checked, then queued once per request hash
    GET    /api/compare/{id}  JobStatus: progress, the partial result, the result when finished
    DELETE /api/compare/{id}  {"id", "status", "cancelled"}: a queued or running job stops

A malformed or unknown id, or the id of another kind's job, is a 404 naming the kind.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, Response

from backend.api.common import not_found, raw_json
from backend.deps import QueueDep, StoreDep, WriteAccess
from backend.errors import error_responses
from backend.queue import JobQueue, Lookup
from backend.store import Store
from workers.core.contracts import JobStatus
from workers.core.ids import JOB_ID

# what a kind checks before its request is queued: raises the error the client gets (a 4xx)
Check = Callable[[Any, JobQueue, Store], None]

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


SECTIONS_QUERY = Query(
    None,
    max_length=4000,
    description="of a finished result, send only its small keys and these sections (comma-separated; a "
    "gallery's layer part by its partial key, `head-tsne-all@L3`; unknown names left out); `sections` names "
    'every one it holds (docs/api.md, "Sections of a finished result")',
)


def section_names(spec: str | None) -> list[str] | None:
    """``?sections=``: absent -> None (the whole result), ``a,b`` -> those names, empty -> none."""
    if spec is None:
        return None
    return list(dict.fromkeys(k.strip() for k in spec.split(",") if k.strip()))


def partial_fields(spec: str | None) -> bool | tuple[str, ...]:
    """``?partial=``: ``all`` (the default) -> True, ``none`` -> no key, ``a,b`` -> those keys."""
    if spec is None or spec.strip() in ("", "all"):
        return True
    if spec.strip() == "none":
        return ()
    return tuple(dict.fromkeys(k.strip() for k in spec.split(",") if k.strip()))


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
    if finished and state.sections is not None:
        parts["sections"] = state.sections
    partial = {} if finished else state.partial_raw
    raw = {"partial": "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in partial.items()) + "}"}
    if state.result_raw is not None and with_result:
        return raw_json(parts, {**raw, "result": state.result_raw})
    return raw_json({**parts, "result": None}, raw)


def job_status(
    queue: JobQueue,
    job_id: str,
    *,
    kind: str,
    what: str,
    partial: str | None = None,
    result: str = "all",
    sections: str | None = None,
) -> Response:
    """The status response of job ``job_id`` of ``kind``; 404 for a malformed or unknown id.

    ``partial``: the ``?partial=`` of the request (``partial_fields``); ``result``: its ``?result=``;
    ``sections``: its ``?sections=`` (``section_names``).
    """
    if not JOB_ID.fullmatch(job_id):
        raise not_found(what, job_id)
    with_result = result != "none"
    state = queue.lookup(
        job_id,
        with_partial=partial_fields(partial),
        with_result=with_result,
        sections=section_names(sections),
    )
    if state is None or state.kind != kind:
        raise not_found(what, job_id)
    if sections is None:
        state.sections = None  # named only to a client that asks for sections
    return status_response(job_id, state, with_result=with_result)


def cancel_job(queue: JobQueue, job_id: str, *, kind: str, what: str) -> dict:
    """Ask job ``job_id`` of ``kind`` to stop (``JobQueue.cancel``); its state before, and whether
    it was still queued or running. 404 for a malformed or unknown id."""
    if not JOB_ID.fullmatch(job_id):
        raise not_found(what, job_id)
    state = queue.cancel(job_id)
    if state is None or state.kind != kind:
        raise not_found(what, job_id)
    return {
        "id": job_id,
        "status": state.status,
        "cancelled": state.status in ("queued", "running"),
    }


def job_routes(
    router: APIRouter,
    *,
    path: str,
    kind: str,
    request_model: type,
    check: Check,
    what: str,
    names: tuple[str, str, str | None],
    docs: tuple[str | None, str | None, str | None] = (None, None, None),
    submit_errors: tuple[int, ...] = (404,),
    result_query: bool = False,
) -> None:
    """Add ``POST path``, ``GET path/{job_id}`` and ``DELETE path/{job_id}`` for jobs of ``kind``.

    ``request_model``: the body (a contract with ``job_id()`` and ``normalised()``); ``check``: what
    the kind checks before queueing; ``what``: the kind in words (404 messages); ``names``: the
    route functions' names, which make the operation ids (None: no cancel route); ``docs``: their
    docstrings (the operations' descriptions); ``submit_errors``: the error codes the submit route
    declares besides 422; ``result_query``: the status route takes ``?result=`` as well as
    ``?partial=``.
    """
    submit_name, status_name, cancel_name = names
    submit_doc, status_doc, cancel_doc = docs

    def add(route: Callable[..., Any], method: str, name: str, doc: str | None, **how: Any) -> None:
        route.__doc__ = doc  # the operation's description
        where = path if method == "POST" else f"{path}/{{job_id}}"
        router.add_api_route(where, route, methods=[method], name=name, **how)

    def submit(req: Any, queue: QueueDep, store: StoreDep) -> JSONResponse:
        check(req, queue, store)
        job_id = req.job_id()
        state = queue.submit(kind, job_id, req.normalised())
        return JSONResponse({"id": job_id, "status": state.status}, status_code=202)

    submit.__annotations__["req"] = request_model  # the body FastAPI validates and documents
    responses = error_responses(*submit_errors)
    add(
        submit,
        "POST",
        submit_name,
        submit_doc,
        status_code=202,
        responses=responses,
        dependencies=[WriteAccess],
    )

    def status_with_result(
        job_id: str,
        queue: QueueDep,
        partial: str = PARTIAL_QUERY,
        result: str = RESULT_QUERY,
        sections: str | None = SECTIONS_QUERY,
    ) -> Response:
        return job_status(
            queue, job_id, kind=kind, what=what, partial=partial, result=result, sections=sections
        )

    def status(job_id: str, queue: QueueDep, partial: str = PARTIAL_QUERY) -> Response:
        return job_status(queue, job_id, kind=kind, what=what, partial=partial)

    add(
        status_with_result if result_query else status,
        "GET",
        status_name,
        status_doc,
        response_model=JobStatus,
        responses=error_responses(404),
    )
    if cancel_name is None:
        return

    def cancel(job_id: str, queue: QueueDep) -> dict:
        return cancel_job(queue, job_id, kind=kind, what=what)

    add(
        cancel,
        "DELETE",
        cancel_name,
        cancel_doc,
        responses=error_responses(404),
        dependencies=[WriteAccess],
    )
