"""Two models on the same texts (docs/compare.md): head similarity over word-level maps,
the Hungarian matching, both models' corpus profiles in one standardised table and map, and the
decoders' surprisal per word side by side.

Model A runs over every text first and its word-level maps are kept (float32); then model B runs
text by text and each text's similarity sums are folded in, so only one model need be loaded at a
time (``compare_models`` takes loaders, and ``release`` drops A before B loads when both do not fit).
A large corpus runs in parts of whole windows of texts (``workers.analyses.compare.parts``: both
models a part, ``run_both`` and ``finish_compare`` shared with the one piece). Notebook use::

    from workers.models import load_model
    from workers.analyses.compare.comparison import compare_models
    res = compare_models(lambda: load_model("minilm"), lambda: load_model("smollm2"), ["A text."])
    res["similarity"]        # [heads of A][heads of B], heads in layer-major order
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from workers.analyses.compare.head_similarity import SimilarityAccumulator
from workers.analyses.compare.word_maps import covered, token_words, word_spans
from workers.analyses.corpus.run import WINDOW_TEXTS, CorpusOptions, corpus_statistics, head_map
from workers.core.errors import HeadscopeError
from workers.core.progress import Progress, no_progress, scaled

if TYPE_CHECKING:
    from workers.models.loader import LoadedModel

logger = logging.getLogger(__name__)
LN2 = math.log(2.0)


def matching(sim: np.ndarray) -> dict[str, Any]:
    """The one-to-one assignment maximising the summed similarity (Hungarian method), and each
    head's best partner. Heads are flat indices ``layer * n_heads + head``."""
    rows, cols = linear_sum_assignment(sim, maximize=True)
    return {
        "pairs": [
            {"a": int(r), "b": int(c), "similarity": float(sim[r, c])}
            for r, c in zip(rows, cols, strict=True)
        ],
        "total": float(sim[rows, cols].sum()),
        "best_of_a": [
            {"b": int(j), "similarity": float(sim[i, j])} for i, j in enumerate(sim.argmax(axis=1))
        ],
        "best_of_b": [
            {"a": int(i), "similarity": float(sim[i, j])} for j, i in enumerate(sim.argmax(axis=0))
        ],
    }


def joint_profiles(
    stats_a: dict[str, list[list[Any]]], stats_b: dict[str, list[list[Any]]]
) -> dict[str, Any]:
    """Both models' corpus statistics (docs/corpus.md) standardised together: the table ``z``
    [statistic][head of A then B] and one map of heads (``xy_a`` [head][2], ``xy_b``)."""
    stats = [s for s in stats_a if s in stats_b]
    a = {s: np.array(stats_a[s], dtype=float).reshape(1, -1) for s in stats}
    b = {s: np.array(stats_b[s], dtype=float).reshape(1, -1) for s in stats}
    n_a = next(iter(a.values())).shape[1]
    both = {s: np.concatenate([a[s], b[s]], axis=1) for s in stats}
    hm = head_map(both)
    xy = np.array(hm["xy"]).reshape(-1, 2)
    z = {}
    for s in stats:
        x = both[s][0]
        ok = np.isfinite(x)
        mu, sd = (x[ok].mean(), x[ok].std()) if ok.any() else (0.0, 0.0)
        z[s] = [
            None if not f else (float((v - mu) / sd) if sd > 1e-12 else 0.0)
            for v, f in zip(x, ok, strict=True)
        ]
    return {
        "statistics": stats,
        "z": z,
        "raw": {s: [None if not np.isfinite(v) else float(v) for v in both[s][0]] for s in stats},
        "xy_a": xy[:n_a].tolist(),
        "xy_b": xy[n_a:].tolist(),
        "explained": hm["explained"],
        "loadings": hm["loadings"],
    }


LOGIT_ELEMENTS = 2**24  # logits of one block of rows [rows, vocabulary]: 64 MiB in float32


