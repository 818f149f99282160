"""A circuit found on a task data set and scored as MIB scores it (docs/circuits.md, "Circuits on a task
data set"; SPEC 14): the model's accuracy on the set, EAP / EAP-IG scores on the discovery half,
faithfulness at MIB's ten sizes on the held-out half with CPR and CMD, random circuits beside it, and the
circuit's bootstrap stability.

Notebook use::

    from workers.analyses.circuits.tasks import builtin
    from workers.analyses.circuits.set_circuits import circuits_on_set
    res = circuits_on_set(m, builtin("ioi", m.tokenizer, 100))
    res["accuracy"], res["cpr"], res["cmd"], res["random"]["cpr"], res["stability"]
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from workers.analyses.circuits.graph import INPUTS, SplitModel
from workers.analyses.circuits.set_scores import (
    MIB_SIZES,
    Stop,
    cmd,
    cpr,
    example_scores,
    faithfulness,
    patched_metrics,
    prepare,
    set_scores,
    size_of,
    stability,
    top_masks,
)
from workers.analyses.circuits.spec import MAX_IG_STEPS
from workers.analyses.circuits.tasks import Example
from workers.core.errors import HeadscopeError
from workers.core.progress import Progress, no_progress, scaled

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel

MIB_ACCURACY = 0.75  # MIB scores a model on a task only at this accuracy or above


def split(n: int, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """The seeded discovery / evaluation split of ``n`` examples (``fraction`` to discovery; each side at
    least one example)."""
    if n < 2:
        raise HeadscopeError(
            f"a task set needs at least 2 examples (one to find, one to test); it has {n}"
        )
    order = np.random.default_rng(seed).permutation(n)
    cut = min(n - 1, max(1, int(round(fraction * n))))
    return sorted(order[:cut].tolist()), sorted(order[cut:].tolist())


def edge_list(model: SplitModel, scores: np.ndarray, order: np.ndarray) -> list[dict[str, Any]]:
    """The edges ``order`` (flat indices) with the model's node names and their scores."""
    g = model.graph
    src, tgt, inp = g.edges_of(order)
    ids = [g.writer_id(w) for w in range(g.n_writers)] + ["logits"]
    return [
        {
            "source": ids[s],
            "target": ids[t],
            "input": INPUTS[i] if i >= 0 else None,
            "score": float(scores[e]),
        }
        for s, t, i, e in zip(src.tolist(), tgt.tolist(), inp.tolist(), order.tolist(), strict=True)
    ]


def _sd(x: Any) -> float:
    return float(np.std(x, ddof=1)) if len(x) > 1 else 0.0


def circuits_on_set(
    loaded: LoadedModel,
    examples: Sequence[Example],
    *,
    ig_steps: int = 5,
    discovery: float = 0.5,
    seed: int = 0,
    bootstrap: int = 10,
    random: int = 5,
    top_edges: int = 200,
    progress: Progress | None = None,
    should_stop: Stop = None,
) -> dict[str, Any]:
    """Keys: docs/results.md, ``circuits-set``. ``ig_steps`` 1 is EAP."""
    t0 = time.perf_counter()
    progress = progress or no_progress
    if not 1 <= ig_steps <= MAX_IG_STEPS:
        raise HeadscopeError(f"ig_steps must be 1-{MAX_IG_STEPS}, not {ig_steps}")
    if not 0 < discovery < 1:
        raise HeadscopeError(f"the discovery fraction must be in (0, 1), not {discovery}")
    disc, held = split(len(examples), discovery, seed)
    model = SplitModel(loaded)
    g = model.graph
    p = prepare(loaded, examples, model)
    progress(0.02, f"{len(examples)} examples tokenised: {len(p.groups)} lengths")

    raw, dc, dk = example_scores(
        p, disc, steps=ig_steps, progress=scaled(progress, 0.02, 0.5), should_stop=should_stop
    )
    scores = set_scores(raw, dc, dk)
    ks = list(MIB_SIZES)
    sizes = [size_of(k, g.n_edges) for k in ks]
    runs = sizes[:-1]  # every edge is the clean run exactly: f(1) = 1, no run needed
    by_signed = np.argsort(-scores, kind="stable")
    by_abs = np.argsort(-np.abs(scores), kind="stable")
    rng = np.random.default_rng(seed + 1)
    rand_orders = [rng.permutation(g.n_edges) for _ in range(random)]
    masks = np.concatenate(
        [top_masks(o, runs, g.n_edges) for o in (by_signed, by_abs, *rand_orders)]
    )
    progress(
        0.5,
        f"evaluation: {len(held)} held-out examples x {masks.shape[0]} circuits ({len(ks)} sizes)",
    )
    got, hc, hk = patched_metrics(
        p, held, masks, progress=scaled(progress, 0.5, 0.97), should_stop=should_stop
    )
    f = np.append(
        faithfulness(got, hc, hk).reshape(-1, len(runs)), np.ones((2 + random, 1)), axis=1
    )
    progress(0.97, "stability: bootstrap resamples")
    stab = stability(raw, dc, dk, sizes, resamples=bootstrap, seed=seed + 2) if bootstrap else []

    m_c = np.concatenate([dc, hc])
    m_k = np.concatenate([dk, hk])
    accuracy = float((m_c > 0).mean())
    r_cpr = [cpr(ks, c) for c in f[2:]]
    r_cmd = [cmd(ks, c) for c in f[2:]]
    listed = by_abs[: min(top_edges, g.n_edges)]
    progress(1.0, "circuits on a set done")
    return {
        "method": "EAP-IG" if ig_steps > 1 else "EAP",
        "ig_steps": ig_steps,
        "accuracy": accuracy,
        "logit_diff": float(m_c.mean()),
        "logit_diff_corrupted": float(m_k.mean()),
        "warning": (
            f"accuracy {accuracy:.0%} is below MIB's {MIB_ACCURACY:.0%}: the model does not do this task "
            "well enough for its circuit to be scored as MIB scores one"
            if accuracy < MIB_ACCURACY
            else None
        ),
        "n_examples": {"discovery": len(disc), "evaluation": len(held)},
        "discovery_examples": disc,
        "mean_difference": float((dc - dk).mean()),
        "sizes": ks,
        "size_edges": sizes,
        "curve": [[k, float(v)] for k, v in zip(ks, f[0], strict=True)],
        "curve_abs": [[k, float(v)] for k, v in zip(ks, f[1], strict=True)],
        "cpr": cpr(ks, f[0]),
        "cmd": cmd(ks, f[1]),
        "random": {
            "seeds": random,
            "curve": [[k, float(v)] for k, v in zip(ks, f[2:].mean(0), strict=True)]
            if random
            else [],
            "cpr": float(np.mean(r_cpr)) if random else None,
            "cmd": float(np.mean(r_cmd)) if random else None,
            "spread": {
                "cpr": _sd(r_cpr),
                "cmd": _sd(r_cmd),
                "curve": [[k, _sd(f[2:, i])] for i, k in enumerate(ks)] if random else [],
            },
        },
        "stability": [[k, m, s] for k, (m, s) in zip(ks, stab, strict=True)] if bootstrap else [],
        "bootstrap": bootstrap,
        "edges": edge_list(model, scores, listed),
        "n_edges_total": g.n_edges,
        "nodes": g.nodes(),
        "seconds": round(time.perf_counter() - t0, 3),
    }
