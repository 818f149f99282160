"""The t-SNE views as sections of a text analysis (docs/results.md): every head's attention-head
t-SNE (embedded layer by layer during the streamed pass), the hidden states' standard t-SNE, a word
list's, and the robustness experiment."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from workers.analyses.attention.streaming import PackedAttention
from workers.analyses.tsne import TSNEOptions, embed_affinities, select_indices
from workers.analyses.tsne.hidden import states_tsne
from workers.analyses.tsne.robustness import disturb_ids, summarize
from workers.analyses.tsne.spec import (
    HeadTSNEOptions,
    HiddenTSNEOptions,
    RobustnessOptions,
    WordTSNEOptions,
    single_head,
)
from workers.analyses.tsne.streaming import LayerHeadTSNE, LayerPartials
from workers.analyses.tsne.words import check_word_list
from workers.core.options import TSNEParams
from workers.core.progress import scaled
from workers.models import pooled_states
from workers.models.adapters import forward_streamed
from workers.models.streaming import HeadKeeper

DEFAULT_ENGINE = "fast"  # "batched" and "opentsne" stay selectable (docs/tsne.md)


def tsne_options(options: TSNEParams, **overrides: Any) -> TSNEOptions:
    """The engine's options of one run from an analysis' t-SNE options (``engine`` None: the default)."""
    base = TSNEOptions(
        engine=options.engine or DEFAULT_ENGINE,
        seed=int(options.seed),  # type: ignore[attr-defined]
        restarts=int(options.restarts),
        init=options.init,
        n_iter=int(options.n_iter),
        early_exaggeration_iter=int(options.early_exaggeration_iter),
    )
    return TSNEOptions(**{**base.__dict__, **overrides})


def _grid(array: np.ndarray, single: bool) -> Any:
    """Drop the leading grid axes of a one-cell result (``[1, 1, ...] -> [...]``)."""
    return (array.reshape(array.shape[2:]) if single else array).tolist()


def plan_head_tsne(ctx: Any, options: HeadTSNEOptions) -> dict[str, Any]:
    """The chosen heads embedded layer by layer; one head's exact map kept for the head view, or every
    embedded head's map packed (and each finished layer published, when the job asks)."""
    L, H = ctx.loaded.n_layers, ctx.loaded.n_heads
    consumers: dict[str, Any] = {
        "tsne": LayerHeadTSNE(
            L, H, layers=options.layer, heads=options.head, keep=ctx.keep,
            options=tsne_options(options),
        )
    }  # fmt: skip
    if single_head(options):
        pair = (
            select_indices(options.layer, L, "layer")[0],
            select_indices(options.head, H, "head")[0],
        )
        consumers["view"] = HeadKeeper([pair])
        return consumers
    consumers["packed"] = PackedAttention(
        L, H, layers=options.layer, heads=options.head, keep=ctx.keep
    )
    if ctx.on_layer is not None:  # each layer of the grid as it finishes (the gallery filling in)
        publish, kind = ctx.on_layer, ctx.kind
        consumers["partials"] = LayerPartials(
            consumers["tsne"],
            consumers["packed"],
            publish=lambda layer, fields: publish(kind, layer, fields),
        )
    return consumers


def head_tsne(ctx: Any, options: HeadTSNEOptions) -> dict[str, Any]:
    res = ctx.consumers["tsne"]
    assert isinstance(res, LayerHeadTSNE)
    ctx.run  # noqa: B018 - the streamed pass embeds layer by layer
    kept = np.arange(ctx.encoded.n) if ctx.keep is None else np.flatnonzero(ctx.keep)
    single = len(res.layers) == 1 and len(res.heads) == 1 and single_head(options)
    if (
        single
    ):  # the head's own attention matrix for the dashboard's head view (kept rows and columns)
        keeper = ctx.consumers["view"]
        assert isinstance(keeper, HeadKeeper)
        a = keeper.maps[(res.layers[0], res.heads[0])][np.ix_(kept, kept)]  # [query, key]
        return head_tsne_section(
            res, kept, single=True, extra={"attention": np.round(a, 6).tolist()}
        )
    packed = ctx.consumers["packed"]  # every embedded head's matrix, one byte a weight
    assert isinstance(packed, PackedAttention)
    return head_tsne_section(res, kept, single=False, extra=packed.fields())


def head_tsne_section(
    res: LayerHeadTSNE, kept: np.ndarray, *, single: bool, extra: dict[str, Any]
) -> dict[str, Any]:
    """The head-tsne section from a fed ``LayerHeadTSNE`` (also ``workers.engine.external``)."""
    embedding, kl, kl_restarts, tsne_s = res.gather()
    return {
        "layers": res.layers,
        "heads": res.heads,
        "kept": kept.tolist(),
        "engine": res.options.engine,
        **(
            res.backends() if res.options.engine == "fast" else {}
        ),  # which fast engine ran, and fallbacks
        "embedding": _grid(embedding, single),  # [token][2] or [layer][head][token][2]
        "kl": kl.ravel().tolist() if single else kl.tolist(),  # [kl] or [layer][head]
        "kl_restarts": _grid(kl_restarts, single) if not single else kl_restarts[0, 0].tolist(),
        **extra,
        "timings": {"tsne_s": tsne_s},
    }


