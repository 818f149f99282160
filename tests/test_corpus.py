"""Heads across a corpus (issue 24, docs/corpus.md): every statistic against a direct numpy computation from
each text's own maps, padded batches against one text at a time, top pairs, histograms, cancel."""

from __future__ import annotations

import numpy as np
import pytest

from workers.analyses.corpus.run import CorpusOptions, batches, corpus_statistics, head_map
from workers.analyses.corpus.statistics import STATISTICS, repeat_keys
from workers.core.errors import CancelledError, HeadscopeError
from workers.models import load_model
from workers.models.adapters import encode, forward

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TEXTS = [
    "The cat sat on the mat and the cat sat on the hat.",
    "A short one.",
    "Red green blue red green blue red green blue.",
    "One two three four five six seven eight nine ten eleven twelve, then one two three again.",
    "Words.",
]


def reference(loaded, texts: list[str], *, keep_special: bool) -> tuple[dict, dict, list]:
    """Sums, counts and every (weight, text, query, key) straight from the definitions, text by text."""
    sums = {s: np.zeros((loaded.n_layers, loaded.n_heads)) for s in STATISTICS}
    counts = dict.fromkeys(STATISTICS, 0)
    pairs: list = []
    for t, text in enumerate(texts):
        enc = encode(loaded, text)
        attn, _ = forward(loaded, enc)  # [layer, head, n, n]
        kept = [p for p in range(enc.n) if keep_special or not enc.special[p]]
        ids = [enc.input_ids[p] for p in kept]
        a = attn[:, :, kept][:, :, :, kept].astype(np.float64)
        m = len(kept)
        for i in range(m):
            keys = list(range(i + 1)) if loaded.causal else list(range(m))
            row = a[:, :, i, keys] / a[:, :, i, keys].sum(-1, keepdims=True)  # [layer, head, key]
            full = np.zeros((loaded.n_layers, loaded.n_heads, m))
            full[:, :, keys] = row
            ent = -(row * np.log(np.where(row > 0, row, 1.0))).sum(-1)
            sums["entropy"] += ent
            counts["entropy"] += 1
            if len(keys) >= 2:
                sums["entropy_normalised"] += ent / np.log(len(keys))
                counts["entropy_normalised"] += 1
            if i >= 1:
                sums["sink"] += full[:, :, 0]
                sums["previous"] += full[:, :, i - 1]
                counts["sink"] += 1
                counts["previous"] += 1
            sums["self"] += full[:, :, i]
            counts["self"] += 1
            sums["distance"] += (full * np.abs(i - np.arange(m))).sum(-1)
            counts["distance"] += 1
            earlier = [p for p in range(i - 1) if ids[p] == ids[i]]
            if earlier:
                p = max(earlier)
                sums["induction"] += full[:, :, p + 1]
                sums["duplicate"] += full[:, :, p]
                counts["induction"] += 1
                counts["duplicate"] += 1
            if len(keys) >= 2:
                for j in keys:
                    if j != i and j != 0:
                        pairs.append((full[:, :, j], t, kept[i], kept[j]))
    return sums, counts, pairs


@pytest.mark.parametrize("name", ["tiny-bert", "tiny-llama", "tiny-gpt2"])
@pytest.mark.parametrize("keep_special", [False, True])
def test_every_statistic_equals_the_direct_computation(catalogue, name, keep_special):
    loaded = load_model(name, device="cpu")
    res = corpus_statistics(
        loaded, TEXTS, options=CorpusOptions(keep_special=keep_special, max_batch=3)
    )
    sums, counts, pairs = reference(loaded, TEXTS, keep_special=keep_special)
    assert counts["induction"] > 0 and counts["duplicate"] == counts["induction"]
    for stat in STATISTICS:
        got = np.array(res["statistics"][stat], dtype=float)
        np.testing.assert_allclose(
            got, sums[stat] / counts[stat], rtol=1e-5, atol=1e-6, err_msg=stat
        )
        assert np.all(np.array(res["counts"][stat]) == counts[stat]), stat
    # top pairs: the largest weights among every (query, key) but sink and self, with their places
    for layer in range(loaded.n_layers):
        for head in range(loaded.n_heads):
            best = sorted(((w[layer, head], t, q, k) for w, t, q, k in pairs), key=lambda x: -x[0])[
                :20
            ]
            got = res["top_pairs"][layer][head]
            np.testing.assert_allclose(
                [p["weight"] for p in got], [b[0] for b in best], rtol=1e-5, atol=1e-7
            )
            top = got[0]
            assert (top["text"], top["query"], top["key"]) in {
                (t, q, k) for w, t, q, k in best if abs(w - best[0][0]) < 1e-6
            }
            assert (
                top["tokens"][top["q_at"]] == top["query_token"]
                and top["tokens"][top["k_at"]] == top["key_token"]
            )
    assert res["n_texts"] == len(TEXTS) and res["truncated"] == 0


