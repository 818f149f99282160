"""Run the requested analyses on one text and return JSON-ready sections.

The CLI and the queue jobs both call ``analyze``; the result is::

    {"model", "family", "text", "tokens", "token_texts", "offsets", "special", "n_tokens",
     "n_layers", "n_heads", "truncated_from", "timings": {...},
     "<analysis kind>": {section}, ...}

Each section is also what ``headscope analyze --analysis KIND`` writes, merged with the common keys.

Streaming (issue 10): the text runs through the model once, and each layer's attention maps go to
the consumers the requested views registered (``workers.analysis.streaming``): max/mean attention
reduced on the device, the chosen heads' t-SNE embedded layer by layer, one head kept for the head
view or robustness. No view holds every layer's maps. Before anything runs, the memory the request
needs is estimated (``workers.analysis.memory``) and a request over the budget fails at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from workers.analysis.hidden import states_tsne
from workers.analysis.memory import ModelFacts, estimate_text_request
from workers.analysis.progress import Progress, no_progress, scaled
from workers.analysis.robustness import disturb_ids, summarize
from workers.analysis.streaming import (
    AttentionStats,
    Consumer,
    HeadKeeper,
    LayerHeadTSNE,
    PackedAttention,
)
from workers.analysis.tsne import TSNEOptions, embed_affinities, select_indices
from workers.errors import HeadscopeError
from workers.models import LoadedModel, ModelRun, pooled_states
from workers.models.adapters import Encoded, encode, forward_streamed

logger = logging.getLogger(__name__)

DEFAULT_OPTIONS: dict[str, Any] = {
    "truncate": False,
    "drop_special": False,
    "chat": False,
    "layer": "all",
    "head": "all",
    "engine": None,
    "seed": 0,
    "restarts": 1,
    "init": "spectral",
    "n_iter": 750,
    "early_exaggeration_iter": 250,
    "perplexity": 20.0,
    "pooling": "auto",
    "fraction": 0.05,
    "repeats": 10,
    "dtype": "float32",
    "hidden_layer": None,
}
DEFAULT_ENGINE = "fast"  # issue 7; "batched" and "opentsne" stay selectable


STREAMED = ("max-attention", "head-tsne", "hidden-tsne", "robustness", "lasf")  # read the text's forward pass


@dataclass
class Context:
    """What a section function sees: the model, the text, the options, a progress reporter, and
    the consumers the requested views registered for the streamed forward pass."""

    loaded: LoadedModel
    text: str
    options: dict[str, Any]
    progress: Progress = no_progress
    timings: dict[str, float] = field(default_factory=dict)
    lasf: Any = None  # workers.analysis.lasf.LasFModel for the lasf analysis
    consumers: dict[str, Consumer] = field(default_factory=dict)

    @cached_property
    def encoded(self) -> Encoded:
        return encode(self.loaded, self.text, truncate=bool(self.options["truncate"]), chat=bool(self.options["chat"]))

    @cached_property
    def run(self) -> ModelRun:
        """The streamed forward pass: hidden states kept, attention maps handed to the consumers."""
        start = time.perf_counter()
        consumers = list(self.consumers.values())
        n_layers, progress = self.loaded.n_layers, self.progress
        what = " + head t-SNE" if "head-tsne" in self.consumers else ""

        def sink(layer: int, weights: Any) -> None:
            for consume in consumers:
                consume(layer, weights)
            progress((layer + 1) / n_layers, f"layer {layer + 1}/{n_layers}: attention{what}")

        hidden = forward_streamed(self.loaded, self.encoded, sink)
        self.timings["forward_s"] = time.perf_counter() - start
        return ModelRun(
            model=self.loaded.name,
            family=self.loaded.family,
            text=self.text,
            encoded=self.encoded,
            attentions=None,
            hidden_states=hidden,
            final_norm_in_last_state=self.loaded.causal,
            meta={"truncated_from": self.encoded.truncated_from, "n_heads": self.loaded.n_heads, "streamed": True},
            causal=self.loaded.causal,
        )

    @property
    def keep(self) -> np.ndarray | None:
        return ~np.asarray(self.encoded.special, dtype=bool) if self.options["drop_special"] else None

    def robustness_head(self) -> tuple[int, int]:
        o, n_layers, n_heads = self.options, self.loaded.n_layers, self.loaded.n_heads
        layer = n_layers // 2 if o["layer"] == "all" else select_indices(o["layer"], n_layers, "layer")[0]
        head = 0 if o["head"] == "all" else select_indices(o["head"], n_heads, "head")[0]
        return layer, head

    def single_head(self) -> bool:
        return self.options["layer"] != "all" and self.options["head"] != "all"

    def plan(self, analyses: list[str]) -> None:
        """Register the consumers of the streamed pass that ``analyses`` need."""
        o, L, H = self.options, self.loaded.n_layers, self.loaded.n_heads
        if "max-attention" in analyses:
            self.consumers["max-attention"] = AttentionStats(L, H, keep=self.keep, causal=self.loaded.causal)
        if "head-tsne" in analyses:
            self.consumers["head-tsne"] = LayerHeadTSNE(
                L, H, layers=o["layer"], heads=o["head"], keep=self.keep, options=self.tsne_options()
            )
            if self.single_head():
                pair = (select_indices(o["layer"], L, "layer")[0], select_indices(o["head"], H, "head")[0])
                self.consumers["head-view"] = HeadKeeper([pair])
            else:
                self.consumers["packed-attention"] = PackedAttention(
                    L, H, layers=o["layer"], heads=o["head"], keep=self.keep
                )
        if "robustness" in analyses:
            self.consumers["robustness"] = HeadKeeper([self.robustness_head()])
        if "lasf" in analyses and self.lasf is not None:  # the replaced layer's heads, for field_vs_head
            replaced = int(self.lasf.config["replaced_layer"])
            self.consumers["lasf"] = HeadKeeper([(replaced, h) for h in range(H)])

    def tsne_options(self, **overrides: Any) -> TSNEOptions:
        o = self.options
        base = TSNEOptions(
            engine=o["engine"] or DEFAULT_ENGINE,
            seed=int(o["seed"]),
            restarts=int(o["restarts"]),
            init=o["init"],
            n_iter=int(o["n_iter"]),
            early_exaggeration_iter=int(o["early_exaggeration_iter"]),
        )
        return TSNEOptions(**{**base.__dict__, **overrides})


Section = Callable[[Context], dict[str, Any]]
SECTIONS: dict[str, Section] = {}


def section(kind: str) -> Callable[[Section], Section]:
    """Register the function computing one analysis kind's section."""

    def wrap(fn: Section) -> Section:
        SECTIONS[kind] = fn
        return fn

    return wrap