def next_token_bits(
    loaded: LoadedModel, hidden: torch.Tensor, ids: list[list[int]]
) -> list[tuple[np.ndarray, list[int]]]:
    """Per text of a right-padded batch: ``-log2 p(token t | before)`` of each token (NaN for the first)
    and the top next-token id after each token but the last. ``hidden`` [batch, width, dim]: the last
    hidden state, final norm applied (HF's last state of a decoder). The rows of all texts share each
    unembedding block (``LOGIT_ELEMENTS`` at a time): the vocabulary matrix is read once per block, not
    per text; only the log-sum-exp, the one gathered logit and the top id are kept of each row."""
    assert loaded.unembed is not None
    rows = torch.cat([hidden[j, : len(r) - 1] for j, r in enumerate(ids)])  # [tokens - texts, dim]
    nxt = torch.tensor(
        [t for r in ids for t in r[1:]], dtype=torch.long, device=hidden.device
    )  # what follows
    lse, tgt, top = [], [], []
    step = max(1, LOGIT_ELEMENTS // loaded.unembed.vocab_size)
    for r0 in range(0, rows.shape[0], step):
        z = loaded.unembed.logits(rows[r0 : r0 + step]).float()  # [rows, vocabulary]
        lse.append(torch.logsumexp(z, dim=-1))
        tgt.append(z.gather(1, nxt[r0 : r0 + step, None])[:, 0])
        top.append(z.argmax(dim=-1))
    if not lse:  # one-token texts only
        return [(np.full(len(r), np.nan), []) for r in ids]
    bits = (
        ((torch.cat(lse) - torch.cat(tgt)) / LN2).cpu().numpy()
    )  # the surprisal of the *next* token
    tops = torch.cat(top).cpu().tolist()
    out, at = [], 0
    for r in ids:
        own = np.full(len(r), np.nan)
        own[1:] = bits[at : at + len(r) - 1]
        out.append((own, tops[at : at + len(r) - 1]))
        at += len(r) - 1
    return out


def word_surprisal(
    loaded: LoadedModel, tok_bits: np.ndarray, top: list[int], member: np.ndarray
) -> dict[str, Any]:
    """Per word: the surprisal (bits, the sum over its tokens of ``-log2 p(token | before)``, ``tok_bits``;
    None when its first token opens the text) and the model's top prediction for its first token
    (``top``: the top next-token id after each token)."""
    surprisal: list[float | None] = []
    predicted: list[str | None] = []
    for w in range(member.shape[1]):
        toks = np.flatnonzero(member[:, w])
        if toks.size == 0 or toks[0] == 0:
            surprisal.append(None)
            predicted.append(None)
            continue
        bits = tok_bits[toks]
        surprisal.append(None if np.isnan(bits).any() else round(float(bits.sum()), 4))
        predicted.append(loaded.tokenizer.decode([top[toks[0] - 1]]))
    return {"surprisal": surprisal, "predicted": predicted}


class WordMapTap:
    """Reads the corpus run's padded batches (``corpus_statistics(tap=...)``): every head's word-level
    map of each text, and the surprisal per word when ``surprisal``; ``per_text(i, part)`` gets each
    text's ``{"member", "maps" [heads, words, words], "surprisal", "predicted"}`` after its batch."""

    def __init__(
        self,
        loaded: LoadedModel,
        texts: list[str],
        *,
        max_tokens: int,
        surprisal: bool,
        per_text: Callable[[int, dict[str, Any]], None],
    ):
        self.loaded, self.texts, self.surprisal, self.per_text = loaded, texts, surprisal, per_text
        self.limit = min(max_tokens, loaded.max_length)

    def start(self, batch: list[int], ids: list[list[int]]) -> None:
        tok, dev = self.loaded.tokenizer, self.loaded.device
        self.batch, self.ids, self.members = batch, ids, []
        width = max(len(r) for r in ids)
        for i, row in zip(batch, ids, strict=True):
            enc = tok(
                self.texts[i],
                return_offsets_mapping=True,
                return_special_tokens_mask=True,
                truncation=len(row) >= self.limit,
                max_length=self.limit,
                verbose=False,
            )
            if list(enc["input_ids"]) != row:
                raise HeadscopeError(f"text {i}: the tokenizer's offsets do not match its tokens")
            self.members.append(
                token_words(
                    [tuple(o) for o in enc["offset_mapping"]],
                    [bool(x) for x in enc["special_tokens_mask"]],
                    word_spans(self.texts[i]),
                )
            )
        u = max(m.shape[1] for m in self.members)
        padded = np.zeros((len(batch), width, u), dtype=np.float32)
        for j, m in enumerate(self.members):
            padded[j, : m.shape[0], : m.shape[1]] = m
        self.m = torch.from_numpy(padded).to(dev)  # [batch, token, word]
        self.counts = self.m.sum(dim=1).clamp(min=1)  # [batch, word]
        L, H = self.loaded.n_layers, self.loaded.n_heads
        self.maps = [
            np.zeros((L, H, m.shape[1], m.shape[1]), dtype=np.float32) for m in self.members
        ]

    def layer(self, layer: int, weights: torch.Tensor) -> None:
        a = weights.float()  # [batch, head, query, key]
        w = torch.einsum("bqu,bhqk,bkv->bhuv", self.m, a, self.m) / self.counts[:, None, :, None]
        total = w.sum(dim=-1, keepdim=True)
        w = torch.where(total > 0, w / total.clamp(min=1e-30), 0.0).cpu().numpy()
        for j, m in enumerate(self.members):
            u = m.shape[1]
            self.maps[j][layer] = w[j, :, :u, :u]

    def finish(self, output: Any) -> None:
        bits = (
            next_token_bits(self.loaded, output.last_hidden_state, self.ids)
            if self.surprisal
            else None
        )
        for j, i in enumerate(self.batch):
            maps = self.maps[j]
            part: dict[str, Any] = {
                "member": self.members[j],
                "maps": maps.reshape(-1, *maps.shape[2:]),
            }
            if bits is not None:
                part.update(word_surprisal(self.loaded, *bits[j], self.members[j]))
            self.per_text(i, part)
        self.maps = []


def side_facts(loaded: LoadedModel) -> dict[str, Any]:
    """One model's keys of a comparison result (``model_a``, ``model_b``)."""
    return {
        "name": loaded.name,
        "family": loaded.family,
        "causal": loaded.causal,
        "n_layers": loaded.n_layers,
        "n_heads": loaded.n_heads,
        "has_lm_head": bool(loaded.causal and loaded.unembed is not None),
    }


class WindowFlush:
    """Flushes a ``SimilarityAccumulator`` whenever a text of a new window arrives (``__call__(i)``
    before adding text ``i``): the pairwise term's float32 blocks then depend only on each window's
    texts, so a comparison split into parts of whole windows sums the same blocks (docs/scaling.md)."""

    def __init__(self, acc: SimilarityAccumulator, window: int):
        self.acc, self.window = acc, window
        self.current: int | None = None

    def __call__(self, i: int) -> None:
        w = i // self.window
        if w != self.current:
            self.acc.flush()
            self.current = w


def finish_compare(
    facts_a: dict[str, Any],
    facts_b: dict[str, Any],
    *,
    stats_a: dict[str, Any],
    stats_b: dict[str, Any],
    acc: SimilarityAccumulator,
    causal: bool,
    texts: list[str],
    words_a: dict[int, dict[str, Any]],
    words_b: dict[int, dict[str, Any]],
    max_tokens: int,
    seconds: float,
    report: Progress = no_progress,
) -> dict[str, Any]:
    """The result of a comparison from both models' statistics and the similarity sums (one job, or the
    merge of a split one: ``workers.analyses.compare.parts``). Keys: docs/results.md, "compare"."""
    if acc.rows == 0:
        raise HeadscopeError("no query word sees two words in both models; use longer texts")
    sim = acc.sums() / acc.rows
    report(0.97, "matching heads")
    result = {
        "model_a": facts_a,
        "model_b": facts_b,
        "n_texts": len(texts),
        "n_query_words": acc.rows,
        "causal": causal,
        "similarity": np.round(sim, 5).tolist(),
        "matching": matching(sim),
        "profiles": joint_profiles(stats_a, stats_b),
        "max_tokens": max_tokens,
        "seconds": round(seconds, 3),
    }
    if facts_a["has_lm_head"] or facts_b["has_lm_head"]:
        empty = {"surprisal": None, "predicted": None}
        words = [[t[s:e] for s, e in word_spans(t)] for t in texts]
        result["words"] = [
            {"words": w, "a": words_a.get(i, empty), "b": words_b.get(i, empty)}
            for i, w in enumerate(words)
        ]
    return result


@dataclass
class BothRuns:
    """What ``run_both`` leaves: each model's facts and corpus run, the similarity sums, the words."""

    facts_a: dict[str, Any]
    facts_b: dict[str, Any]
    run_a: dict[str, Any]
    run_b: dict[str, Any]
    acc: SimilarityAccumulator
    causal: bool
    words_a: dict[int, dict[str, Any]]
    words_b: dict[int, dict[str, Any]]


SideRun = Callable[["LoadedModel", WordMapTap, Progress], dict[str, Any]]


def run_both(
    load_a: Callable[[], LoadedModel],
    load_b: Callable[[], LoadedModel],
    texts: list[str],
    *,
    max_tokens: int,
    window: int,
    run_side: SideRun,
    release: Callable[[], None] | None = None,
    report: Progress = no_progress,
) -> BothRuns:
    """Model A over ``texts`` (its word maps kept), then model B (each text's similarity folded in and
    A's maps of it dropped). ``run_side(loaded, tap, progress)`` runs one model's corpus pass with the
    tap (``corpus_statistics`` in one job, ``corpus_partial`` in a part)."""
    kept_a: dict[int, dict[str, Any]] = {}
    words_a: dict[int, dict[str, Any]] = {}
    report(0.0, "loading model A")
    a = load_a()
    facts_a = side_facts(a)

    def keep_a(i: int, part: dict[str, Any]) -> None:
        kept_a[i] = {"valid": covered(part["member"]), "maps": part["maps"]}
        words_a[i] = {k: part.get(k) for k in ("surprisal", "predicted")}

    tap = WordMapTap(
        a, texts, max_tokens=max_tokens, surprisal=facts_a["has_lm_head"], per_text=keep_a
    )
    run_a = run_side(a, tap, scaled(report, 0.0, 0.45))
    del a, tap
    if release is not None:
        release()
    report(0.5, "loading model B")
    b = load_b()
    facts_b = side_facts(b)
    causal = bool(facts_a["causal"] or b.causal)
    acc = SimilarityAccumulator(facts_a["n_layers"] * facts_a["n_heads"], b.n_layers * b.n_heads)
    flush = WindowFlush(acc, window)
    words_b: dict[int, dict[str, Any]] = {}

    def fold_b(i: int, part: dict[str, Any]) -> None:
        flush(i)
        words_b[i] = {k: part.get(k) for k in ("surprisal", "predicted")}
        mine = kept_a.pop(i, None)  # done with this text's maps of A after this
        if mine is None:  # model A had no token of it
            return
        valid = mine["valid"] & covered(part["member"])
        acc.add(mine["maps"], part["maps"], valid=valid, causal=causal)

    tap = WordMapTap(
        b, texts, max_tokens=max_tokens, surprisal=facts_b["has_lm_head"], per_text=fold_b
    )
    run_b = run_side(b, tap, scaled(report, 0.5, 0.95))
    return BothRuns(facts_a, facts_b, run_a, run_b, acc, causal, words_a, words_b)


def check_texts(texts: list[str]) -> None:
    if not texts or not any(word_spans(t) for t in texts):
        raise HeadscopeError("the texts have no word (only spaces)")


def compare_models(
    load_a: Callable[[], LoadedModel],
    load_b: Callable[[], LoadedModel],
    texts: list[str],
    *,
    max_tokens: int = 128,
    release: Callable[[], None] | None = None,
    progress: Progress | None = None,
    window: int = WINDOW_TEXTS,
) -> dict[str, Any]:
    """Compare two models on ``texts`` (docs/compare.md). Keys: docs/results.md, "compare".

    ``release`` is called between the two models (the job passes one that drops model A when the
    memory budget cannot hold both). ``window``: texts sorted into padded batches together, the part
    size of a split comparison (``workers.analyses.compare.parts``), whose merge then equals this."""
    report = progress or no_progress
    texts = [t for t in texts]
    check_texts(texts)
    t0 = time.perf_counter()
    options = CorpusOptions(max_tokens=max_tokens, top_k=0)

    def run_side(loaded: LoadedModel, tap: WordMapTap, side_progress: Progress) -> dict[str, Any]:
        return corpus_statistics(
            loaded, texts, options=options, progress=side_progress, tap=tap, window=window
        )

    both = run_both(
        load_a,
        load_b,
        texts,
        max_tokens=max_tokens,
        window=window,
        run_side=run_side,
        release=release,
        report=report,
    )
    result = finish_compare(
        both.facts_a,
        both.facts_b,
        stats_a=both.run_a["statistics"],
        stats_b=both.run_b["statistics"],
        acc=both.acc,
        causal=both.causal,
        texts=texts,
        words_a=both.words_a,
        words_b=both.words_b,
        max_tokens=max_tokens,
        seconds=time.perf_counter() - t0,
        report=report,
    )
    report(1.0, "done")
    return result