def hidden_tsne(ctx: Any, options: HiddenTSNEOptions) -> dict[str, Any]:
    run = ctx.run
    state = options.layer if options.hidden_layer is None else options.hidden_layer
    res = states_tsne(
        run.hidden_states,
        layers=state,
        keep=ctx.keep,
        perplexity=float(options.perplexity),
        options=tsne_options(options),
        progress=ctx.progress,
    )
    single = state != "all"
    return {
        "layers": res.layers,
        "kept": res.kept.tolist(),
        "perplexity": res.perplexity,
        "engine": res.engine,
        "embedding": (
            res.embedding[0] if single else res.embedding
        ).tolist(),  # [token][2] or [layer][token][2]
        "kl": res.kl.tolist(),  # one per layer
        "kl_restarts": res.kl_restarts.tolist(),
        "final_norm_in_last_state": run.final_norm_in_last_state,
        "timings": {"tsne_s": res.tsne_s},
    }


def word_tsne(ctx: Any, options: WordTSNEOptions) -> dict[str, Any]:
    words = check_word_list(ctx.text)
    start = time.perf_counter()
    states, encs = pooled_states(ctx.loaded, words, pooling=options.pooling)  # [state, word, dim]
    ctx.timings["forward_s"] = time.perf_counter() - start
    res = states_tsne(
        states,
        layers=options.layer,
        perplexity=float(options.perplexity),
        options=tsne_options(options),
        progress=ctx.progress,
    )
    single = options.layer != "all"
    pooling = (
        options.pooling if options.pooling != "auto" else ("last" if ctx.loaded.causal else "first")
    )
    return {
        "words": words,
        "word_tokens": [e.tokens for e in encs],
        "pooling": pooling,
        "layers": res.layers,
        "perplexity": res.perplexity,
        "engine": res.engine,
        "embedding": (
            res.embedding[0] if single else res.embedding
        ).tolist(),  # [word][2] or [layer][word][2]
        "kl": res.kl.tolist(),
        "timings": {"tsne_s": res.tsne_s},
    }


def robustness_head(ctx: Any, options: RobustnessOptions) -> tuple[int, int]:
    """The head the experiment follows: the chosen one, or layer L // 2, head 0."""
    n_layers, n_heads = ctx.loaded.n_layers, ctx.loaded.n_heads
    layer = (
        n_layers // 2
        if options.layer == "all"
        else select_indices(options.layer, n_layers, "layer")[0]
    )
    head = 0 if options.head == "all" else select_indices(options.head, n_heads, "head")[0]
    return layer, head


def plan_robustness(ctx: Any, options: RobustnessOptions) -> dict[str, Any]:
    return {"head": HeadKeeper([robustness_head(ctx, options)])}


def robustness(ctx: Any, options: RobustnessOptions) -> dict[str, Any]:
    run, loaded = ctx.run, ctx.loaded
    layer, head = robustness_head(ctx, options)
    keeper = ctx.consumers["head"]
    assert isinstance(keeper, HeadKeeper)
    repeats, fraction = int(options.repeats), float(options.fraction)
    rng = np.random.default_rng(int(options.seed))
    enc = run.encoded
    from workers.analyses.tsne.affinities import head_affinities, perplexity_affinities

    # disturbed inputs: one forward pass each
    p_head_d, p_hid_d, replaced = [], [], []
    for r in range(repeats):
        ids, where = disturb_ids(enc.input_ids, enc.special, fraction=fraction, rng=rng)
        one = HeadKeeper([(layer, head)])  # streamed: only this head's map is kept
        hid = forward_streamed(loaded, enc, one, ids=ids)
        keep = ctx.keep
        p_head_d.append(head_affinities(one.maps[(layer, head)], keep=keep))
        kept_hid = hid[layer + 1] if keep is None else hid[layer + 1][keep]
        p_hid_d.append(perplexity_affinities(kept_hid, perplexity=float(options.perplexity)))
        replaced.append(where)
        ctx.progress(0.2 * (r + 1) / repeats, f"disturbed input {r + 1}/{repeats}")
    keep = ctx.keep
    p_head = head_affinities(keeper.maps[(layer, head)], keep=keep)
    hid0 = run.hidden_states[layer + 1] if keep is None else run.hidden_states[layer + 1][keep]
    p_hid = perplexity_affinities(hid0, perplexity=float(options.perplexity))
    # R random starts of the same input vs R disturbed inputs, each a batch for the engine
    opts = tsne_options(options, init="random", restarts=1)
    runs = {
        ("head", "undisturbed"): np.repeat(p_head[None], repeats, axis=0),
        ("head", "disturbed"): np.stack(p_head_d),
        ("hidden", "undisturbed"): np.repeat(p_hid[None], repeats, axis=0),
        ("hidden", "disturbed"): np.stack(p_hid_d),
    }
    out: dict[str, Any] = {"layer": layer, "head": head, "fraction": fraction, "repeats": repeats}
    tsne_s = 0.0
    for i, ((which, cond), p) in enumerate(runs.items()):
        res = embed_affinities(
            p, options=opts, progress=scaled(ctx.progress, 0.2 + 0.2 * i, 0.4 + 0.2 * i)
        )
        tsne_s += res.tsne_s
        key = "head_tsne" if which == "head" else "hidden_tsne"
        out.setdefault(key, {})[cond] = {"kl": res.kl.tolist(), **summarize(res.kl)}
    out["replaced_positions"] = replaced
    out["timings"] = {"tsne_s": tsne_s}
    return out