def test_padded_batches_equal_one_text_at_a_time(catalogue):
    loaded = load_model("tiny-llama", device="cpu")
    one = corpus_statistics(loaded, TEXTS, options=CorpusOptions(max_batch=1))
    many = corpus_statistics(loaded, TEXTS, options=CorpusOptions(max_batch=16))
    for stat in STATISTICS:
        np.testing.assert_allclose(
            np.array(many["statistics"][stat], dtype=float),
            np.array(one["statistics"][stat], dtype=float),
            rtol=1e-5,
            atol=1e-6,
        )
        assert many["counts"][stat] == one["counts"][stat]
        assert many["histograms"][stat]["counts"] == one["histograms"][stat]["counts"]
    w1 = [[[p["weight"] for p in h] for h in layer] for layer in one["top_pairs"]]
    w2 = [[[p["weight"] for p in h] for h in layer] for layer in many["top_pairs"]]
    np.testing.assert_allclose(np.array(w2), np.array(w1), rtol=1e-5, atol=1e-7)


def test_histograms_count_texts_and_truncation_is_counted(catalogue):
    loaded = load_model("tiny-bert", device="cpu")
    res = corpus_statistics(loaded, TEXTS, options=CorpusOptions(max_tokens=8))
    assert res["truncated"] == sum(len(encode(loaded, t).input_ids) > 8 for t in TEXTS) > 0
    assert res["n_tokens"] <= 8 * len(TEXTS)
    for stat in ("entropy", "self", "previous"):
        h = np.array(res["histograms"][stat]["counts"])  # [layer, head, bin]
        assert h.shape[2] == res["histograms"][stat]["bins"]
        assert np.all(h.sum(-1) == len(TEXTS))  # every text has queries for these
    ind = np.array(res["histograms"]["induction"]["counts"]).sum(-1)
    assert np.all(ind < len(TEXTS))  # only texts with a repeated token


def test_partial_results_progress_and_cancel(catalogue):
    loaded = load_model("tiny-bert", device="cpu")
    partials, messages = [], []
    res = corpus_statistics(
        loaded,
        TEXTS,
        options=CorpusOptions(max_batch=1),
        on_batch=partials.append,
        progress=lambda f, m: messages.append((f, m)),
    )
    assert [p["n_texts"] for p in partials] == [1, 2, 3, 4]
    assert (
        set(partials[0]) >= {"statistics", "counts", "n_texts"} and "top_pairs" not in partials[0]
    )
    assert messages[-1][0] == 1.0 and "texts/s" in messages[-1][1]
    assert res["n_texts"] == 5
    calls = iter(range(100))
    with pytest.raises(CancelledError):
        corpus_statistics(
            loaded, TEXTS, options=CorpusOptions(max_batch=1), should_stop=lambda: next(calls) >= 2
        )
    with pytest.raises(HeadscopeError, match="unknown statistic"):
        corpus_statistics(loaded, TEXTS, options=CorpusOptions(statistics=("nope",)))


def test_repeat_keys_and_batches():
    dup, ind = repeat_keys([5, 6, 5, 6, 6, 5])
    # position 4 (6): copies at 1 and 3; p < i - 1 = 3 leaves 1
    assert dup.tolist() == [-1, -1, 0, 1, 1, 2]
    assert ind.tolist() == [-1, -1, 1, 2, 2, 3]
    plan = batches([3, 10, 4, 9, 2], batch_tokens=20, max_batch=3)
    assert sorted(i for b in plan for i in b) == [0, 1, 2, 3, 4]
    assert all(len(b) * max([3, 10, 4, 9, 2][i] for i in b) <= 20 for b in plan)


def test_head_map_separates_distinct_heads():
    means = {
        "previous": np.array([[0.9, 0.1], [0.1, 0.1]]),
        "self": np.array([[0.0, 0.8], [0.1, 0.1]]),
        "induction": np.full((2, 2), np.nan),
    }
    hm = head_map(means)
    xy = np.array(hm["xy"]).reshape(4, 2)
    assert np.all(np.isfinite(xy))
    assert (
        np.linalg.norm(xy[0] - xy[1]) > np.linalg.norm(xy[2] - xy[3]) + 1.0
    )  # two ordinary heads coincide
    assert hm["statistics"] == ["previous", "self", "induction"]


def test_gathered_kept_maps_equal_the_sliced_ones(catalogue):
    """Rows whose kept tokens do not start at one offset are gathered; both paths agree."""
    import dataclasses

    import torch

    from workers.analyses.corpus.statistics import KeptBatch, kept_maps, query_statistics

    loaded = load_model("tiny-bert", device="cpu")
    encs = [encode(loaded, t) for t in TEXTS[:3]]
    width = max(e.n for e in encs)
    maps = []
    for e in encs:
        attn, _ = forward(loaded, e)
        maps.append(np.pad(attn[1], ((0, 0), (0, width - e.n), (0, width - e.n))))
    weights = torch.tensor(np.stack(maps))  # [batch, head, n, n]
    keep = [[not s for s in e.special] for e in encs]
    kept = KeptBatch.build([e.input_ids for e in encs], keep, [0, 1, 2], device=torch.device("cpu"))
    assert kept.offset == 1
    sliced = query_statistics(*kept_maps(weights, kept), kept, causal=False)
    gathered_kept = dataclasses.replace(kept, offset=None)
    gathered = query_statistics(*kept_maps(weights, gathered_kept), gathered_kept, causal=False)
    mask = sliced[1][:, :, None, :].expand_as(sliced[0])
    torch.testing.assert_close(gathered[0][mask], sliced[0][mask])
    assert torch.equal(gathered[1], sliced[1])
