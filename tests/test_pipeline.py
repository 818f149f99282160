"""The analyses behind the CLI and the jobs: hidden-state and word-list t-SNE, robustness."""

from __future__ import annotations

import numpy as np
import pytest

from workers.analyses.tsne.affinities import perplexity_affinities
from workers.analyses.tsne.hidden import states_tsne
from workers.analyses.tsne.robustness import disturb_ids
from workers.analyses.tsne.words import word_list
from workers.core.errors import HeadscopeError
from workers.engine.pipeline import analyze
from workers.models import pooled_states, run_text

FAST = {"n_iter": 150, "early_exaggeration_iter": 50}
OCCUPATIONS = (
    "musician\ndancer\nsinger\ncomposer\nwoodworker\nfarmworker\nrancher\nlocksmith\nnurse\nsurgeon"
)


def test_hidden_tsne_reports_exact_kl_per_layer(minilm, demo_text):
    run = run_text(minilm, demo_text[:400])
    res = states_tsne(run.hidden_states, layers=[0, 6], perplexity=10)
    n = len(run.tokens)
    assert res.embedding.shape == (2, n, 2)
    from workers import kl_divergence

    for i, layer in enumerate([0, 6]):
        p = perplexity_affinities(run.hidden_states[layer], perplexity=10)
        assert res.kl[i] == pytest.approx(float(kl_divergence(p, res.embedding[i])), rel=1e-9)


def test_word_tsne_uses_the_first_token_state(minilm):
    words = word_list(OCCUPATIONS)
    states, encs = pooled_states(minilm, words, pooling="first")
    assert states.shape == (7, len(words), 384)
    # the multi-token embedding is the [CLS] state of the word run alone (Def. 4.1)
    single = run_text(minilm, words[4])
    np.testing.assert_allclose(states[3, 4], single.hidden_states[3, 0], atol=1e-4)
    res = analyze(minilm, OCCUPATIONS, ["word-tsne"], {"layer": 6, **FAST})["word-tsne"]
    assert res["words"] == words and np.asarray(res["embedding"]).shape == (len(words), 2)
    assert res["pooling"] == "first" and res["kl"][0] > 0


def test_word_list_parsing():
    assert word_list("a\n\n b \nc\nd") == ["a", "b", "c", "d"]
    assert word_list("new york, paris , rome,berlin") == ["new york", "paris", "rome", "berlin"]


def test_word_tsne_needs_four_items(minilm):
    with pytest.raises(HeadscopeError, match="at least 4 items"):
        analyze(minilm, "one\ntwo", ["word-tsne"])


def test_disturbance_replaces_the_fraction_with_tokens_of_the_text():
    rng = np.random.default_rng(0)
    ids = [101] + list(range(1000, 1040)) + [102]
    special = [True] + [False] * 40 + [True]
    new, where = disturb_ids(ids, special, fraction=0.05, rng=rng)
    assert len(where) == 2 and all(not special[i] for i in where)
    assert new[0] == 101 and new[-1] == 102
    assert all(new[i] in ids[1:-1] for i in where)
    assert all(new[i] == ids[i] for i in range(len(ids)) if i not in where)


def test_robustness_reports_both_conditions(minilm, demo_text):
    res = analyze(
        minilm, demo_text[:300], ["robustness"], {"layer": 3, "head": 10, "repeats": 3, **FAST}
    )
    rob = res["robustness"]
    assert rob["layer"] == 3 and rob["head"] == 10 and rob["repeats"] == 3
    for which in ("head_tsne", "hidden_tsne"):
        for cond in ("undisturbed", "disturbed"):
            part = rob[which][cond]
            assert len(part["kl"]) == 3 and part["sd"] == pytest.approx(np.std(part["kl"], ddof=1))
    assert len(rob["undisturbed" if False else "replaced_positions"]) == 3
    # the undisturbed runs differ only by their random start: same P, different maps
    assert len(set(np.round(rob["head_tsne"]["undisturbed"]["kl"], 12))) > 1


def test_results_are_json_ready_and_ordered_cheap_first(catalogue):
    from workers.models import load_model

    seen = []
    res = analyze(
        load_model("tiny-bert"),
        "Short text for the pipeline of the tiny model.",
        ["head-tsne", "max-attention", "hidden-tsne"],
        {"layer": 1, "head": 2, **FAST},
        on_section=lambda kind, sec, so_far: seen.append(kind),
    )
    assert seen == ["max-attention", "head-tsne", "hidden-tsne"]
    import json

    json.dumps(res)  # no numpy scalars left
    assert np.asarray(res["head-tsne"]["embedding"]).shape == (len(res["tokens"]), 2)
    assert len(res["head-tsne"]["kl"]) == 1


def test_unknown_options_are_refused(minilm):
    with pytest.raises(HeadscopeError, match="unknown option"):
        analyze(minilm, "text", ["max-attention"], {"perplexty": 3})
