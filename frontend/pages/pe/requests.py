"""The PE explorer's request and state (docs/positional.md): the checkpoints the page keeps, the
``POST /api/pe-analyses`` body of its controls, and what a link or share restores; no Dash."""

from __future__ import annotations

from typing import Any

from frontend.kit.data import ResultStore

REFERENCES = [
    ("none", "none"),
    ("2d-fixed", "2d-fixed (grid)"),
    ("1d-fixed", "1d-fixed"),
    ("random", "random N(0, σ²)"),
    ("checkpoint", "another checkpoint"),
]
PARTITIONS = [("none", "none"), ("rows", "grid rows"), ("columns", "grid columns"), ("csv", "CSV")]


def flag(view: dict[str, Any], key: str, default: bool) -> bool:
    """A view's yes/no key (``1``/``0`` in a URL, a bool in a share), ``default`` when unset."""
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


def restore(
    store: ResultStore, query: dict[str, str], share: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """The page's source, request and view, and the checkpoints it lists, from a share or the URL."""
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
    return source, request, view, entries


def upload_error(name: str, message: str) -> str:
    """An upload's error line: the file's name once (the API's reasons often start with it).

    >>> upload_error("README.md", "README.md: not a checkpoint")
    'README.md: not a checkpoint'
    """
    return message if message.startswith(f"{name}:") else f"{name}: {message}"
