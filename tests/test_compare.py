"""Word-level maps and the comparison of two models (docs/compare.md, SPEC 13) on tiny random models."""

from __future__ import annotations

import numpy as np
import pytest

from workers.analyses.compare.comparison import compare_models, matching
from workers.analyses.compare.head_similarity import similarity_sums
from workers.analyses.compare.word_maps import text_word_maps, token_words, word_level, word_spans
from workers.core.errors import HeadscopeError
from workers.models import load_model, run_text

TEXTS = [
    "the cat sat on the mat and the dog slept by the door",
    "Transformers attend to earlier tokens; tokenizers cut words differently.",
    "a b c a b c a b c",
]


def test_word_spans_and_membership():
    text = "  Hello,  wor-ld \n x"
    spans = word_spans(text)
    assert [text[a:b] for a, b in spans] == ["Hello,", "wor-ld", "x"]
    # a token across two words belongs to both; a special token and an empty span to none
    m = token_words(
        [(0, 0), (2, 8), (7, 12), (12, 16), (19, 20)], [True, False, False, False, False], spans
    )
    assert m.tolist() == [[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1]]


def test_word_map_equals_token_map_when_no_word_is_split(catalogue):
    loaded = load_model("tiny-bert", device="cpu")
    text = TEXTS[0]  # every word one WordPiece token
    run = run_text(loaded, text)
    res = text_word_maps(loaded, text)
    keep = ~run.special
    assert res["words"] == text.split() and sum(keep) == len(res["words"])
    tok = run.attentions[:, :, keep][:, :, :, keep]
    tok = tok / tok.sum(axis=-1, keepdims=True)  # rows over the word keys
    np.testing.assert_allclose(np.array(res["maps"]), tok, atol=2e-5)


def test_word_map_rows_sum_to_one_and_respect_causality(catalogue):
    loaded = load_model("tiny-llama", device="cpu")
    res = text_word_maps(loaded, TEXTS[1])
    maps = np.array(res["maps"])  # [L, H, U, U]
    assert maps.shape[2] == maps.shape[3] == len(TEXTS[1].split())
    np.testing.assert_allclose(maps.sum(axis=-1), 1.0, atol=1e-4)
    assert np.all(np.triu(maps, k=1) == 0)  # no word attends to a later word


def test_word_level_of_split_words_pools_their_tokens():
    a = np.array([[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]])  # 3 tokens; tokens 1, 2 form word 1
    m = np.array([[1.0, 0], [0, 1], [0, 1]])
    w = word_level(a, m)
    np.testing.assert_allclose(w, [[1.0, 0.0], [0.35, 0.65]])


def test_text_with_no_word_is_an_error(catalogue):
    with pytest.raises(HeadscopeError, match="no word"):
        text_word_maps(load_model("tiny-bert", device="cpu"), "   \n ")


def test_model_against_itself_has_unit_diagonal_and_identity_matching(catalogue):
    res = compare_models(
        lambda: load_model("tiny-gpt2", device="cpu"),
        lambda: load_model("tiny-gpt2", device="cpu"),
        TEXTS,
    )
    sim = np.array(res["similarity"])
    n = sim.shape[0]
    assert sim.shape == (n, n) and n == res["model_a"]["n_layers"] * res["model_a"]["n_heads"]
    np.testing.assert_allclose(np.diag(sim), 1.0, atol=1e-5)
    assert np.all(sim <= 1 + 1e-6) and np.all(sim >= 0)
    np.testing.assert_allclose(sim, sim.T, atol=1e-5)
    assert [(p["a"], p["b"]) for p in res["matching"]["pairs"]] == [(i, i) for i in range(n)]
    assert [b["b"] for b in res["matching"]["best_of_a"]] == list(range(n))
    prof = res["profiles"]
    assert len(prof["xy_a"]) == len(prof["xy_b"]) == n
    np.testing.assert_allclose(
        prof["xy_a"], prof["xy_b"], atol=1e-9
    )  # the same statistics, one map
    w = res["words"][0]  # a decoder with a head: surprisal per word, the first word has none
    assert w["words"] == TEXTS[0].split() and w["a"]["surprisal"] == w["b"]["surprisal"]
    assert all(s is None or s >= 0 for s in w["a"]["surprisal"][1:])


