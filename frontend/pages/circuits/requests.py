"""The /circuits page's requests and URL state (docs/circuits.md): the flow job of the clean text,
the pair job (AtP and edge attribution), and the view a link or share holds; pure functions, no Dash."""

from __future__ import annotations

from typing import Any

from frontend.kit.forms import parse_target
from workers.analyses.circuits.spec import ATTRIBUTION_PATCHING, EDGE_ATTRIBUTION, INFORMATION_FLOW
from workers.core.notation import head_label

DEMO = "When Mary and John went to the store, John gave a drink to"
DEMO_CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"
PAGE_TOP_EDGES = (
    1000  # edges the pair job lists (larger circuits of the curve come with their strongest)
)


def edge_attribution_available() -> bool:
    """Whether this build's registry knows the edge-attribution analysis."""
    from workers.core import registry

    return EDGE_ATTRIBUTION in registry.kinds()


def flow_request(
    *,
    text: str,
    model: str,
    threshold: float | None = None,
    position: int | None = None,
    dtype: str = "float32",
) -> dict[str, Any]:
    """The information-flow job of the clean text (defaults left out, so links keep their id)."""
    options: dict[str, Any] = {"dtype": dtype or "float32"}
    if threshold is not None and float(threshold) != 0.04:
        options["threshold"] = float(threshold)
    if position is not None:
        options["position"] = int(position)
    return {"model": model, "text": text, "analyses": [INFORMATION_FLOW], "options": options}


def top_edges_for(facts: dict[str, Any]) -> int | None:
    """``PAGE_TOP_EDGES``, or a model's every edge when it has fewer (None: its shape is unknown, and
    the job's default applies)."""
    from workers.analyses.circuits.spec import edge_count

    if not facts.get("n_layers") or not facts.get("n_heads"):
        return None
    return min(
        PAGE_TOP_EDGES,
        edge_count(
            int(facts["n_layers"]), int(facts["n_heads"]), bool(facts.get("parallel_residual"))
        ),
    )


def pair_request(
    *,
    text: str,
    corrupted: str,
    model: str,
    target: str | None = None,
    real: bool = True,
    dtype: str = "float32",
    top_edges: int | None = None,
) -> dict[str, Any]:
    """The pair job: attribution patching (with the real head patching beside it when ``real``) and,
    where the build has it, edge attribution listing ``top_edges`` edges."""
    analyses = [ATTRIBUTION_PATCHING] + ([EDGE_ATTRIBUTION] if edge_attribution_available() else [])
    options: dict[str, Any] = {"corrupted": corrupted, "dtype": dtype or "float32"}
    if top_edges is not None and EDGE_ATTRIBUTION in analyses:
        options["top_edges"] = int(top_edges)
    if real:
        options["real"] = True
    parsed = parse_target(target)
    if parsed is not None:
        options["target"] = parsed
    return {"model": model, "text": text, "analyses": analyses, "options": options}


def pair_source(view: dict[str, Any]) -> dict[str, Any] | None:
    """The pair job a link or share names: its own share (``pair_share``) or its job (``pair``)."""
    if view.get("pair_share"):
        return {"kind": "share", "id": str(view["pair_share"])}
    if view.get("pair"):
        return {"kind": "analysis", "id": str(view["pair"])}
    return None


def number(value: Any, default: Any = None) -> Any:
    """A form box's number, or ``default`` when it is empty or not a number."""
    try:
        return float(value) if value not in (None, "") else default
    except (TypeError, ValueError):
        return default


def page_view(
    pair: dict[str, Any] | None, n: int | None, head: list[int] | None, layout: str | None = None
) -> dict[str, Any]:
    """The view a link or share holds beside the flow job: the pair job, N, the head, the layout."""
    key = "pair_share" if pair and pair.get("kind") == "share" else "pair"
    view = {key: (pair or {}).get("id"), "n": n, "head": head_label(*head) if head else None}
    if layout and layout != "head":  # the default left out: links keep their form
        view["layout"] = layout
    return view