def _grid(array: np.ndarray, single: bool) -> Any:
    """Drop the leading grid axes of a one-cell result (``[1, 1, ...] -> [...]``)."""
    return (array.reshape(array.shape[2:]) if single else array).tolist()


@section("max-attention")
def _max_attention(ctx: Context) -> dict[str, Any]:
    stats = ctx.consumers["max-attention"]
    assert isinstance(stats, AttentionStats)
    ctx.run  # noqa: B018 - the streamed pass fills the consumers
    assert stats.max is not None and stats.mean is not None
    kept = np.arange(ctx.encoded.n) if ctx.keep is None else np.flatnonzero(ctx.keep)
    return max_attention_section(stats, kept, causal=ctx.loaded.causal)


def max_attention_section(stats: AttentionStats, kept: np.ndarray, *, causal: bool) -> dict[str, Any]:
    """The max-attention section from a fed ``AttentionStats`` (also ``workers.analysis.external``)."""
    assert stats.max is not None and stats.mean is not None
    return {
        "max_attention": stats.max.tolist(),  # [layer][head][token]
        "mean_attention": stats.mean.tolist(),  # [layer][head][token]
        "kept": kept.tolist(),
        "causal": causal,
        "over": "the queries i >= j that can see key j" if causal else "every query",
    }


@section("head-tsne")
def _head_tsne(ctx: Context) -> dict[str, Any]:
    res = ctx.consumers["head-tsne"]
    assert isinstance(res, LayerHeadTSNE)
    ctx.run  # noqa: B018 - the streamed pass embeds layer by layer
    kept = np.arange(ctx.encoded.n) if ctx.keep is None else np.flatnonzero(ctx.keep)
    single = len(res.layers) == 1 and len(res.heads) == 1 and ctx.single_head()
    extra: dict[str, Any] = {}
    if single:  # the head's own attention matrix for the dashboard's head view (kept rows and columns)
        keeper = ctx.consumers["head-view"]
        assert isinstance(keeper, HeadKeeper)
        a = keeper.maps[(res.layers[0], res.heads[0])][np.ix_(kept, kept)]  # [query, key]
        extra["attention"] = np.round(a, 6).tolist()
        return head_tsne_section(res, kept, single=True, extra=extra)
    packed = ctx.consumers["packed-attention"]  # every embedded head's matrix, one byte a weight
    assert isinstance(packed, PackedAttention)
    return head_tsne_section(res, kept, single=False, extra=packed.fields())


