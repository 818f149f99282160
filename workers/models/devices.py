"""The one place the compute device is chosen (models, t-SNE, health reports)."""

from __future__ import annotations

import torch

from workers.core.settings import get_settings


def resolve_device(name: str | torch.device | None = None) -> torch.device:
    """``name`` if given, else the setting ``HEADSCOPE_DEVICE`` (``cpu``, ``cuda``, ``cuda:1``), else
    cuda when available, else cpu."""
    if name is not None and str(name):
        return torch.device(name)
    wanted = get_settings().device
    if wanted:
        return torch.device(wanted)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
