"""``POST /api/shares`` and ``GET /api/shares/{id}``: links that reopen a view without recomputing."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from backend.api.common import not_found, raw_json
from backend.api.jobs import SECTIONS_QUERY, section_names
from backend.deps import QueueDep, SettingsDep, StoreDep, WriteAccess
from backend.errors import error_responses
from workers.core.contracts import ShareRequest
from workers.core.errors import GoneError, NotReadyError, TooLargeError
from workers.core.ids import JOB_ID
from workers.core.jsonable import dumps

router = APIRouter(tags=["shares"])


@router.post(
    "/api/shares",
    status_code=201,
    dependencies=[WriteAccess],
    responses=error_responses(404, 409, 413),
)
def create_share(
    req: ShareRequest, queue: QueueDep, store: StoreDep, settings: SettingsDep
) -> dict:
    """A share of a finished analysis (text, PE or corpus) and the view to restore."""
    kind, target = next(
        (k, t)
        for k, t in (
            ("analysis", req.analysis_id),
            ("pe", req.pe_analysis_id),
            ("corpus", req.corpus_analysis_id),
            ("compare", req.compare_id),
        )
        if t is not None
    )
    what = {
        "analysis": "analysis",
        "pe": "PE analysis",
        "corpus": "corpus analysis",
        "compare": "comparison",
    }[kind]
    if len(dumps(req.view)) > settings.max_view_bytes:
        raise TooLargeError(f"the view is larger than {settings.max_view_bytes:,} bytes")
    if not JOB_ID.fullmatch(target):
        raise not_found(what, target)
    state = queue.lookup(target, with_partial=False)  # persists a finished result to disk
    if state is None or state.kind != kind:
        raise not_found(what, target)
    if state.status != "finished" or not store.has_result(target):
        raise NotReadyError(f"the {what} {target} has not finished (status: {state.status})")
    store.touch_result(target)
    share = store.create_share(kind=kind, target=target, view=req.view)
    page = {"analysis": "/", "pe": "/pe", "corpus": "/corpus", "compare": "/compare"}[kind]
    return {"id": share["id"], "url": f"{page}?share={share['id']}"}


@router.get("/api/shares/{share_id}", responses=error_responses(404, 410))
def open_share(
    share_id: str, store: StoreDep, result: str | None = None, sections: str | None = SECTIONS_QUERY
) -> Response:
    """``{"id", "kind", "view", "request", "result"}`` from disk; never recomputes. ``?result=none``:
    without the result (its request only), for a page that lays itself out before it draws;
    ``?sections=``: only the small keys and those sections, ``sections`` naming all it holds (as
    ``GET /api/analyses/{id}``)."""
    share = store.read_share(share_id)
    if share is None:
        raise not_found("share", share_id)
    gone = GoneError(f"the result behind share {share_id} is no longer stored")
    parts = {
        "id": share["id"],
        "kind": share["kind"],
        "target": share["target"],
        "view": share["view"],
        "created_at": share["created_at"],
    }
    if result == "none":
        request = store.result_request(share["target"])
        if request is None:
            raise gone
        return raw_json({**parts, "request": request}, {})
    stored = store.read_result(share["target"], sections=section_names(sections))
    if stored is None:
        raise gone
    meta, raw = stored
    if sections is not None and meta["sections"] is not None:
        parts["sections"] = meta["sections"]
    return raw_json({**parts, "request": meta["request"]}, {"result": raw})
