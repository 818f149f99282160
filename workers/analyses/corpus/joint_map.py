"""The joint query–key map of one head over a corpus (docs/corpus.md; Yeh et al., AttentionViz, 2023).

For every kept token of the corpus (sampled beyond a limit, and the result says so) the head's query
``q_i`` and key ``k_i`` are taken where the attention function receives them: after rotary embeddings
and per-head norms, the key of the query head's key/value group under grouped-query attention. ``q``
is scaled so that ``q·k/√d`` (d = head dim) is the head's score whatever scaling the family uses.
Keys are translated by ``q̄ − k̄`` (every score of a query shifts by the same amount, so no softmax
changes) and queries and keys scaled by ``c`` and ``1/c`` so that their mean norms are equal (no score
changes); the union is embedded in 2-D (t-SNE, or PCA).

Capturing swaps the model's attention function for one that hands (query, key) to a sink and then
calls the original, by setting ``config._attn_implementation`` for the duration of the block; the
worker runs one job at a time, so nothing else uses the model meanwhile.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from workers.analyses.corpus.run import WINDOW_TEXTS, batches, encode_corpus
from workers.core.errors import CancelledError, HeadscopeError
from workers.core.progress import Progress, no_progress
from workers.inputs.texts import TextSource, as_source
from workers.models.adapters import Encoded, attention_modules
from workers.models.sublayers import batch_inputs

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel

logger = logging.getLogger(__name__)

CAPTURE = "headscope_capture"
QKSink = Callable[[torch.Tensor, torch.Tensor], None]  # q [b, head, n, d], k [b, head, n, d]


class _Enough(Exception):
    """Raised by the capture once the wanted layer is seen: the rest of the forward is not needed."""


def _capturing(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    *args: Any,
    **kwargs: Any,
) -> Any:
    """The attention function while capturing: hand (scaled q, q-head keys) to the sink, then run the
    module's own attention function."""
    sink = getattr(module, "_hs_sink", None)
    if sink is not None:
        scaling = kwargs.get("scaling")
        d = query.shape[-1]
        scale = (scaling if scaling is not None else d**-0.5) * math.sqrt(d)
        groups = query.shape[1] // key.shape[1]
        keys = key.repeat_interleave(groups, dim=1) if groups > 1 else key
        sink(query * scale, keys)
    return module._hs_inner(module, query, key, value, attention_mask, *args, **kwargs)


def _register() -> None:
    from transformers.masking_utils import AttentionMaskInterface, eager_mask
    from transformers.modeling_utils import AttentionInterface

    AttentionInterface.register(CAPTURE, _capturing)
    AttentionMaskInterface.register(CAPTURE, eager_mask)


