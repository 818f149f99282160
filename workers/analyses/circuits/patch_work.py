"""The evaluation's working memory and row runs (``patch_plan.patched_sparse``; docs/circuits.md,
"Circuits on a task data set", the evaluation's cost)."""

from __future__ import annotations

import torch


def buffer(
    work: dict[str, torch.Tensor] | None, name: str, numel: int, like: torch.Tensor
) -> torch.Tensor:
    """A flat tensor of ``numel`` elements (``like``'s dtype and device; contents undefined), kept in
    ``work`` under ``name`` and reused by later calls: the evaluation's large arrays (the changes,
    a layer's mixes) are hundreds of MB each, which the allocator would otherwise map afresh for
    every call and layer, each page faulted in and zeroed by the kernel again (measured: a fifth of
    the evaluation's CPU time went to the system)."""
    if work is None:
        return like.new_empty(numel)
    have = work.get(name)
    if (
        have is None
        or have.numel() < numel
        or have.dtype != like.dtype
        or have.device != like.device
    ):
        work.pop(name, None)  # freed before the larger one is taken
        have = work[name] = like.new_empty(numel)
    return have[:numel]


def spans(
    rows: torch.Tensor, R: int, most: int = 8
) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]]] | None:
    """The runs of consecutive rows in ``rows`` (ascending) as (index in ``rows``, first, end) and the
    gaps between them in ``range(R)`` as (first, end); None when there are more than ``most`` runs."""
    at = rows.tolist()
    runs: list[tuple[int, int, int]] = []
    for i, r in enumerate(at):
        if runs and runs[-1][2] == r:
            runs[-1] = (runs[-1][0], runs[-1][1], r + 1)
        else:
            if len(runs) == most:
                return None
            runs.append((i, r, r + 1))
    gaps, prev = [], 0
    for _, a, b in runs:
        if a > prev:
            gaps.append((prev, a))
        prev = b
    if prev < R:
        gaps.append((prev, R))
    return runs, gaps
