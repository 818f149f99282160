"""The head atlas (docs/atlas.md): the repeated-random-tokens probe, labels, bootstrap intervals and
refusals, on tiny random models whose maps are set by hand where a known head is needed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch

from workers.analyses.atlas.labels import THRESHOLDS, Items, interval, label_heads
from workers.analyses.atlas.probe import make_probe, repeated_scores
from workers.analyses.atlas.run import AtlasSettings, atlas
from workers.core.errors import HeadscopeError
from workers.models import load_model
from workers.models.adapters import attention_modules

pytestmark = pytest.mark.usefixtures("one_torch_thread", "catalogue")
TEXTS = [
    "The cat sat on the mat and looked at the door.",
    "A small model reads every token of the text.",
    "Heads attend to earlier tokens in a decoder.",
    "The quick brown fox jumps over the lazy dog.",
    "Every text of the corpus goes through the model once.",
    "Tokens repeat, and a head may look back at them.",
]
QUICK = AtlasSettings(random_seqs=4, random_len=12, bootstrap=100, evidence=False)


@contextmanager
def hand_set(loaded: Any, layer: int) -> Iterator[None]:
    """Layer ``layer``'s head 0 attends to the previous token only (the first token to itself) and
    head 1 uniformly over the keys it may see (those the model's own head 0 gives weight)."""

    def hook(module: torch.nn.Module, args: Any, out: Any) -> Any:
        out_ctx, w = out[0], out[1].clone()
        n = w.shape[-1]
        prev = torch.zeros(n, n, dtype=w.dtype)
        prev[torch.arange(1, n), torch.arange(n - 1)] = 1.0
        prev[0, 0] = 1.0
        w[:, 0] = prev
        seen = (out[1][:, 0] > 0).to(w.dtype)
        w[:, 1] = seen / seen.sum(-1, keepdim=True).clamp_min(1.0)
        return (out_ctx, w, *out[2:])

    handle = attention_modules(loaded)[layer].register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def _head(res: dict[str, Any], layer: int, head: int) -> dict[str, Any]:
    return next(h for h in res["heads"] if (h["layer"], h["head"]) == (layer, head))


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-bert"])
def test_a_hand_set_previous_token_head_is_labelled_confidently_and_a_uniform_head_broad(
    name: str,
) -> None:
    loaded = load_model(name, device="cpu")
    with hand_set(loaded, 1):
        res = atlas(loaded, QUICK, texts=TEXTS)
    prev, uniform = _head(res, 1, 0), _head(res, 1, 1)
    assert prev["label"] == "previous-token" and prev["confident"]
    assert prev["scores"]["previous-token"] == pytest.approx(1.0)
    assert prev["intervals"]["previous-token"][0] >= THRESHOLDS["previous-token"]
    assert uniform["label"] == "broad" and uniform["confident"]
    assert uniform["scores"]["broad"] == pytest.approx(1.0)
    # a uniform head does not single out the token after the earlier copy
    assert uniform["scores"]["induction"] < 0.5
    assert len(res["heads"]) == loaded.n_layers * loaded.n_heads
    assert res["probe"]["random_seqs"] == 4 and res["thresholds"] == THRESHOLDS


def test_the_repeated_token_scores_are_the_definition_on_a_hand_made_attention() -> None:
    gen = torch.Generator().manual_seed(1)
    for offset in (0, 1):
        r = 7
        n = offset + 2 * r
        w = torch.rand(3, 2, n, n, generator=gen)
        got = repeated_scores(w, length=r, offset=offset)
        for b in range(3):
            for h in range(2):
                ind = np.mean([float(w[b, h, offset + r + t, offset + t + 1]) for t in range(1, r)])
                dup = np.mean([float(w[b, h, offset + r + t, offset + t]) for t in range(1, r)])
                prev = np.mean(
                    [float(w[b, h, offset + r + t, offset + r + t - 1]) for t in range(1, r)]
                )
                assert float(got["induction"][b, h]) == pytest.approx(ind, rel=1e-6)
                assert float(got["duplicate"][b, h]) == pytest.approx(dup, rel=1e-6)
                assert float(got["previous"][b, h]) == pytest.approx(prev, rel=1e-6)


def test_the_probe_is_seeded_repeated_and_free_of_special_tokens() -> None:
    loaded = load_model("tiny-llama", device="cpu")  # its tokenizer prepends <s>
    a = make_probe(loaded, random_seqs=5, random_len=9, seed=3)
    b = make_probe(loaded, random_seqs=5, random_len=9, seed=3)
    c = make_probe(loaded, random_seqs=5, random_len=9, seed=4)
    assert np.array_equal(a.ids, b.ids) and not np.array_equal(a.ids, c.ids)
    assert a.offset == 1 and a.ids.shape == (5, 19)
    assert (a.ids[:, 0] == loaded.tokenizer.bos_token_id).all()
    assert np.array_equal(a.ids[:, 1:10], a.ids[:, 10:])
    assert not set(a.ids[:, 1:].ravel().tolist()) & set(loaded.tokenizer.all_special_ids)


def test_the_bootstrap_interval_shrinks_as_the_corpus_grows() -> None:
    rng = np.random.default_rng(0)
    widths = []
    for n in (10, 100, 1000):
        counts = rng.integers(5, 40, size=(n, 1))
        sums = rng.uniform(0.2, 0.6, size=(n, 1, 1)) * counts[:, :, None]
        draws = Items({"previous": sums}, {"previous": counts}).bootstrap(
            300, np.random.default_rng(1)
        )
        lo, hi = interval(draws["previous"])
        widths.append(float(hi[0, 0] - lo[0, 0]))
    assert widths[0] > widths[1] > widths[2] > 0


def test_labels_take_the_best_type_that_clears_and_local_yields_to_previous() -> None:
    def scores(**kv: float) -> dict[str, np.ndarray]:
        return {t: np.full((1, 1), kv.get(t.replace("-", "_"), 0.0)) for t in THRESHOLDS}

    s = scores(previous_token=0.55, local=0.6, broad=0.2)
    iv = {t: (v - 0.1, v + 0.1) for t, v in s.items()}
    (head,) = label_heads(s, iv, THRESHOLDS)
    assert head["label"] == "previous-token" and not head["confident"]  # 0.45 < 0.5
    s = scores(self=0.3, local=0.7)
    (head,) = label_heads(s, {t: (v, v) for t, v in s.items()}, THRESHOLDS)
    assert head["label"] == "local" and head["confident"]
    # a specific type that clears wins over a default one with a larger score (an induction head
    # resting on the first token)
    s = scores(induction=0.5, first_token=0.95)
    (head,) = label_heads(s, {t: (v, v) for t, v in s.items()}, THRESHOLDS)
    assert head["label"] == "induction" and head["cleared"] == ["induction", "first-token"]
    s = scores(broad=0.5)
    (head,) = label_heads(s, {t: (v, v) for t, v in s.items()}, THRESHOLDS)
    assert head["label"] is None and not head["confident"]


def test_each_labelling_rule_gives_the_labels_it_defines() -> None:
    """``specific-first``: a specific type that clears beats a default one with a larger score;
    ``largest`` (SPEC 15 as written): the largest score that clears, whatever its type. Both keep
    ``local`` out where ``previous-token`` clears, and agree where only one tier clears."""

    def label(rule: str, **kv: float) -> tuple[str | None, list[str]]:
        s = {t: np.full((1, 1), kv.get(t.replace("-", "_"), 0.0)) for t in THRESHOLDS}
        (head,) = label_heads(s, {t: (v, v) for t, v in s.items()}, THRESHOLDS, rule=rule)
        return head["label"], head["cleared"]

    cases = [  # scores, the label under specific-first, under largest
        ({"induction": 0.5, "first_token": 0.95}, "induction", "first-token"),
        ({"previous_token": 0.55, "self": 0.7}, "previous-token", "self"),
        ({"duplicate_token": 0.4, "induction": 0.35, "broad": 0.9}, "duplicate-token", "broad"),
        ({"induction": 0.8, "first_token": 0.7}, "induction", "induction"),
        ({"first_token": 0.7, "broad": 0.9}, "broad", "broad"),
        ({"previous_token": 0.6, "local": 0.9}, "previous-token", "previous-token"),
        ({"broad": 0.5}, None, None),
    ]
    for scores, specific, largest in cases:
        assert label("specific-first", **scores)[0] == specific, scores
        assert label("largest", **scores)[0] == largest, scores
    assert label("largest", previous_token=0.6, local=0.9)[1] == ["previous-token"]
    with pytest.raises(HeadscopeError, match="unknown labelling rule"):
        label("smallest", broad=0.9)


def test_the_rule_is_an_option_stored_beside_the_thresholds() -> None:
    from workers.analyses.atlas.section import settings_of
    from workers.analyses.atlas.spec import AtlasOptions

    assert settings_of(AtlasOptions()).rule == "specific-first"
    loaded = load_model("tiny-gpt2", device="cpu")
    quick = AtlasSettings(random_seqs=2, random_len=6, bootstrap=0, evidence=False)
    low = {"induction": 0.0, "first-token": 0.0}  # every head clears both
    got = {}
    for rule in ("specific-first", "largest"):
        res = atlas(loaded, replace(quick, rule=rule, thresholds=low), texts=TEXTS[:3])
        assert (
            res["rule"] == rule
            and "rule" not in res["probe"]
            and res["thresholds"]["induction"] == 0.0
        )
        got[rule] = {h["label"] for h in res["heads"]}
        if rule == "largest":  # the largest score that clears, whatever its type
            for h in res["heads"]:
                assert h["label"] == max(h["cleared"], key=lambda t: h["scores"][t])
    assert got["specific-first"] == {"induction"}  # a specific type that clears wins
    assert got["largest"] != {"induction"}  # the random heads spread wider than they copy


@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        (AtlasSettings(random_len=1), "random_len must be at least 2"),
        (AtlasSettings(random_seqs=0), "random_seqs must be at least 1"),
        (AtlasSettings(thresholds={"induction": 1.5}), "within 0 and 1"),
        (AtlasSettings(thresholds={"copying": 0.5}), "unknown head type"),
        (AtlasSettings(rule="smallest"), "unknown labelling rule"),
    ],
)
def test_bad_settings_are_refused_with_a_reason(settings: AtlasSettings, reason: str) -> None:
    with pytest.raises(HeadscopeError, match=reason):
        settings.validate()


