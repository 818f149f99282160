"""Edge attribution (EAP, EAP-IG), circuits and their faithfulness (docs/circuits.md).

For a clean text C and a corrupted text K of the same token length and the patching metric
``m = l[a] - l[b]`` at the last position, the score of the edge u -> v (graph: ``edge_run.Graph``) is
``(u_C - u_K) · ∂m/∂x_v``, the gradient at v's input taken on K's run (EAP, Syed et al. 2023) or
averaged over k runs whose input embeddings go in equal steps from K's to C's,
``X[0]_K + (i/k)(X[0]_C - X[0]_K)`` for i = 0..k-1 (EAP-IG, Hanna et al. 2024; k = 1 is EAP); every
score is divided by ``m_C - m_K``. The **circuit** of N edges: the N largest |score|, pruned to the
edges on a path from the input to the logits. Its **faithfulness**, ``(m_circuit - m_K)/(m_C - m_K)``,
comes from the edge-patched run (``SplitModel.patched``); the **curve** is the faithfulness over a
range of N. Cost: one plain forward of C and K, one forward and one backward of k rows, one
edge-patched forward per circuit, all batched.

Notebook use::

    from workers.analyses.circuits.edges import edge_attribution
    eap = edge_attribution(m, encode(m, clean), encode(m, corrupted), top_edges=200)
    eap["edges"][:5], eap["faithfulness"], eap["curve"]
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from workers.analyses.causal.interventions import pair_keys, pair_target
from workers.analyses.causal.views import TargetSpec
from workers.analyses.circuits.graph import INPUTS, Graph, Plain, SplitModel
from workers.analyses.circuits.patch_plan import paths
from workers.analyses.circuits.spec import CURVE_EDGES, MAX_IG_STEPS, MAX_TOP_EDGES, edge_rows
from workers.core.errors import CancelledError, HeadscopeError
from workers.core.memory import ModelFacts
from workers.core.progress import Progress, no_progress
from workers.models.adapters import Encoded

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel

logger = logging.getLogger(__name__)


def default_sizes(
    n_edges: int, count: int = 12, low: float = 0.001, high: float = 0.2
) -> list[int]:
    """``count`` edge counts log-spaced from ``low`` to ``high`` of ``n_edges`` (distinct, at least 1)."""
    raw = np.geomspace(low * n_edges, high * n_edges, count)
    return sorted({max(1, int(round(x))) for x in raw})


def prune(graph: Graph, src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
    """Which of the edges ``src -> tgt`` (writer indices; the logits ``n_writers``) lie on a path from the
    input to the logits through these edges only: the source is reachable from the input and the
    target reaches the logits. Every edge goes from a smaller index to a larger one (forward order)."""
    reach, back = paths(graph, src, tgt)  # the evaluation's reachability, heads uncoupled
    return reach[src] & back[tgt]


@contextmanager
def frozen(module: torch.nn.Module) -> Iterator[None]:
    """Within the block no weight of ``module`` requires a gradient, so the forward keeps only what the
    gradients of the activations need (not the inputs every weight's gradient would read)."""
    was = [(p, p.requires_grad) for p in module.parameters()]
    for p, _ in was:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in was:
            p.requires_grad_(flag)


def eap_scores(
    model: SplitModel,
    x0_k: torch.Tensor,
    x0_c: torch.Tensor,
    kwargs: list[dict[str, Any]],
    delta: torch.Tensor,
    metric: Callable[[torch.Tensor], torch.Tensor],
    *,
    steps: int,
    rows: int,
    progress: Progress,
    should_stop: Callable[[], bool] | None = None,
) -> torch.Tensor:
    """Flat scores [n_edges] (float64, not yet divided by ``m_C - m_K``): ``delta`` [W, n, d] is
    ``u_C - u_K`` per writer; the gradient at every reader is summed over the ``steps`` runs whose
    input is ``x0_k + (i/steps)(x0_c - x0_k)`` and divided by ``steps``. The gradients are reduced to
    scores inside the backward (a hook per reader group), so no gradient outlives its layer."""
    g = model.graph
    scores = torch.zeros(g.n_edges, dtype=torch.float64, device=delta.device)
    sh, sf, sl = g.blocks(scores)
    flat = delta.reshape(delta.shape[0], -1)  # [W, n*d]

    at = {"chunk": 0, "chunks": 1, "label": ""}

    def hook(kind: str, layer: int, grad: torch.Tensor) -> None:
        if kind == "heads":  # grad [B, 3, H, n, d]
            up = g.up_heads(layer)
            gs = grad.sum(0).reshape(3 * g.n_heads, -1)
            sh[layer] += (gs @ flat[:up].T).reshape(3, g.n_heads, up).double()
            part = (at["chunk"] + (g.n_layers - layer) / g.n_layers) / at["chunks"]
            progress(part, f"{at['label']}: backward at layer {layer}")
        elif kind == "ff":  # [B, n, d]
            up = g.up_ff(layer)
            sf[layer] += (flat[:up] @ grad.sum(0).reshape(-1)).double()
        else:  # logits: [B, d] at the last position
            sl.add_((delta[:, -1] @ grad.sum(0)).double())

    alphas = [i / steps for i in range(steps)]
    per = max(1, rows)
    at["chunks"] = -(-steps // per)
    for start in range(0, steps, per):
        if should_stop is not None and should_stop():
            raise CancelledError("edge attribution")
        at["chunk"] = start // per
        end = min(steps, start + per)
        at["label"] = (
            (
                f"EAP-IG: steps {start + 1}-{end} of {steps}"
                if end > start + 1
                else f"EAP-IG: step {end} of {steps}"
            )
            if steps > 1
            else "EAP"
        )
        a = torch.as_tensor(alphas[start : start + per], dtype=x0_k.dtype, device=x0_k.device)
        x0 = (x0_k[None] + a[:, None, None] * (x0_c - x0_k)[None]).requires_grad_(True)
        with torch.enable_grad(), frozen(model.loaded.model):
            run = model.plain(x0, kwargs, hooks=hook)
            # the gradient of the input only: the hooks see every reader's on the way, no weight gets one
            torch.autograd.grad(metric(run.logits).sum(), [x0])
        progress(
            end / steps, f"EAP-IG: {end}/{steps} steps done" if steps > 1 else "EAP: gradient done"
        )
    return scores / steps


def edge_attribution(
    loaded: LoadedModel,
    clean: Encoded,
    corrupted: Encoded,
    *,
    target: TargetSpec = None,
    top_edges: int = 200,
    ig_steps: int = 5,
    curve_sizes: list[int] | None = None,
    all_edges: bool = False,
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """EAP / EAP-IG (docs/circuits.md), the circuit of the top ``top_edges`` edges, its faithfulness
    and the faithfulness curve over ``curve_sizes`` (default ``default_sizes``). Keys:
    docs/results.md. ``top_edges`` beyond the model's edge count is cut to it (the API refuses it when asked for)."""
    t0, c0 = time.perf_counter(), time.process_time()
    progress = progress or no_progress
    if clean.n != corrupted.n:
        raise HeadscopeError(
            f"the clean text has {clean.n} tokens and the corrupted text {corrupted.n}; "
            f"edge attribution needs the same length"
        )
    model = SplitModel(loaded)
    g = model.graph
    ig_rows, _, patched_rows, _ = edge_rows(ModelFacts.of(loaded), clean.n)
    if not 1 <= ig_steps <= MAX_IG_STEPS:
        raise HeadscopeError(f"ig_steps must be 1-{MAX_IG_STEPS}, not {ig_steps}")
    if not 1 <= top_edges <= MAX_TOP_EDGES:
        raise HeadscopeError(f"top_edges must be 1-{MAX_TOP_EDGES}, not {top_edges}")
    top_edges = min(top_edges, g.n_edges)  # a small model has fewer edges than the default N
    sizes = sorted(set(curve_sizes)) if curve_sizes else default_sizes(g.n_edges)
    if sizes[-1] > g.n_edges or sizes[0] < 1:
        raise HeadscopeError(
            f"curve sizes must be 1-{g.n_edges} edges ({loaded.name} has {g.n_edges})"
        )

    x0_c, kwargs = model.capture(clean)
    x0_k, _ = model.capture(corrupted)
    with torch.no_grad():
        both = model.plain(torch.stack([x0_k, x0_c]), kwargs)
    ia, ib = pair_target(loaded, both.logits[1], both.logits[0], target)
    m_k, m_c = (float(both.logits[i, ia].double() - both.logits[i, ib].double()) for i in range(2))
    if m_c == m_k:
        raise HeadscopeError("the metric is the same on both texts: nothing to restore")
    progress(0.05, "edge attribution: clean and corrupted runs done")
    t_runs, c_runs = time.perf_counter(), time.process_time()

    def metric(logits: torch.Tensor) -> torch.Tensor:
        return logits[:, ia] - logits[:, ib]

    delta = both.writers[1] - both.writers[0]  # [W, n, d]
    raw = eap_scores(
        model,
        x0_k,
        x0_c,
        kwargs,
        delta,
        metric,
        steps=ig_steps,
        rows=ig_rows,
        progress=lambda f, m: progress(0.05 + 0.55 * f, m),
        should_stop=should_stop,
    )
    scores = raw / (m_c - m_k)
    t_scores, c_scores = time.perf_counter(), time.process_time()
    score_dtype = loaded.dtype
    scores_bytes = g.n_edges * torch.empty((), dtype=score_dtype).element_size()

    order = torch.argsort(scores.abs(), descending=True).cpu().numpy()
    values = scores.cpu().numpy()
    src_all, tgt_all, _ = g.edges_of(order[: max(sizes[-1], top_edges)])

    def circuit(n_top: int) -> np.ndarray:
        """Flat indices of the pruned top ``n_top`` edges."""
        keep = prune(g, src_all[:n_top], tgt_all[:n_top])
        return order[:n_top][keep]

    wanted = [top_edges, *sizes]
    kept = [circuit(n) for n in wanted]
    masks = torch.zeros(len(wanted), g.n_edges, dtype=loaded.dtype, device=x0_k.device)
    for row, idx in enumerate(kept):
        masks[row, torch.as_tensor(idx, device=masks.device)] = 1
    base = Plain(both.writers[:1], both.resid[:1], both.mid[:1], both.logits[:1])
    per = patched_rows
    faith = np.zeros(len(wanted))
    total = len(wanted)
    for start in range(0, total, per):
        if should_stop is not None and should_stop():
            raise CancelledError("edge attribution")
        end = min(total, start + per)

        def on_layer(layer: int, start: int = start, end: int = end) -> None:
            part = (start + (end - start) * (layer + 1) / g.n_layers) / total
            progress(
                0.6 + 0.4 * part,
                f"faithfulness: circuits {start + 1}-{end} of {total}, layer {layer}",
            )

        logits = model.patched(base, x0_c, masks[start:end], kwargs, on_layer=on_layer)
        faith[start:end] = (metric(logits).double().cpu().numpy() - m_k) / (m_c - m_k)
        progress(0.6 + 0.4 * end / total, f"faithfulness: {end}/{total} circuits evaluated")

    t_circuits, c_circuits = time.perf_counter(), time.process_time()
    listed = order if all_edges else order[:top_edges]
    ids = [g.writer_id(w) for w in range(g.n_writers)] + ["logits"]

    def described(flat: np.ndarray) -> list[dict[str, Any]]:
        src, tgt, inp = g.edges_of(flat)
        return [
            {
                "source": ids[s],
                "target": ids[t],
                "input": INPUTS[i] if i >= 0 else None,
                "score": float(values[e]),
            }
            for s, t, i, e in zip(
                src.tolist(), tgt.tolist(), inp.tolist(), flat.tolist(), strict=True
            )
        ]

    edges = described(listed)
    # a curve circuit larger than the listed edges: its strongest edges, so it can be drawn too
    curve_edges = [
        {"n_top": n, "edges": described(k[:CURVE_EDGES])}
        for n, k in zip(sizes, kept[1:], strict=True)
        if n > len(listed)
    ]
    position = {int(e): i for i, e in enumerate(order[:top_edges].tolist())}
    in_circuit = sorted(position[int(e)] for e in kept[0])
    c_src, c_tgt, _ = g.edges_of(kept[0])
    on = sorted(set(c_src.tolist()) | set(c_tgt.tolist()))
    progress(1.0, "edge attribution done")
    return {
        "method": "EAP-IG" if ig_steps > 1 else "EAP",
        "ig_steps": ig_steps,
        "nodes": g.nodes(),
        "parallel": g.parallel,
        "n_edges": g.n_edges,
        "edge_counts": g.counts(),
        "edges": edges,
        "all_edges": bool(all_edges),
        "top_edges": top_edges,
        "circuit": {
            "n_top": top_edges,
            "n_edges": len(in_circuit),
            "edges": in_circuit,
            "nodes": [ids[v] for v in on],
        },
        "faithfulness": float(faith[0]),
        "curve": [[n, float(f)] for n, f in zip(sizes, faith[1:], strict=True)],
        "curve_kept": [len(k) for k in kept[1:]],
        "curve_edges": curve_edges,
        "curve_sizes": sizes,
        "scores_bytes": int(scores_bytes),
        "scores_dtype": str(score_dtype).replace("torch.", ""),
        "seconds": round(time.perf_counter() - t0, 3),
        # the clean and corrupted runs; EAP(-IG)'s gradient runs; the circuits' edge-patched runs (wall and
        # this process' CPU seconds)
        "timings": {
            "runs_s": t_runs - t0,
            "scores_s": t_scores - t_runs,
            "circuits_s": t_circuits - t_scores,
            "runs_cpu_s": c_runs - c0,
            "scores_cpu_s": c_scores - c_runs,
            "circuits_cpu_s": c_circuits - c_scores,
        },
        **pair_keys(loaded, corrupted, ia, ib, m_c, m_k),
    }
