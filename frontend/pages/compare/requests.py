"""The /compare page's request and URL state (docs/compare.md): the comparison job, the selected pair
(``cell``), the picked corpus text and the text whose word-level maps a pair shows; no Dash."""

from __future__ import annotations

from typing import Any

from frontend.figures import compare as F
from frontend.kit.data import ResultStore

MAX_PICK = 1000  # texts listed in the corpus-text picker (the first ones of a larger corpus)
DEFAULT_TEXT = (
    "The old lighthouse keeper climbed the stairs every night, and every night the lamp "
    "answered him with the same slow light."
)


def compare_request(
    *,
    model_a: str,
    model_b: str,
    source: str,
    text: str | None,
    corpus: str | None,
    max_tokens: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model_a": model_a,
        "model_b": model_b,
        "max_tokens": int(max_tokens or 128),
    }
    if source == "corpus":
        body["corpus"] = corpus
    else:
        body["text"] = text or ""
    return body


def cell_of(value: Any) -> tuple[int, int] | None:
    """``"a-b"`` (the URL's form) or ``[a, b]`` -> (a, b)."""
    if isinstance(value, str) and value.count("-") == 1:
        try:
            return F.parse_cell([int(x) for x in value.split("-")])
        except ValueError:
            return None
    return F.parse_cell(value)


def restore(
    store: ResultStore, query: dict[str, str], share: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, dict[str, Any], dict[str, Any]]:
    """The page's source, its request and its view, from a share or the URL's job and view keys."""
    source, request, view = None, {}, {}
    if share is not None:
        source = {"kind": "share", "id": share["id"]}
        request, view = share.get("request") or {}, dict(share.get("view") or {})
    elif query.get("analysis"):
        source = {"kind": "compare", "id": query["analysis"]}
        request = store.status(source).get("request") or {}
    view.update({k: v for k, v in query.items() if k in ("cell", "text")})
    return source, request, view


def text_index(value: Any) -> int:
    """The picked corpus text (URL: a string) as an index; 0 when unset or not one."""
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def maps_text(result: dict[str, Any], pick: Any, typed: str | None) -> str:
    """The text whose word-level maps a click shows: the compared text, or the picked text of the
    compared corpus (a result stored before texts were kept: the text box's)."""
    texts = result.get("texts")
    if texts:
        return texts[min(text_index(pick), len(texts) - 1)]
    return result.get("text") or typed or DEFAULT_TEXT


def text_options(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The corpus-text picker's options: ``i: the text's start`` for the first ``MAX_PICK`` texts."""
    return [
        {"label": f"{i}: {t[:100]}{'…' if len(t) > 100 else ''}", "value": i}
        for i, t in enumerate((result.get("texts") or [])[:MAX_PICK])
    ]


def page_view(cell: Any, pick: Any) -> dict[str, Any]:
    """The URL's and a share's view: the selected pair and the picked corpus text (when not the first)."""
    view: dict[str, Any] = {"cell": "-".join(map(str, cell_of(cell)))} if cell_of(cell) else {}
    if text_index(pick) > 0:
        view["text"] = text_index(pick)
    return view


def listed(cell: tuple[int, int] | None) -> list[int] | None:
    """A pair as the cell store holds it (a list), or None."""
    return list(cell) if cell else None