def test_the_loss_asked_of_an_encoder_is_refused() -> None:
    loaded = load_model("tiny-bert", device="cpu")
    with pytest.raises(HeadscopeError, match="needs a decoder with a language-model head"):
        atlas(loaded, AtlasSettings(loss=True), texts=TEXTS)


def test_the_cli_writes_the_atlas_and_refuses_bad_settings_before_loading(
    tmp_path: Any, capsys: Any
) -> None:
    import json

    from backend.cli import main

    out = tmp_path / "atlas.json"
    args = ["atlas", "--model", "tiny-gpt2", "--random-seqs", "3", "--random-len", "8"]
    args += ["--max-texts", "6", "--resamples", "20", "--evidence-seqs", "2", "-q"]
    assert main([*args, "--thresholds", "induction=0.9", "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["analysis"] == "atlas" and got["model"] == "tiny-gpt2"
    assert len(got["heads"]) == 8 and got["thresholds"]["induction"] == 0.9
    assert got["probe"]["random_seqs"] == 3 and got["probe"]["corpus_texts"] == 6
    assert got["loss_repeated"]["repeated"] > 0 and got["evidence"]["sequences"] == 2
    head = got["heads"][0]
    assert set(head) >= {"layer", "head", "label", "confident", "scores", "intervals", "evidence"}
    for bad, reason in [
        (["--random-len", "1"], "random_len: must be at least 2"),
        (["--random-seqs", "0"], "random_seqs: must be at least 1"),
        (["--random-len", "40"], "too long for tiny-gpt2"),
        (["--thresholds", "copying=0.5"], "thresholds"),
    ]:
        assert main(["atlas", "--model", "tiny-gpt2", *bad, "-q"]) == 2
        assert reason in capsys.readouterr().err
    assert main(["atlas", "--model", "tiny-bert", "--random-len", "8", "--loss", "yes", "-q"]) == 2
    assert "needs a decoder with a language-model head" in capsys.readouterr().err


def test_the_cli_reads_an_uploaded_corpus_from_its_store_and_refuses_an_unknown_one(
    tmp_path: Any, capsys: Any, monkeypatch: Any
) -> None:
    import json

    from backend.cli import main
    from workers.core.settings import get_settings
    from workers.inputs.corpora import corpus_id
    from workers.store import Store

    monkeypatch.setenv("HEADSCOPE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("HEADSCOPE_DATABASE_URL", raising=False)
    get_settings.cache_clear()
    try:
        texts = TEXTS[:4]
        cid = corpus_id(texts)
        Store(get_settings()).put_corpus(cid, texts, meta={"name": "four.txt"})
        args = ["atlas", "--model", "tiny-gpt2", "--random-seqs", "2", "--random-len", "6"]
        args += ["--resamples", "0", "--skip-evidence", "-q"]
        out = tmp_path / "atlas.json"
        assert main([*args, "--corpus", cid, "--out", str(out)]) == 0
        probe = json.loads(out.read_text())["probe"]
        assert probe["corpus"] == cid and probe["corpus_texts"] == 4
        for corpus, reason in [
            ("cp-" + "0" * 32, "no corpus with id"),
            ("builtin-nope", "unknown shipped corpus"),
            ("my-corpus", "corpus"),
        ]:
            assert main([*args, "--corpus", corpus]) == 2
            assert reason in capsys.readouterr().err
    finally:
        get_settings.cache_clear()
