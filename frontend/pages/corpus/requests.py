"""The corpus page's request and URL state (docs/corpus.md): the corpus job of the controls and what
a link or share restores; no Dash."""

from __future__ import annotations

from typing import Any

from frontend.kit.data import ResultStore

VIEW_KEYS = ("head", "color", "stat")


def corpus_request(
    *, model: str, corpus: str, max_tokens: Any, keep_special: bool
) -> dict[str, Any]:
    """The ``POST /api/corpus-analyses`` body for the page's controls."""
    return {
        "model": model,
        "corpus": corpus,
        "options": {"max_tokens": int(max_tokens or 128), "keep_special": bool(keep_special)},
    }


def restore(
    store: ResultStore, query: dict[str, str], share: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, dict[str, Any], dict[str, Any]]:
    """The page's source, its request and its view, from a share or the URL's job and view keys."""
    source, request, view = None, {}, {}
    if share is not None:
        source = {"kind": "share", "id": share["id"]}
        request, view = share.get("request") or {}, dict(share.get("view") or {})
    elif query.get("analysis"):
        source = {"kind": "corpus", "id": query["analysis"]}
        request = store.status(source).get("request") or {}
    view.update({k: v for k, v in query.items() if k in VIEW_KEYS})
    return source, request, view