def test_shuffled_copy_of_a_head_scores_lower(minilm):
    maps = np.array(text_word_maps(minilm, TEXTS[0])["maps"], dtype=np.float32)  # [L, H, U, U]
    heads = maps.reshape(-1, *maps.shape[2:])
    rng = np.random.default_rng(0)
    shuffled = heads[:, :, rng.permutation(heads.shape[-1])]  # keys of every row in another order
    valid = np.ones(heads.shape[-1], dtype=bool)
    same, n = similarity_sums(heads, heads, valid=valid, causal=False)
    other, _ = similarity_sums(heads, shuffled, valid=valid, causal=False)
    np.testing.assert_allclose(np.diag(same) / n, 1.0, atol=1e-5)
    drop = np.diag(same) / n - np.diag(other) / n
    assert np.all(drop > 0) and drop.mean() > 0.05, drop


def test_similarity_is_one_minus_jsd_in_bits():
    p = np.array([[[1.0, 0.0], [0.5, 0.5]]], dtype=np.float32)
    q = np.array([[[1.0, 0.0], [1.0, 0.0]]], dtype=np.float32)
    s, n = similarity_sums(p, q, valid=np.array([True, True]), causal=False)
    # row 0 identical (JSD 0); row 1: JSD((.5,.5), (1,0)) = H(.75,.25) - 0.5 = 0.3113 bits
    h = -(0.75 * np.log2(0.75) + 0.25 * np.log2(0.25))
    assert n == 2 and s[0, 0] == pytest.approx(1 + (1 - (h - 0.5)), abs=1e-5)
    # causally the first word sees one word only: not counted
    s, n = similarity_sums(p, q, valid=np.array([True, True]), causal=True)
    assert n == 1


def test_matching_rectangular_gives_every_smaller_side_head_one_partner():
    sim = np.array([[0.9, 0.1, 0.3], [0.8, 0.2, 0.7]])
    m = matching(sim)
    assert {(p["a"], p["b"]) for p in m["pairs"]} == {(0, 0), (1, 2)}
    assert [b["b"] for b in m["best_of_a"]] == [0, 0] and [a["a"] for a in m["best_of_b"]] == [
        0,
        1,
        1,
    ]


def test_encoder_against_decoder_different_tokenizers(catalogue):
    res = compare_models(
        lambda: load_model("tiny-bert", device="cpu"),
        lambda: load_model("tiny-gpt2", device="cpu"),
        TEXTS,
        max_tokens=16,
    )
    sim = np.array(res["similarity"])
    assert sim.shape == (8, 8) and res["causal"] and np.all((sim >= 0) & (sim <= 1))
    assert len(res["matching"]["pairs"]) == 8


def test_word_maps_analysis_in_the_pipeline_equals_the_notebook_call(catalogue):
    from workers import analyze

    loaded = load_model("tiny-gpt2", device="cpu")
    res = analyze(loaded, TEXTS[1], ["word-maps", "max-attention"])
    direct = text_word_maps(loaded, TEXTS[1])
    assert res["word-maps"]["words"] == direct["words"] == TEXTS[1].split()
    np.testing.assert_allclose(res["word-maps"]["maps"], direct["maps"], atol=1e-5)
    with pytest.raises(HeadscopeError, match="empty|no word"):
        analyze(loaded, " \t ", ["word-maps"])


@pytest.mark.parametrize("name", ["tiny-bert", "tiny-llama"])
def test_word_maps_of_padded_batches_equal_one_text_at_a_time(catalogue, name):
    from workers.analyses.compare.comparison import WordMapTap
    from workers.analyses.corpus.run import CorpusOptions, corpus_statistics

    loaded = load_model(name, device="cpu")
    got: dict[int, np.ndarray] = {}
    tap = WordMapTap(
        loaded,
        TEXTS,
        max_tokens=64,
        surprisal=False,
        per_text=lambda i, part: got.__setitem__(i, part["maps"]),
    )
    corpus_statistics(loaded, TEXTS, options=CorpusOptions(max_tokens=64, max_batch=3), tap=tap)
    assert sorted(got) == [0, 1, 2]
    for i, text in enumerate(TEXTS):
        one = np.array(text_word_maps(loaded, text)["maps"])
        np.testing.assert_allclose(got[i].reshape(one.shape), one, atol=1e-4)


