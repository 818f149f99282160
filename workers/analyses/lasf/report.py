"""What ``headscope analyze --analysis lasf`` prints (``workers.core.report``)."""

from __future__ import annotations

from typing import Any

from workers.core.report import num


def lasf(section: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """The layer's fields, how well they rebuild the layer, and the R² each field's ablation loses."""
    lines = [
        f"{section.get('n_fields', '?')} fields ({section.get('mode', '?')}, kernel "
        f"{section.get('kernel', '?')}) in place of layer {section.get('replaced_layer', '?')}: "
        f"R² {num(section.get('r2'))}"
    ]
    lost = section.get("ablation") or []
    if lost:
        lines.append(
            "R² lost when each field is zeroed: "
            + ", ".join(f"Φ{i} {num(a, 2)}" for i, a in enumerate(lost))
        )
    kl = (section.get("field_tsne") or {}).get("kl") or []
    if kl:
        lines.append("field t-SNE KL: " + ", ".join(f"Φ{i} {num(k)}" for i, k in enumerate(kl)))
    return lines