@contextmanager
def capture_qk(
    loaded: LoadedModel, layer: int, sink: QKSink, *, stop: bool = True
) -> Iterator[None]:
    """Within the block, each forward hands ``sink`` layer ``layer``'s scaled queries and keys per
    query head; ``stop``: end the forward there (``run_capture`` catches it)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    _register()
    config = loaded.model.config
    before = config._attn_implementation
    modules = attention_modules(loaded)
    if not 0 <= layer < len(modules):
        raise HeadscopeError(
            f"layer {layer} is out of range: {loaded.name} has layers 0-{len(modules) - 1}"
        )
    for module in modules:
        own = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
        module._hs_inner = ALL_ATTENTION_FUNCTIONS.get_interface(before, own)

    def at_layer(q: torch.Tensor, k: torch.Tensor) -> None:
        sink(q, k)
        if stop:
            raise _Enough

    modules[layer]._hs_sink = at_layer
    config._attn_implementation = CAPTURE
    try:
        yield
    finally:
        config._attn_implementation = before
        for module in modules:
            for name in ("_hs_inner", "_hs_sink"):
                if hasattr(module, name):
                    delattr(module, name)


@torch.inference_mode()
def run_capture(
    loaded: LoadedModel, inputs: dict[str, torch.Tensor], layer: int, sink: QKSink
) -> None:
    """One forward of ``inputs`` up to layer ``layer``, its queries and keys handed to ``sink``."""
    with capture_qk(loaded, layer, sink):
        try:
            loaded.model(**inputs)
        except _Enough:
            pass


def align(q: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """AttentionViz's translation and scaling: ``k + (q̄ − k̄)``, then ``c q`` and ``k / c`` with
    ``c = sqrt(mean |k'| / mean |q|)``. Every score ``q_i·k_j`` changes by a constant per query (the
    translation) and not at all under the scaling, so every softmax is unchanged."""
    shift = q.mean(axis=0) - k.mean(axis=0)
    k2 = k + shift
    qn, kn = float(np.linalg.norm(q, axis=1).mean()), float(np.linalg.norm(k2, axis=1).mean())
    c = math.sqrt(kn / qn) if qn > 0 and kn > 0 else 1.0
    return q * c, k2 / c, {"scale": c, "shift_norm": float(np.linalg.norm(shift))}


def embed_2d(x: np.ndarray, *, method: str = "pca", seed: int = 0) -> np.ndarray:
    """[point, 2]: openTSNE (Barnes–Hut below 5,000 points, FFT above) or PCA."""
    if method == "pca" or len(x) < 5:
        z = x - x.mean(axis=0)
        _, _, vt = np.linalg.svd(z, full_matrices=False)
        out = z @ vt[:2].T
        return np.pad(out, ((0, 0), (0, 2 - out.shape[1]))) if out.shape[1] < 2 else out
    if method != "tsne":
        raise HeadscopeError(f"unknown embedding {method!r}; use tsne or pca")
    from openTSNE import TSNE

    n = len(x)
    tsne = TSNE(
        n_components=2,
        perplexity=min(30.0, (n - 1) / 3),
        random_state=seed,
        n_jobs=-1,
        negative_gradient_method="fft" if n > 5000 else "bh",
        initialization="pca",
        verbose=False,
    )
    return np.asarray(tsne.fit(x.astype(np.float64)))


@dataclass
class HeadVectors:
    """Queries and keys of one head over the sampled kept tokens of a corpus."""

    q: np.ndarray  # [token, d]
    k: np.ndarray  # [token, d]
    text: np.ndarray  # [token] index of the text
    position: np.ndarray  # [token] position in the text (special tokens counted)
    total: int  # kept tokens in the corpus


def head_vectors(
    loaded: LoadedModel,
    texts: Sequence[str] | TextSource,
    *,
    layer: int,
    head: int,
    max_tokens: int = 128,
    keep_special: bool = False,
    max_points: int = 10_000,
    seed: int = 0,
    batch_tokens: int = 4096,
    window: int = WINDOW_TEXTS,
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> tuple[HeadVectors, list[str], list[str]]:
    """The head's q and k for every kept token (a seeded uniform sample of ``max_points // 2`` tokens
    when there are more), with each point's token and its context (4 tokens each side).

    ``texts``: a list or a ``TextSource`` read ``window`` texts at a time: a first pass counts each
    text's kept tokens (the sample is drawn over all of them, as from one flat list), a second runs the
    windows that hold sampled tokens. A corpus of one window is tokenised once."""
    if not 0 <= head < loaded.n_heads:
        raise HeadscopeError(
            f"head {head} is out of range: {loaded.name} has heads 0-{loaded.n_heads - 1}"
        )
    report = progress or no_progress
    source = as_source(texts)
    n = len(source)
    firsts = list(range(0, n, window))

    def encoded(first: int) -> tuple[Any, list[list[int]]]:
        win = [t for b in source.batches(first, min(first + window, n), batch=window) for t in b]
        enc = encode_corpus(loaded, win, max_tokens=max_tokens)
        return enc, [[p for p, s in enumerate(row) if keep_special or not s] for row in enc.special]

    counts = np.zeros(n, dtype=np.int64)  # kept tokens of each text
    only = None
    for wi, first in enumerate(firsts):
        enc, kept = encoded(first)
        counts[first : first + len(kept)] = [len(k) for k in kept]
        only = (enc, kept) if len(firsts) == 1 else None
        if len(firsts) > 1:
            report(0.1 * (wi + 1) / len(firsts), f"counting tokens: {first + len(kept)}/{n} texts")
    total = int(counts.sum())
    if total == 0:
        raise HeadscopeError("no text of the corpus has a token left (only special tokens)")
    limit = max(1, max_points // 2)
    chosen: dict[int, list[int]] | None = None  # text -> indices into its kept positions
    if total > limit:
        pick = np.sort(np.random.default_rng(seed).choice(total, size=limit, replace=False))
        starts = np.cumsum(counts) - counts  # flat index of each text's first kept token
        chosen = {}
        for f, t in zip(
            pick.tolist(), (np.searchsorted(starts, pick, side="right") - 1).tolist(), strict=True
        ):
            chosen.setdefault(t, []).append(f - int(starts[t]))
    needed = None if chosen is None else {t // window for t in chosen}
    qs, ks, where_t, where_p, tokens, context = [], [], [], [], [], []
    for wi, first in enumerate(firsts):
        if needed is not None and wi not in needed:
            continue
        enc, kept = only if only is not None else encoded(first)
        wanted = {
            i: ([row[j] for j in chosen[first + i]] if chosen is not None else row)
            for i, row in enumerate(kept)
            if row and (chosen is None or first + i in chosen)
        }
        todo = sorted(wanted)
        plan = [
            [todo[j] for j in b]
            for b in batches(
                [len(enc.ids[i]) for i in todo], batch_tokens=batch_tokens, max_batch=64
            )
        ]
        for bi, batch in enumerate(plan):
            if should_stop is not None and should_stop():
                raise CancelledError("the joint query-key map")
            got: dict[str, torch.Tensor] = {}

            def keep(q: torch.Tensor, k: torch.Tensor, got: dict[str, torch.Tensor] = got) -> None:
                got["q"], got["k"] = q[:, head].float().cpu(), k[:, head].float().cpu()

            encs = [Encoded(enc.ids[i], [], [], []) for i in batch]
            run_capture(loaded, batch_inputs(loaded, encs), layer, keep)
            for row, i in enumerate(batch):
                pos = wanted[i]
                qs.append(got["q"][row, pos].numpy())
                ks.append(got["k"][row, pos].numpy())
                where_t += [first + i] * len(pos)
                where_p += pos
                tokens += [enc.tokens[i][p] for p in pos]
                context += [" ".join(enc.tokens[i][max(0, p - 4) : p + 5]) for p in pos]
            done = (wi + (bi + 1) / len(plan)) / len(firsts)
            report(
                0.1 + 0.9 * done if len(firsts) > 1 else done,
                f"queries and keys: batch {bi + 1}/{len(plan)}"
                + (f" of window {wi + 1}/{len(firsts)}" if len(firsts) > 1 else ""),
            )
        del enc, kept
    vec = HeadVectors(
        np.concatenate(qs), np.concatenate(ks), np.asarray(where_t), np.asarray(where_p), total
    )
    return vec, tokens, context


def joint_map(
    loaded: LoadedModel,
    texts: Sequence[str] | TextSource,
    *,
    layer: int,
    head: int,
    max_tokens: int = 128,
    keep_special: bool = False,
    max_points: int = 10_000,
    method: str = "pca",
    seed: int = 0,
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """The joint query–key map of head (``layer``, ``head``): keys docs/results.md, "corpus"."""
    report = progress or no_progress
    t0 = time.perf_counter()
    vec, tokens, context = head_vectors(
        loaded,
        texts,
        layer=layer,
        head=head,
        max_tokens=max_tokens,
        keep_special=keep_special,
        max_points=max_points,
        seed=seed,
        progress=lambda f, m: report(0.5 * f, m),
        should_stop=should_stop,
    )
    q, k, info = align(vec.q.astype(np.float64), vec.k.astype(np.float64))
    report(0.5, f"embedding {2 * len(q)} points ({method})")
    xy = embed_2d(np.concatenate([q, k]), method=method, seed=seed)
    n = len(q)
    report(1.0, "done")
    return {
        "layer": layer,
        "head": head,
        "method": method,
        "n_points": 2 * n,
        "n_tokens": vec.total,
        "sampled": n < vec.total,
        "max_points": max_points,
        **info,
        "xy": np.round(xy, 4).tolist(),  # queries first (n), then keys (n), token by token
        "text": vec.text.tolist(),
        "position": vec.position.tolist(),
        "token": tokens,
        "context": context,
        "q_norm": np.round(np.linalg.norm(q, axis=1), 4).tolist(),
        "k_norm": np.round(np.linalg.norm(k, axis=1), 4).tolist(),
        "seconds": round(time.perf_counter() - t0, 3),
    }
