"""The causal views as pipeline sections (``workers.engine.pipeline`` registers them): JSON-ready
results of ``workers.analyses.causal.views`` and ``workers.analyses.causal.interventions``; keys in docs/results.md.

Each section takes the pipeline's context (``ctx.loaded``, ``ctx.encoded``, ``ctx.text``,
``ctx.options``, ``ctx.progress``); ``extend_with_continuation`` runs before any of them when the
request has ``continue``, so every view reads the continued text and ``generated`` marks its tokens.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from workers.analyses.causal.interventions import ablation, patching
from workers.analyses.causal.views import (
    FROZEN,
    continue_text,
    head_of,
    logit_attribution,
    logit_lens,
    predictions,
)
from workers.analyses.circuits.attribution_patching import attribution_patching
from workers.analyses.circuits.edges import edge_attribution
from workers.core.jsonable import jsonable
from workers.models.adapters import Encoded, encode

CAUSAL_OPTIONS: dict[str, Any] = {
    "k": 10,
    "target": None,
    "position": None,
    "ablate": "each",
    "ablation": "mean",
    "corrupted": None,
    "continue_tokens": 16,
    "temperature": 0.0,
    "real": False,
    # edge-attribution / attribution-patching (docs/results.md)
    "qk_fix": False,
    "top_edges": 200,
    "ig_steps": 5,
    "curve_sizes": None,
    "all_edges": False,
}


def _target(options: dict[str, Any]) -> Any:
    t = options.get("target")
    return list(t) if isinstance(t, list | tuple) else t


def extend_with_continuation(ctx: Any) -> None:
    """``continue``: generate, then make the continued text the context's text for every view."""
    o = ctx.options
    start = time.perf_counter()
    prompt = ctx.encoded
    ext, text, probs = continue_text(
        ctx.loaded, prompt, ctx.text, n_tokens=int(o["continue_tokens"]), temperature=float(o["temperature"]),
        seed=int(o["seed"]), progress=ctx.progress,
    )  # fmt: skip
    ctx.__dict__["encoded"] = ext  # the cached encoding every section reads
    ctx.continuation = {
        "prompt": ctx.text,
        "continuation": text[len(ctx.text) :],
        "n_prompt_tokens": prompt.n,
        "n_generated": ext.n - prompt.n,
        "generated_probs": probs,
        "temperature": float(o["temperature"]),
        "seed": int(o["seed"]),
        "greedy": float(o["temperature"]) == 0.0,
        "timings": {"generate_s": time.perf_counter() - start},
    }
    ctx.text = text
    ctx.generated = [False] * prompt.n + [True] * (ext.n - prompt.n)


def _continue(ctx: Any) -> dict[str, Any]:
    if getattr(ctx, "continuation", None) is None:
        extend_with_continuation(ctx)
    return dict(ctx.continuation)


def _predictions(ctx: Any) -> dict[str, Any]:
    out = predictions(ctx.loaded, ctx.encoded, k=int(ctx.options["k"]))
    return jsonable(out)


def _lens(ctx: Any) -> dict[str, Any]:
    out = logit_lens(ctx.loaded, ctx.encoded, progress=ctx.progress)
    return jsonable(out)


def _position(ctx: Any) -> int:
    p = ctx.options.get("position")
    return ctx.encoded.n - 1 if p is None else min(int(p), ctx.encoded.n - 1)


def _attribution(ctx: Any) -> dict[str, Any]:
    out = logit_attribution(
        ctx.loaded, ctx.encoded, target=_target(ctx.options), text=ctx.text, progress=ctx.progress
    )
    out["position"] = _position(ctx)
    out["scale"] = FROZEN
    return jsonable(out)


def _ablation(ctx: Any) -> dict[str, Any]:
    o = ctx.options
    heads = None if o["ablate"] == "each" else [tuple(h) for h in o["ablate"]]
    out = ablation(
        ctx.loaded, ctx.encoded, heads=heads, mode=o["ablation"], target=_target(o),
        position=_position(ctx) if heads is None else None, progress=ctx.progress,
    )  # fmt: skip
    out["each"] = heads is None
    return jsonable(out)


def _corrupted(ctx: Any) -> Encoded:
    """The corrupted text encoded; after ``continue`` the same generated tokens follow it."""
    corrupted = encode(
        ctx.loaded, ctx.options["corrupted"] or "", truncate=bool(ctx.options["truncate"])
    )
    if ctx.continuation is not None:
        k = ctx.continuation["n_generated"]
        gen = ctx.encoded
        corrupted = Encoded(
            [*corrupted.input_ids, *gen.input_ids[-k:]], [*corrupted.tokens, *gen.tokens[-k:]],
            [*corrupted.offsets, *[(0, 0)] * k], [*corrupted.special, *gen.special[-k:]],
        )  # fmt: skip
    return corrupted


def _pair_texts(ctx: Any, out: dict[str, Any], corrupted: Encoded) -> dict[str, Any]:
    o = ctx.options
    out["corrupted_text"] = o["corrupted"]
    texts = [o["corrupted"][a:b] for a, b in corrupted.offsets]
    if ctx.continuation is not None:
        k = ctx.continuation["n_generated"]
        texts = texts[: len(texts) - k] + [ctx.text[a:b] for a, b in ctx.encoded.offsets[-k:]]
    out["corrupted_token_texts"] = texts
    return jsonable(out)


def _patching(ctx: Any) -> dict[str, Any]:
    corrupted = _corrupted(ctx)
    out = patching(
        ctx.loaded, ctx.encoded, corrupted, target=_target(ctx.options), progress=ctx.progress
    )
    return _pair_texts(ctx, out, corrupted)


def _attribution_patching(ctx: Any) -> dict[str, Any]:
    corrupted = _corrupted(ctx)
    out = attribution_patching(
        ctx.loaded,
        ctx.encoded,
        corrupted,
        target=_target(ctx.options),
        real=bool(ctx.options["real"]),
        qk_fix=bool(ctx.options["qk_fix"]),
        progress=ctx.progress,
    )
    return _pair_texts(ctx, out, corrupted)


def _edge_attribution(ctx: Any) -> dict[str, Any]:
    o = ctx.options
    corrupted = _corrupted(ctx)
    out = edge_attribution(ctx.loaded, ctx.encoded, corrupted, target=_target(o), top_edges=int(o["top_edges"]),
                           ig_steps=int(o["ig_steps"]), curve_sizes=o["curve_sizes"], all_edges=bool(o["all_edges"]),
                           progress=ctx.progress)  # fmt: skip
    return _pair_texts(ctx, out, corrupted)


CAUSAL_SECTIONS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "continue": _continue,
    "predictions": _predictions,
    "logit-lens": _lens,
    "logit-attribution": _attribution,
    "ablation": _ablation,
    "patching": _patching,
    "attribution-patching": _attribution_patching,
    "edge-attribution": _edge_attribution,
}


def check_causal(ctx: Any, kinds: list[str]) -> None:
    """Before any work: the model has a head (``NoLMHeadError`` names why not)."""
    if any(k in CAUSAL_SECTIONS for k in kinds):
        head_of(ctx.loaded)