def head_tsne_section(
    res: LayerHeadTSNE, kept: np.ndarray, *, single: bool, extra: dict[str, Any]
) -> dict[str, Any]:
    """The head-tsne section from a fed ``LayerHeadTSNE`` (also ``workers.analysis.external``)."""
    embedding, kl, kl_restarts, tsne_s = res.gather()
    return {
        "layers": res.layers,
        "heads": res.heads,
        "kept": kept.tolist(),
        "engine": res.options.engine,
        **(res.backends() if res.options.engine == "fast" else {}),  # which fast engine ran, and fallbacks
        "embedding": _grid(embedding, single),  # [token][2] or [layer][head][token][2]
        "kl": kl.ravel().tolist() if single else kl.tolist(),  # [kl] or [layer][head]
        "kl_restarts": _grid(kl_restarts, single) if not single else kl_restarts[0, 0].tolist(),
        **extra,
        "timings": {"tsne_s": tsne_s},
    }


@section("hidden-tsne")
def _hidden_tsne(ctx: Context) -> dict[str, Any]:
    o = ctx.options
    run = ctx.run
    state = o["layer"] if o.get("hidden_layer") is None else o["hidden_layer"]
    res = states_tsne(
        run.hidden_states,
        layers=state,
        keep=ctx.keep,
        perplexity=float(o["perplexity"]),
        options=ctx.tsne_options(engine=o["engine"] or DEFAULT_ENGINE),
        progress=ctx.progress,
    )
    single = state != "all"
    return {
        "layers": res.layers,
        "kept": res.kept.tolist(),
        "perplexity": res.perplexity,
        "engine": res.engine,
        "embedding": (res.embedding[0] if single else res.embedding).tolist(),  # [token][2] or [layer][token][2]
        "kl": res.kl.tolist(),  # one per layer
        "kl_restarts": res.kl_restarts.tolist(),
        "final_norm_in_last_state": run.final_norm_in_last_state,
        "timings": {"tsne_s": res.tsne_s},
    }