def test_similarity_figure_marks_layer_boundaries_and_a_click_selects_a_pair(catalogue):
    from frontend.figures import compare as F

    res = compare_models(
        lambda: load_model("tiny-bert", device="cpu"),
        lambda: load_model("tiny-gpt2", device="cpu"),
        TEXTS[:1],
        max_tokens=32,
    )
    fig = F.similarity_figure(res, selected=(1, 6))
    lines = [s for s in fig.layout.shapes if s.type == "line"]
    assert len(lines) == (2 - 1) + (2 - 1)  # one boundary between the two layers of each model
    assert F.clicked_cell({"x": 6, "y": 1}) == (1, 6) and F.clicked_cell({"x": None}) is None
    rows = F.pair_rows(res)
    assert len(rows) == 8 and [r["similarity"] for r in rows] == sorted(
        (r["similarity"] for r in rows), reverse=True
    )


def test_surprisal_of_padded_batches_equals_each_text_alone(catalogue):
    """The batched unembedding (rows of every text of a padded batch in shared blocks) gives each word
    the sum over its tokens of -log2 softmax of the text's own logits, computed alone."""
    import torch

    from workers.analyses.compare import comparison as C
    from workers.analyses.corpus.run import CorpusOptions, corpus_statistics

    loaded = load_model("tiny-gpt2", device="cpu")  # a decoder with a head
    got: dict[int, dict] = {}
    tap = C.WordMapTap(
        loaded,
        TEXTS,
        max_tokens=64,
        surprisal=True,
        per_text=lambda i, part: got.__setitem__(i, part),
    )
    old = C.LOGIT_ELEMENTS
    C.LOGIT_ELEMENTS = 7 * loaded.unembed.vocab_size  # blocks of 7 rows: blocks cross texts
    try:
        corpus_statistics(loaded, TEXTS, options=CorpusOptions(max_tokens=64, max_batch=3), tap=tap)
    finally:
        C.LOGIT_ELEMENTS = old
    for i, text in enumerate(TEXTS):
        ids = loaded.tokenizer(text, truncation=True, max_length=64)["input_ids"]
        with torch.inference_mode():
            hidden = loaded.model(input_ids=torch.tensor([ids])).last_hidden_state[0]
            logp = torch.log_softmax(loaded.unembed.logits(hidden).double(), dim=-1)
        bits = [float("nan")] + [
            -logp[t - 1, ids[t]].item() / np.log(2) for t in range(1, len(ids))
        ]
        member = got[i]["member"]
        assert len(got[i]["surprisal"]) == len(text.split())
        for w, s in enumerate(got[i]["surprisal"]):
            toks = np.flatnonzero(member[:, w])
            if toks[0] == 0:
                assert s is None
                continue
            assert s == pytest.approx(sum(bits[t] for t in toks), abs=2e-3), (i, w)
            assert got[i]["predicted"][w] == loaded.tokenizer.decode(
                [int(logp[toks[0] - 1].argmax())]
            )


def test_similarity_does_not_depend_on_threads_or_inference_mode():
    """The pairwise blocks spread over Python threads give the one-thread sums, also when the texts are
    folded in under torch.inference_mode (as the corpus run does) and blocks cross texts."""
    import torch

    from workers.analyses.compare import head_similarity as S

    rng = np.random.default_rng(1)

    def maps(heads: int, u: int) -> np.ndarray:
        return rng.dirichlet(np.ones(u), size=(heads, u)).astype(np.float32)

    texts = [(maps(9, u), maps(13, u)) for u in (5, 8, 3, 11)]
    got = []
    for threads, inference in ((1, False), (2, True), (3, False)):
        acc = S.SimilarityAccumulator(9, 13, threads=threads)
        old = S.BLOCK_ELEMENTS, S.FLUSH_ENTRIES
        S.BLOCK_ELEMENTS, S.FLUSH_ENTRIES = (
            2 * 13 * S.ENTRY_BLOCK,
            40,
        )  # blocks of 2 heads; flush across texts
        try:
            with torch.inference_mode(inference):
                for wa, wb in texts:
                    acc.add(wa, wb, valid=np.ones(wa.shape[-1], dtype=bool), causal=True)
                got.append(acc.sums() / acc.rows)
        finally:
            S.BLOCK_ELEMENTS, S.FLUSH_ENTRIES = old
    np.testing.assert_array_equal(got[0], got[1])
    np.testing.assert_array_equal(got[0], got[2])
    ref = sum(
        S.similarity_sums(wa, wb, valid=np.ones(wa.shape[-1], dtype=bool), causal=True)[0]
        for wa, wb in texts
    )
    np.testing.assert_allclose(
        got[0], ref / acc.rows, atol=1e-6
    )  # one text at a time: the same means
