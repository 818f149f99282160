"""The causal views as sections of a text analysis: JSON-ready results of
``workers.analyses.causal.views`` and ``workers.analyses.causal.interventions``; keys in
docs/results.md.

Each section takes the engine's context (``ctx.loaded``, ``ctx.encoded``, ``ctx.text``,
``ctx.progress``) and its own options; ``extend_with_continuation`` runs before any of them when the
request has ``continue`` (its spec's ``prepare``), so every view reads the continued text and
``generated`` marks its tokens.
"""

from __future__ import annotations

import time
from typing import Any

from workers.analyses.causal.interventions import ablation, patching
from workers.analyses.causal.spec import (
    AblationOptions,
    AttributionOptions,
    ContinueOptions,
    LensOptions,
    PatchingOptions,
    PredictionsOptions,
)
from workers.analyses.causal.views import (
    FROZEN,
    continue_text,
    logit_attribution,
    logit_lens,
    predictions,
)
from workers.core.jsonable import jsonable
from workers.core.options import Pair, Position, Target
from workers.models.adapters import Encoded, encode


def target_of(options: Target) -> Any:
    """The target as the views take it: a token, a pair as a list, or None."""
    t = options.target
    return list(t) if isinstance(t, list | tuple) else t


def extend_with_continuation(ctx: Any, options: ContinueOptions) -> None:
    """``continue``: generate, then make the continued text the context's text for every view."""
    start = time.perf_counter()
    prompt = ctx.encoded
    ext, text, probs = continue_text(
        ctx.loaded, prompt, ctx.text, n_tokens=int(options.continue_tokens),
        temperature=float(options.temperature), seed=int(options.seed), progress=ctx.progress,
    )  # fmt: skip
    ctx.__dict__["encoded"] = ext  # the cached encoding every section reads
    ctx.continuation = {
        "prompt": ctx.text,
        "continuation": text[len(ctx.text) :],
        "n_prompt_tokens": prompt.n,
        "n_generated": ext.n - prompt.n,
        "generated_probs": probs,
        "temperature": float(options.temperature),
        "seed": int(options.seed),
        "greedy": float(options.temperature) == 0.0,
        "timings": {"generate_s": time.perf_counter() - start},
    }
    ctx.text = text
    ctx.generated = [False] * prompt.n + [True] * (ext.n - prompt.n)


def continue_section(ctx: Any, options: ContinueOptions) -> dict[str, Any]:
    if getattr(ctx, "continuation", None) is None:
        extend_with_continuation(ctx, options)
    return dict(ctx.continuation)


def predictions_section(ctx: Any, options: PredictionsOptions) -> dict[str, Any]:
    out = predictions(ctx.loaded, ctx.encoded, k=int(options.k))
    return jsonable(out)  # type: ignore[no-any-return]


def lens_section(ctx: Any, options: LensOptions) -> dict[str, Any]:
    out = logit_lens(ctx.loaded, ctx.encoded, progress=ctx.progress)
    return jsonable(out)  # type: ignore[no-any-return]


def position_of(ctx: Any, options: Position) -> int:
    """The position the layers x heads maps read at: the option, or the last (within the text)."""
    p = options.position
    return ctx.encoded.n - 1 if p is None else min(int(p), ctx.encoded.n - 1)


def attribution_section(ctx: Any, options: AttributionOptions) -> dict[str, Any]:
    out = logit_attribution(
        ctx.loaded, ctx.encoded, target=target_of(options), text=ctx.text, progress=ctx.progress
    )
    out["position"] = position_of(ctx, options)
    out["scale"] = FROZEN
    return jsonable(out)  # type: ignore[no-any-return]


def ablation_section(ctx: Any, options: AblationOptions) -> dict[str, Any]:
    heads = None if options.ablate == "each" else [tuple(h) for h in options.ablate]
    out = ablation(
        ctx.loaded, ctx.encoded, heads=heads, mode=options.ablation, target=target_of(options),
        position=position_of(ctx, options) if heads is None else None, progress=ctx.progress,
    )  # fmt: skip
    out["each"] = heads is None
    return jsonable(out)  # type: ignore[no-any-return]


def corrupted_of(ctx: Any, options: Pair) -> Encoded:
    """The corrupted text encoded; after ``continue`` the same generated tokens follow it."""
    corrupted = encode(ctx.loaded, options.corrupted or "", truncate=bool(ctx.options.truncate))
    if ctx.continuation is not None:
        k = ctx.continuation["n_generated"]
        gen = ctx.encoded
        corrupted = Encoded(
            [*corrupted.input_ids, *gen.input_ids[-k:]], [*corrupted.tokens, *gen.tokens[-k:]],
            [*corrupted.offsets, *[(0, 0)] * k], [*corrupted.special, *gen.special[-k:]],
        )  # fmt: skip
    return corrupted


def pair_texts(ctx: Any, options: Pair, out: dict[str, Any], corrupted: Encoded) -> dict[str, Any]:
    """``out`` with the corrupted text and its tokens' texts (the generated ones after ``continue``)."""
    out["corrupted_text"] = options.corrupted
    texts = [(options.corrupted or "")[a:b] for a, b in corrupted.offsets]
    if ctx.continuation is not None:
        k = ctx.continuation["n_generated"]
        texts = texts[: len(texts) - k] + [ctx.text[a:b] for a, b in ctx.encoded.offsets[-k:]]
    out["corrupted_token_texts"] = texts
    return jsonable(out)  # type: ignore[no-any-return]


def patching_section(ctx: Any, options: PatchingOptions) -> dict[str, Any]:
    corrupted = corrupted_of(ctx, options)
    out = patching(
        ctx.loaded, ctx.encoded, corrupted, target=target_of(options), progress=ctx.progress
    )
    return pair_texts(ctx, options, out, corrupted)
