"""What ``headscope analyze --analysis decomposition`` prints (``workers.core.report``)."""

from __future__ import annotations

from typing import Any

from workers.core.report import num, strongest_heads


def decomposition(section: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """The reconstruction error, the terms' mean importance at the last state, the strongest heads."""
    abs_err = [e for e in section.get("max_abs_error") or [] if e is not None]
    rel_err = [e for e in section.get("max_rel_error") or [] if e is not None]
    states = section.get("states") or list(range(len(abs_err)))
    lines = [
        f"reconstruction error (terms summed vs X[l], over {len(states)} states): "
        f"max {num(max(abs_err, default=None))}, relative {num(max(rel_err, default=None))}"
    ]
    terms, mean = section.get("terms") or [], section.get("mean") or []
    if terms and mean:
        last = mean[-1]
        lines.append(
            f"mean term importance at X[{states[-1] if states else len(mean) - 1}]: "
            + ", ".join(f"{t} {num(v, 2)}" for t, v in zip(terms, last, strict=False))
        )
    state = section.get("head_state")
    by_state = section.get("head_importance_mean") or []
    if state is not None and 0 <= int(state) < len(by_state):
        lines.append(f"most important heads in X[{state}]: {strongest_heads(by_state[int(state)])}")
    return lines
