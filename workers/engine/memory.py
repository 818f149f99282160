"""Memory a text analysis needs, estimated before it starts (issue 10), and the budget it must fit.

The estimate follows what the streamed pipeline holds: the weights; one layer's eager attention at a
time during the forward pass (scores, softmax, a float64 host copy of the chosen heads); per view
what it keeps. A request that cannot fit fails at once with the estimate and the budget in its
message, instead of running out of memory half-way.

Torch-free, so the backend can call it too. The budget is ``HEADSCOPE_MEMORY_BUDGET_GB`` or,
unset, the machine's physical memory.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

# the budget and its error live below the analysis core, torch-free, for the API (workers/core/budget.py)
from workers.core.budget import GIB, RUNTIME, MemoryBudgetError, memory_budget

logger = logging.getLogger(__name__)

F8 = 8  # float64 bytes (P matrices, t-SNE, host copies)
# the block the causal views read the vocabulary in (workers/analyses/causal/vocab.py): [rows, vocabulary rows]
VOCAB_ROWS, VOCAB_CHUNK = (
    512,
    4096,
)  # float32 logits of a block: 8 MB; the W_U block: 10 MB at d = 640


@dataclass
class ModelFacts:
    """The shapes the estimate needs (``workers.models.families.config_facts`` + parameter count)."""

    n_layers: int
    n_heads: int
    hidden: int
    intermediate: int
    n_params: int
    dtype_bytes: int = 4
    head_dim: int = 0
    vocab: int = 0

    @classmethod
    def of(cls, loaded: Any) -> ModelFacts:
        cfg = loaded.config
        hidden = int(cfg.get("hidden_size") or cfg.get("n_embd"))
        inter = int(cfg.get("intermediate_size") or cfg.get("n_inner") or 4 * hidden)
        head_dim = int(cfg.get("head_dim") or hidden // loaded.n_heads)
        return cls(
            loaded.n_layers,
            loaded.n_heads,
            hidden,
            inter,
            loaded.n_params,
            loaded.dtype.itemsize,
            head_dim,
            int(cfg.get("vocab_size") or 0),
        )


@dataclass
class Estimate:
    """Peak bytes of a request: the weights plus the largest stage; ``parts`` names every item."""

    total: int
    parts: dict[str, int] = field(default_factory=dict)

    def check(self, budget: int | None = None, *, what: str = "this request") -> None:
        budget = memory_budget() if budget is None else budget
        if self.total > budget:
            raise MemoryBudgetError(estimate=self.total, budget=budget, parts=self.parts, what=what)


def _count(sel: Any, size: int) -> int:
    return size if sel in (None, "all") else (len(sel) if isinstance(sel, list) else 1)


def _causal_stages(
    facts: ModelFacts,
    n: int,
    analyses: list[str],
    options: dict[str, Any],
    *,
    forward: int,
    hidden_states: int,
) -> dict[str, int]:
    """The causal views (docs/causal.md): logits [n, vocabulary] in the model's dtype and float64,
    the attribution's per-head outputs, the batched runs of ablation and patching."""
    L, H, d, b, V = facts.n_layers, facts.n_heads, facts.hidden, facts.dtype_bytes, facts.vocab
    n = n + int(options.get("continue_tokens", 16)) if "continue" in analyses else n
    logits = n * V * (b + 3 * F8)  # the logits, their float64 log-softmax and its top-k copy
    out: dict[str, int] = {}
    if {"predictions", "logit-lens"} & set(
        analyses
    ):  # the vocabulary read in blocks (analysis/vocab.py)
        blocks = (
            VOCAB_ROWS * VOCAB_CHUNK * (b + 2 * F8 + 1)
        )  # a block's logits, its float64 exponentials, a comparison
        lens = (
            2 * (L + 1) * n * d * b if "logit-lens" in analyses else 0
        )  # every state through the final norm
        out["predictions"] = forward + hidden_states + blocks + lens
    if "logit-attribution" in analyses:
        db = 8 if options.get("dtype") == "float64" else b
        out["logit-attribution"] = (
            forward + logits + 2 * (L + 1) * 4 * n * d * db + 2 * L * H * n * d * db
        )
    rows = {"ablation": H, "patching": max(H, min(n, max(1, 4096 // max(n, 1))))}
    for kind, r in rows.items():
        if kind in analyses:
            out[kind] = (r + 2) * forward + hidden_states * 2 + logits
    if (
        "attribution-patching" in analyses
    ):  # the corrupted run's graph keeps every layer's activations
        out["attribution-patching"] = (L + 2) * forward + hidden_states * 4 + logits
        if options.get("real"):
            out["attribution-patching"] = max(
                out["attribution-patching"],
                (rows["patching"] + 2) * forward + hidden_states * 2 + logits,
            )
    if "edge-attribution" in analyses:
        out["edge-attribution"] = _edge_stage(facts, n, options, forward=forward)
    return out


EDGE_BATCH_BYTES = (
    768 * 2**20
)  # a batch of EAP-IG rows or of edge-patched rows holds about this much


def edge_rows(facts: ModelFacts, n: int) -> tuple[int, int, int, int]:
    """edge-attribution's batches on an ``n``-token text: (EAP-IG rows, bytes of one, edge-patched rows,
    bytes of one). An EAP-IG row keeps every layer's q/k/v copies, maps and feed-forward for the
    backward; an edge-patched row holds every writer's change and one layer's q/k/v inputs."""
    L, H, d, b = facts.n_layers, facts.n_heads, facts.hidden, facts.dtype_bytes
    ig = L * (12 * H * n * d + 4 * H * n * n + 4 * n * facts.intermediate + 8 * n * d) * b
    patched = (1 + L * (H + 1) + 6 * H) * n * d * b + 4 * H * n * n * b
    return max(1, EDGE_BATCH_BYTES // ig), ig, max(1, EDGE_BATCH_BYTES // patched), patched


def _edge_stage(facts: ModelFacts, n: int, options: dict[str, Any], *, forward: int) -> int:
    """edge-attribution (``workers.analyses.circuits.edges``): the clean and corrupted runs' writers and streams,
    then the larger of a batch of EAP-IG rows and a batch of edge-patched rows (``edge_rows``)."""
    L, H, d, b = facts.n_layers, facts.n_heads, facts.hidden, facts.dtype_bytes
    runs = 2 * (1 + L * (H + 1) + 2 * L + 1) * n * d * b
    ig_rows, ig, patched_rows, patched = edge_rows(facts, n)
    steps = int(options.get("ig_steps", 5))
    curve = len(options.get("curve_sizes") or range(12)) + 1
    return forward + runs + max(min(steps, ig_rows) * ig, min(curve, patched_rows) * patched)


def estimate_text_request(
    facts: ModelFacts, n: int, analyses: list[str], options: dict[str, Any]
) -> Estimate:
    """Peak memory of ``analyze`` on an ``n``-token text (see the module docstring)."""
    L, H, d, b = facts.n_layers, facts.n_heads, facts.hidden, facts.dtype_bytes
    hd = facts.head_dim or d // H
    nn = n * n
    weights = facts.n_params * b
    hidden_states = (L + 1) * n * d * (b + 4) * 2  # HF's tuple, the stack, the float32 host copy
    # one layer alive at a time: scores, mask added, softmax in float32, cast, plus the MLP's n x I
    forward = H * nn * (3 * b + 4) + 3 * n * facts.intermediate * b + 4 * n * d * b + hidden_states
    streamed: dict[str, int] = {"forward": forward}
    stages: dict[str, int] = {}
    if "max-attention" in analyses:
        streamed["max-attention"] = H * nn * F8 + 2 * L * H * n * F8  # a float64 view of one layer
    single = options.get("layer", "all") != "all" and options.get("head", "all") != "all"
    if "head-tsne" in analyses:
        hs = _count(options.get("head", "all"), H)
        # one layer's heads: float64 copy, A + A^T, P, the engine's float32 P and the KL's Q
        streamed["head-tsne"] = hs * nn * (3 * F8 + 4 + F8) + (nn * F8 if single else 0)
    if "robustness" in analyses:
        repeats = int(options.get("repeats", 10))
        streamed["robustness"] = nn * F8 * 2
        stages["robustness"] = forward + 4 * repeats * nn * F8 + 3 * nn * F8
    if "hidden-tsne" in analyses:
        states = (
            L + 1
            if options.get("hidden_layer", options.get("layer", "all")) in (None, "all")
            else 1
        )
        stages["hidden-tsne"] = hidden_states + states * nn * F8 * 3 + nn * F8 * 3
    if "decomposition" in analyses:
        db = 8 if options.get("dtype") == "float64" else 4
        S = L + 1
        ctx = H * hd
        dec = (
            2 * S * 4 * n * d * db  # terms of every state, and their stacked copy
            + 4 * S * n * d * db  # hidden states (HF's, stacked, re-normed) and importance weights
            + 2
            * L
            * n
            * (ctx + d)
            * db  # context vectors and feed-forward outputs, recorded and unbiased
            + S * L * H * n * db  # head importances
            + S * n * (d + 2 * ctx) * db  # one layer's [state, n, .] importance products
        )
        extra = facts.n_params * (db - b) if db > b else 0  # the model again in float64
        stages["decomposition"] = forward + dec + extra
    if (
        "information-flow" in analyses
    ):  # docs/circuits.md: each layer's record kept (up to 1 GiB) + one chunk
        kept = L * (H * nn + 10 * n * d) * b
        stages["information-flow"] = (
            forward + (kept if kept <= GIB else 2 * H * nn * b + 10 * n * d * b) + 3 * 2**25
        )
    causal = _causal_stages(
        facts, n, analyses, options, forward=forward, hidden_states=hidden_states
    )
    stages.update(causal)
    if len(streamed) > 1 or not stages:
        stages["forward"] = sum(streamed.values())
    peak_name = max(stages, key=lambda k: stages[k])
    parts = {
        "weights": weights,
        **{k: v for k, v in streamed.items()},
        **{k: v for k, v in stages.items() if k not in streamed and k != "forward"},
    }
    parts["runtime"] = RUNTIME
    logger.debug("memory estimate at n=%d: peak stage %s", n, peak_name)
    return Estimate(RUNTIME + weights + stages[peak_name], parts)
