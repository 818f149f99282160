"""Heads across a corpus (docs/corpus.md): every text through the model in padded batches,
per-head statistics folded in layer by layer as the forward pass reaches each layer.

No attention map outlives its layer: ``watch_attention`` hands each layer's maps of the batch to
``LayerAccumulator.update`` and drops them, so memory is one batch's activations plus the per-head
totals, whatever the corpus size. Notebook use::

    from workers.models import load_model
    from workers.analyses.corpus.run import CorpusOptions, corpus_statistics
    res = corpus_statistics(load_model("minilm"), ["A first text.", "A second one."])
    res["statistics"]["previous"]          # [layer][head]
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from workers.analyses.corpus.statistics import (
    HIST_BINS,
    STATISTICS,
    KeptBatch,
    LayerAccumulator,
    hist_range,
)
from workers.core.errors import CancelledError, HeadscopeError
from workers.core.progress import Progress, no_progress
from workers.inputs.texts import TextSource, as_source
from workers.models.adapters import Encoded, watch_attention
from workers.models.sublayers import batch_inputs

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel

logger = logging.getLogger(__name__)

CONTEXT = 8  # tokens shown on each side of a top pair
WINDOW_TEXTS = 500  # texts tokenised, sorted into batches and run together (streamed corpora)


@dataclass(frozen=True)
class CorpusOptions:
    """Options of a corpus run (the contract's ``CorpusOptions`` carries the same fields)."""

    max_tokens: int = 128  # per text, special tokens included; longer texts are truncated (counted)
    keep_special: bool = False
    statistics: tuple[str, ...] = STATISTICS
    top_k: int = 20
    exclude_sink_self: bool = True  # top pairs leave out key = first kept token and key = query
    batch_tokens: int = 4096  # padded tokens per batch
    max_batch: int = 64  # texts per batch

    def validate(self) -> CorpusOptions:
        unknown = [s for s in self.statistics if s not in STATISTICS]
        if unknown:
            raise HeadscopeError(f"unknown statistic {unknown[0]!r}; use {', '.join(STATISTICS)}")
        if self.max_tokens < 2:
            raise HeadscopeError("max_tokens must be at least 2")
        return self


@dataclass
class EncodedCorpus:
    """Every text's token ids (truncated to the limit), special-token flags and token strings."""

    ids: list[list[int]]
    special: list[list[bool]]
    tokens: list[list[str]]
    truncated: int  # texts cut to the limit
    skipped: list[int] = field(default_factory=list)  # texts with no kept token (not run)


def encode_corpus(
    loaded: LoadedModel, texts: list[str], *, max_tokens: int, chunk: int = 256
) -> EncodedCorpus:
    """Tokenise every text as the model's tokenizer does, cut to ``max_tokens`` (and the model's limit)."""
    tok = loaded.tokenizer
    limit = min(max_tokens, loaded.max_length)
    ids: list[list[int]] = []
    special: list[list[bool]] = []
    truncated = 0
    for start in range(0, len(texts), chunk):
        part = texts[start : start + chunk]
        full = tok(part, add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
        long = [i for i, row in enumerate(full) if len(row) > limit]
        cut = {}
        if long:
            enc = tok(
                [part[i] for i in long], add_special_tokens=True, truncation=True, max_length=limit
            )
            cut = dict(zip(long, enc["input_ids"], strict=True))
        truncated += len(long)
        for i, row in enumerate(full):
            row = list(cut.get(i, row))
            ids.append(row)
            special.append(tok.get_special_tokens_mask(row, already_has_special_tokens=True))
    tokens = [tok.convert_ids_to_tokens(row) for row in ids]
    return EncodedCorpus(ids, [[bool(s) for s in row] for row in special], tokens, truncated)


def batches(lengths: list[int], *, batch_tokens: int, max_batch: int) -> list[list[int]]:
    """Text indices grouped into batches of similar length (sorted), each under ``batch_tokens``
    padded tokens and ``max_batch`` texts."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    out: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        width = max(lengths[i], max((lengths[j] for j in cur), default=0))
        if cur and (width * (len(cur) + 1) > batch_tokens or len(cur) >= max_batch):
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    return out


def head_map(means: dict[str, np.ndarray]) -> dict[str, Any]:
    """Each head's vector of statistics, standardised per statistic (mean 0, sd 1 over heads; NaN
    and constant statistics give 0), projected on its first two principal axes: ``xy`` [layer, head, 2]."""
    stats = list(means)
    first = next(iter(means.values()))
    n_layers, n_heads = first.shape
    x = np.stack([means[s].reshape(-1) for s in stats], axis=1)  # [head, statistic]
    finite = np.isfinite(x)
    n = finite.sum(axis=0)
    xz = np.where(finite, x, 0.0)
    mu = xz.sum(axis=0) / np.maximum(n, 1)
    sd = np.sqrt((np.where(finite, x - mu, 0.0) ** 2).sum(axis=0) / np.maximum(n, 1))
    z = np.where(finite & (sd > 1e-12), (xz - mu) / np.where(sd > 1e-12, sd, 1.0), 0.0)
    z = z - z.mean(axis=0)
    if z.shape[0] >= 2 and np.any(z):
        _, s, vt = np.linalg.svd(z, full_matrices=False)
        axes = vt[:2]
        for a in axes:  # a fixed sign: the largest loading positive
            if a[np.argmax(np.abs(a))] < 0:
                a *= -1
        xy = z @ axes.T
        explained = (s[:2] ** 2 / max(float((s**2).sum()), 1e-300)).tolist()
        loadings = {stat: axes[:, i].tolist() for i, stat in enumerate(stats)}
    else:
        xy, explained, loadings = (
            np.zeros((z.shape[0], 2)),
            [0.0, 0.0],
            {s: [0.0, 0.0] for s in stats},
        )
    if xy.shape[1] < 2:
        xy = np.pad(xy, ((0, 0), (0, 2 - xy.shape[1])))
        explained = [*explained, 0.0][:2]
    return {
        "method": "pca",
        "statistics": stats,
        "xy": xy.reshape(n_layers, n_heads, 2).tolist(),
        "explained": explained,
        "loadings": loadings,
    }


def _context(tokens: list[str], q: int, k: int) -> dict[str, Any]:
    """The tokens around a (query, key) pair: one window when they are close, two joined by "…"."""
    lo_k, hi_k = max(0, k - CONTEXT), min(len(tokens), k + CONTEXT + 1)
    lo_q, hi_q = max(0, q - CONTEXT), min(len(tokens), q + CONTEXT + 1)
    lo, hi = min(lo_k, lo_q), max(hi_k, hi_q)
    if hi - lo <= 4 * CONTEXT + 2:
        return {"tokens": tokens[lo:hi], "q_at": q - lo, "k_at": k - lo}
    first, second = ((lo_k, hi_k), (lo_q, hi_q)) if k < q else ((lo_q, hi_q), (lo_k, hi_k))
    joined = tokens[first[0] : first[1]] + ["…"] + tokens[second[0] : second[1]]
    shift = first[1] - first[0] + 1 - second[0]
    q_at = q - first[0] if k >= q else q + shift
    k_at = k - first[0] if k < q else k + shift
    return {"tokens": joined, "q_at": q_at, "k_at": k_at}


class PairContexts:
    """The tokens around each current top pair, kept while the corpus streams past: after each window
    of texts, the pairs of ``acc.top_at`` that lie in it get their context (a pair enters the top-k
    only while its window runs), and contexts of pairs that left the top-k are dropped. Memory:
    layers x heads x top_k contexts, whatever the corpus size."""

    def __init__(self) -> None:
        self.by_pair: dict[tuple[int, int, int], dict[str, Any]] = {}

    def add_window(self, acc: LayerAccumulator, enc: EncodedCorpus, first: int) -> None:
        """Record the contexts of the top pairs in texts ``[first, first + len(enc.ids))``."""
        live = {tuple(int(v) for v in at) for at in acc.top_at.reshape(-1, 3) if at[0] >= 0}
        for t, q, k in live:
            if first <= t < first + len(enc.ids) and (t, q, k) not in self.by_pair:
                tokens = enc.tokens[t - first]
                self.by_pair[(t, q, k)] = {
                    "query_token": tokens[q],
                    "key_token": tokens[k],
                    **_context(tokens, q, k),
                }
        self.by_pair = {key: v for key, v in self.by_pair.items() if key in live}

    def top_pairs(self, acc: LayerAccumulator) -> list[list[list[dict[str, Any]]]]:
        out = []
        for layer in range(acc.top_w.shape[0]):
            row = []
            for head in range(acc.top_w.shape[1]):
                pairs = []
                for w, (t, q, k) in zip(
                    acc.top_w[layer, head], acc.top_at[layer, head], strict=True
                ):
                    if w < 0:
                        continue
                    pairs.append(
                        {
                            "weight": float(w),
                            "text": int(t),
                            "query": int(q),
                            "key": int(k),
                            **self.by_pair[(int(t), int(q), int(k))],
                        }
                    )
                row.append(pairs)
            out.append(row)
        return out


def _none_for_nan(x: np.ndarray) -> list[Any]:
    """A nested list with None where ``x`` is not finite (JSON has no NaN)."""
    return [[float(v) if np.isfinite(v) else None for v in row] for row in x]


def summarise(
    acc: LayerAccumulator,
    *,
    contexts: PairContexts | None,
    n_texts: int,
    n_tokens: int,
    n_kept: int,
    pairs: list[list[list[dict[str, Any]]]] | None = None,
) -> dict[str, Any]:
    """The result so far over ``n_texts`` texts (``contexts`` and ``pairs`` None: without top pairs,
    histograms and map, for partial results; ``pairs``: top pairs merged from the parts of a split
    job, ``workers.analyses.corpus.merge``)."""
    means = acc.means()
    n_layers, n_heads = acc.top_w.shape[:2]
    out: dict[str, Any] = {
        "statistics": {s: _none_for_nan(v) for s, v in means.items()},
        "counts": {
            s: np.repeat(acc.counts[s][:, None], n_heads, axis=1).tolist() for s in acc.statistics
        },
        "n_texts": n_texts,
        "n_tokens": n_tokens,
        "n_kept_tokens": n_kept,
    }
    if contexts is not None or pairs is not None:
        out["histograms"] = {
            s: {
                "range": list(hist_range(s, max_tokens=acc.max_tokens)),
                "bins": HIST_BINS,
                "counts": acc.hist[s].tolist(),
            }
            for s in acc.statistics
        }
        out["top_pairs"] = pairs if pairs is not None else contexts.top_pairs(acc)  # type: ignore[union-attr]
        out["head_map"] = head_map(means)
    return out


def corpus_statistics(
    loaded: LoadedModel,
    texts: Sequence[str] | TextSource,
    *,
    options: CorpusOptions | None = None,
    progress: Progress | None = None,
    on_batch: Callable[[dict[str, Any]], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    tap: Any = None,
    window: int = WINDOW_TEXTS,
) -> dict[str, Any]:
    """Per-head statistics of ``texts`` (docs/corpus.md). Keys: docs/results.md, "corpus".

    ``texts``: a list, or a ``TextSource`` read ``window`` texts at a time (a stored corpus streams
    from the store): each window is tokenised, sorted into padded batches and run, and only the
    totals, the top pairs and their contexts outlive it, so memory does not grow with the corpus.
    Windows start at multiples of ``window``; a corpus of at most ``window`` texts is one window.

    ``tap`` (``workers.analyses.compare.comparison.WordMapTap``) reads the same forward passes: ``tap.start(batch)``
    before each batch, ``tap.layer(layer, weights)`` per layer, ``tap.finish(output)`` after it.

    ``on_batch`` gets the statistics so far after each batch (no top pairs, histograms or map);
    ``should_stop`` is asked between batches and ends the run with ``CancelledError``.
    """
    opts = (options or CorpusOptions()).validate()
    source = as_source(texts)
    if len(source) == 0:
        raise HeadscopeError("the corpus has no texts")
    t0 = time.perf_counter()
    run = accumulate(
        loaded,
        source,
        opts=opts,
        progress=progress,
        on_batch=on_batch,
        should_stop=should_stop,
        tap=tap,
        window=window,
    )
    if run.done == 0:
        raise HeadscopeError("no text of the corpus has a token left (only special tokens)")
    seconds = time.perf_counter() - t0
    result = summarise(
        run.acc, contexts=run.contexts, n_texts=run.done, n_tokens=run.n_tokens, n_kept=run.n_kept
    )
    result.update(
        model_facts(loaded),
        truncated=run.truncated,
        skipped=run.skipped,
        options={**asdict(opts), "statistics": list(opts.statistics)},
        seconds=round(seconds, 3),
        texts_per_s=round(run.done / max(seconds, 1e-9), 2),
    )
    return result


def model_facts(loaded: LoadedModel) -> dict[str, Any]:
    """The model keys of a corpus result."""
    return {
        "model": loaded.name,
        "family": loaded.family,
        "causal": loaded.causal,
        "n_layers": loaded.n_layers,
        "n_heads": loaded.n_heads,
    }


@dataclass
class CorpusRun:
    """What ``accumulate`` leaves: the folded statistics, the top pairs' contexts and the counts."""

    acc: LayerAccumulator
    contexts: PairContexts
    done: int  # texts run (those with a kept token)
    n_tokens: int
    n_kept: int
    truncated: int
    skipped: list[int]  # texts with no kept token, by their index in the source


def accumulate(
    loaded: LoadedModel,
    source: TextSource,
    *,
    opts: CorpusOptions,
    start: int = 0,
    stop: int | None = None,
    progress: Progress | None = None,
    on_batch: Callable[[dict[str, Any]], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    tap: Any = None,
    window: int = WINDOW_TEXTS,
) -> CorpusRun:
    """Texts ``[start, stop)`` of ``source`` through the model, ``window`` texts at a time (windows
    start at ``start`` + multiples of ``window``), folded into one ``LayerAccumulator``. Texts keep
    their index in the source (top pairs, skipped): a part of a split job is a range of its corpus."""
    report = progress or no_progress
    stop = len(source) if stop is None else min(stop, len(source))
    n = max(stop - start, 1)
    t0 = time.perf_counter()
    acc = LayerAccumulator(
        n_layers=loaded.n_layers,
        n_heads=loaded.n_heads,
        statistics=tuple(opts.statistics),
        causal=loaded.causal,
        max_tokens=min(opts.max_tokens, loaded.max_length),
        top_k=opts.top_k,
        exclude_sink_self=opts.exclude_sink_self,
    )
    contexts = PairContexts()
    truncated, skipped = 0, []
    done = n_tokens = n_kept = 0
    firsts = list(range(start, stop, window))
    report(0.0, f"{stop - start} texts")
    sink = (
        acc.update
        if tap is None
        else (lambda layer, w: (acc.update(layer, w), tap.layer(layer, w)))
    )
    with watch_attention(loaded, sink), torch.inference_mode():
        for wi, first in enumerate(firsts):
            win = [
                t for b in source.batches(first, min(first + window, stop), batch=window) for t in b
            ]
            enc = encode_corpus(loaded, win, max_tokens=opts.max_tokens)
            truncated += enc.truncated
            keep = [[opts.keep_special or not s for s in row] for row in enc.special]
            runnable = [i for i, row in enumerate(keep) if any(row)]
            skipped += [first + i for i, row in enumerate(keep) if not any(row)]
            lengths = [len(enc.ids[i]) for i in runnable]
            plan = [
                [runnable[j] for j in b]
                for b in batches(lengths, batch_tokens=opts.batch_tokens, max_batch=opts.max_batch)
            ]
            for bi, batch in enumerate(plan):
                if should_stop is not None and should_stop():
                    raise CancelledError("the corpus job")
                ids = [enc.ids[i] for i in batch]
                acc.kept = KeptBatch.build(
                    ids, [keep[i] for i in batch], [first + i for i in batch], device=loaded.device
                )
                encs = [Encoded(enc.ids[i], enc.tokens[i], [], enc.special[i]) for i in batch]
                if tap is not None:
                    tap.start([first + i for i in batch], ids)
                output = loaded.model(**batch_inputs(loaded, encs))
                if tap is not None:
                    tap.finish(output)
                done += len(batch)
                n_tokens += sum(len(row) for row in ids)
                n_kept += sum(sum(keep[i]) for i in batch)
                rate = done / max(time.perf_counter() - t0, 1e-9)
                report(
                    (first - start + len(win) * (bi + 1) / len(plan)) / n,
                    f"{done}/{stop - start} texts, {rate:.1f} texts/s",
                )
                last = wi + 1 == len(firsts) and bi + 1 == len(plan)
                if on_batch is not None and not last:
                    on_batch(
                        summarise(
                            acc, contexts=None, n_texts=done, n_tokens=n_tokens, n_kept=n_kept
                        )
                    )
            contexts.add_window(acc, enc, first)
            del win, enc, keep
    acc.kept = None
    return CorpusRun(acc, contexts, done, n_tokens, n_kept, truncated, skipped)