def word_list(text: str) -> list[str]:
    """The items of a word list: one per non-empty line (commas also split one-line lists)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) == 1 and "," in lines[0]:
        lines = [w.strip() for w in lines[0].split(",") if w.strip()]
    return lines


@section("word-tsne")
def _word_tsne(ctx: Context) -> dict[str, Any]:
    o = ctx.options
    words = word_list(ctx.text)
    if len(words) < 4:
        raise HeadscopeError(f"word-tsne needs at least 4 items (one per line), got {len(words)}")
    start = time.perf_counter()
    states, encs = pooled_states(ctx.loaded, words, pooling=o["pooling"])  # [state, word, dim]
    ctx.timings["forward_s"] = time.perf_counter() - start
    res = states_tsne(
        states,
        layers=o["layer"],
        perplexity=float(o["perplexity"]),
        options=ctx.tsne_options(engine=o["engine"] or DEFAULT_ENGINE),
        progress=ctx.progress,
    )
    single = o["layer"] != "all"
    pooling = o["pooling"] if o["pooling"] != "auto" else ("last" if ctx.loaded.causal else "first")
    return {
        "words": words,
        "word_tokens": [e.tokens for e in encs],
        "pooling": pooling,
        "layers": res.layers,
        "perplexity": res.perplexity,
        "engine": res.engine,
        "embedding": (res.embedding[0] if single else res.embedding).tolist(),  # [word][2] or [layer][word][2]
        "kl": res.kl.tolist(),
        "timings": {"tsne_s": res.tsne_s},
    }


@section("robustness")
def _robustness(ctx: Context) -> dict[str, Any]:
    o, run, loaded = ctx.options, ctx.run, ctx.loaded
    layer, head = ctx.robustness_head()
    keeper = ctx.consumers["robustness"]
    assert isinstance(keeper, HeadKeeper)
    repeats, fraction = int(o["repeats"]), float(o["fraction"])
    rng = np.random.default_rng(int(o["seed"]))
    enc = run.encoded
    from workers.analysis.tsne.affinities import head_affinities, perplexity_affinities

    # disturbed inputs: one forward pass each
    p_head_d, p_hid_d, replaced = [], [], []
    for r in range(repeats):
        ids, where = disturb_ids(enc.input_ids, enc.special, fraction=fraction, rng=rng)
        one = HeadKeeper([(layer, head)])  # streamed: only this head's map is kept
        hid = forward_streamed(loaded, enc, one, ids=ids)
        keep = ctx.keep
        p_head_d.append(head_affinities(one.maps[(layer, head)], keep=keep))
        kept_hid = hid[layer + 1] if keep is None else hid[layer + 1][keep]
        p_hid_d.append(perplexity_affinities(kept_hid, perplexity=float(o["perplexity"])))
        replaced.append(where)
        ctx.progress(0.2 * (r + 1) / repeats, f"disturbed input {r + 1}/{repeats}")
    keep = ctx.keep
    p_head = head_affinities(keeper.maps[(layer, head)], keep=keep)
    hid0 = run.hidden_states[layer + 1] if keep is None else run.hidden_states[layer + 1][keep]
    p_hid = perplexity_affinities(hid0, perplexity=float(o["perplexity"]))
    # R random starts of the same input vs R disturbed inputs, each a batch for the engine
    opts = ctx.tsne_options(init="random", restarts=1, engine=o["engine"] or DEFAULT_ENGINE)
    runs = {
        ("head", "undisturbed"): np.repeat(p_head[None], repeats, axis=0),
        ("head", "disturbed"): np.stack(p_head_d),
        ("hidden", "undisturbed"): np.repeat(p_hid[None], repeats, axis=0),
        ("hidden", "disturbed"): np.stack(p_hid_d),
    }
    out: dict[str, Any] = {"layer": layer, "head": head, "fraction": fraction, "repeats": repeats}
    tsne_s = 0.0
    for i, ((which, cond), p) in enumerate(runs.items()):
        res = embed_affinities(p, options=opts, progress=scaled(ctx.progress, 0.2 + 0.2 * i, 0.4 + 0.2 * i))
        tsne_s += res.tsne_s
        key = "head_tsne" if which == "head" else "hidden_tsne"
        out.setdefault(key, {})[cond] = {"kl": res.kl.tolist(), **summarize(res.kl)}
    out["replaced_positions"] = replaced
    out["timings"] = {"tsne_s": tsne_s}
    return out


@section("decomposition")
def _decomposition(ctx: Context) -> dict[str, Any]:
    """docs/decomposition.md term importances; option ``dtype`` picks the precision, ``layer`` the head-view state."""
    from workers.analysis.decomposition import decompose_encoded
    from workers.analysis.decomposition.stats import decomposition_section
    from workers.models import Catalogue, load_model

    o, loaded = ctx.options, ctx.loaded
    model = loaded
    if str(loaded.dtype).removeprefix("torch.") != o["dtype"]:
        own = Catalogue(specs={loaded.name: loaded.spec}, allow_hub=True)  # already allowed once
        model = load_model(loaded.name, dtype=o["dtype"], device=loaded.device, catalogue=own)
    states = select_indices(o["layer"], loaded.n_layers + 1, "state") if o["layer"] != "all" else [None]
    start = time.perf_counter()
    dec = decompose_encoded(model, [ctx.encoded], [ctx.text], keep_components=False, progress=ctx.progress)[0]
    out = decomposition_section(dec, drop_special=bool(o["drop_special"]), head_state=states[0])
    out["timings"] = {"decomposition_s": time.perf_counter() - start}
    return out


@section("lasf")
def _lasf(ctx: Context) -> dict[str, Any]:
    """docs/lasf.md: the fields of a LasF layer on this text, and the specialisation table."""
    from workers.analysis.lasf import lasf_section, specialisation

    if ctx.lasf is None:
        raise HeadscopeError("the lasf analysis needs a LasF model: lasf-minilm or an uploaded LasF checkpoint")
    keeper = ctx.consumers["lasf"]
    assert isinstance(keeper, HeadKeeper)
    replaced = int(ctx.lasf.config["replaced_layer"])
    attention = np.stack([keeper.maps[(replaced, h)] for h in range(ctx.loaded.n_heads)])  # [head, n, n]
    out = lasf_section(
        ctx.run, ctx.lasf, keep=ctx.keep, tsne=ctx.tsne_options(), perplexity=float(ctx.options["perplexity"]),
        progress=scaled(ctx.progress, 0.0, 0.8), attention=attention,
    )  # fmt: skip
    ctx.progress(0.8, "specialisation test")
    out["specialisation"] = specialisation(ctx.loaded, ctx.lasf)
    return out


def common(ctx: Context) -> dict[str, Any]:
    """The keys every result has (tokens only when the analyses ran the text)."""
    out: dict[str, Any] = {
        "model": ctx.loaded.name,
        "family": ctx.loaded.family,
        "n_layers": ctx.loaded.n_layers,
        "n_heads": ctx.loaded.n_heads,
        "max_tokens": ctx.loaded.max_length,
        "causal": ctx.loaded.causal,
    }
    if ctx.lasf is not None:
        out.update(model=ctx.lasf.name, base_model=ctx.loaded.name)
    if "encoded" in ctx.__dict__:
        enc = ctx.encoded
        out.update(
            {
                "tokens": enc.tokens,
                "token_texts": enc.texts if enc.texts is not None else [ctx.text[a:b] for a, b in enc.offsets],
                "offsets": [list(o) for o in enc.offsets],
                "special": enc.special,
                "n_tokens": enc.n,
                "truncated_from": enc.truncated_from,
            }
        )
    return out


def resolve_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """Defaults filled in; unknown option names are an error."""
    options = dict(options or {})
    unknown = set(options) - set(DEFAULT_OPTIONS)
    if unknown:
        raise HeadscopeError(f"unknown option(s): {', '.join(sorted(unknown))}")
    return {**DEFAULT_OPTIONS, **options}


def analyze(
    loaded: LoadedModel,
    text: str,
    analyses: list[str],
    options: dict[str, Any] | None = None,
    *,
    progress: Progress | None = None,
    on_section: Callable[[str, dict[str, Any], dict[str, Any]], None] | None = None,
    lasf: Any = None,
) -> dict[str, Any]:
    """Compute ``analyses`` on ``text`` in a cheap-first order.

    Args:
        on_section: called as ``on_section(kind, section, result_so_far)`` after each analysis —
            the queue job stores partial results with it.
        lasf: the LasF layer (``workers.analysis.lasf.load_lasf``) the lasf analysis looks at.
    """
    from workers.contracts import ANALYSIS_KINDS

    unknown = [a for a in analyses if a not in SECTIONS]
    if unknown:
        raise HeadscopeError(f"unknown analysis {unknown[0]!r}; use one of {', '.join(SECTIONS)}")
    order = [k for k in ANALYSIS_KINDS if k in analyses] + [k for k in analyses if k not in ANALYSIS_KINDS]
    progress = progress or no_progress
    ctx = Context(loaded=loaded, text=text, options=resolve_options(options), lasf=lasf)
    result: dict[str, Any] = {}
    first = 0.0
    if any(k != "word-tsne" for k in order):
        estimate = estimate_text_request(ModelFacts.of(loaded), ctx.encoded.n, order, ctx.options)
        estimate.check(what=f"{', '.join(order)} on {ctx.encoded.n} tokens of {loaded.name}")
        ctx.timings["memory_estimate_gib"] = round(estimate.total / 2**30, 3)
    if any(k in STREAMED for k in order):
        ctx.plan(order)
        first = 0.8 if "head-tsne" in order else 0.3  # the streamed pass's share of the progress bar
        ctx.progress = scaled(progress, 0.0, first)
        ctx.run  # noqa: B018 - one forward pass feeds every registered consumer
    for i, kind in enumerate(order):
        ctx.progress = scaled(progress, first + (1 - first) * i / len(order), first + (1 - first) * (i + 1) / len(order))
        ctx.progress(0.0, f"{kind}: starting")
        start = time.perf_counter()
        sec = SECTIONS[kind](ctx)
        sec.setdefault("timings", {})["total_s"] = time.perf_counter() - start
        result[kind] = sec
        result.update(common(ctx))
        result["timings"] = dict(ctx.timings)
        if on_section is not None:
            on_section(kind, sec, result)
    progress(1.0, "done")
    return result


WARM_UP_TEXT = "The cat sat on the mat. The dog slept by the door, and the cat watched it."


def warm_up(loaded: LoadedModel) -> float:
    """Run the text explorer's first request on a short text (a forward pass with the streamed
    consumers, every head's t-SNE, the states' t-SNE) so a fresh worker's first real request pays
    for no lazy initialisation or compilation; seconds taken. A worker calls it per preloaded model."""
    start = time.perf_counter()
    opts = {"layer": "all", "head": "all", "n_iter": 20, "early_exaggeration_iter": 10, "perplexity": 4.0,
            "hidden_layer": 0}  # fmt: skip
    analyze(loaded, WARM_UP_TEXT, ["max-attention", "head-tsne", "hidden-tsne"], opts)
    return time.perf_counter() - start

