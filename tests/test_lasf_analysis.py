"""LasF checkpoints, the trainer, the specialisation test and the ``lasf`` analysis (real MiniLM)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from workers.analyses.lasf.checkpoint import (
    FORMAT,
    LasFCheckpointError,
    read_checkpoint,
    save_checkpoint,
    shipped_path,
)
from workers.analyses.lasf.module import LasF
from workers.analyses.lasf.specialisation import permutation_test, probe_sentences, token_relations


def tiny_config(**over) -> dict:
    cfg = {
        "format": FORMAT,
        "base_model": "minilm",
        "replaced_layer": 5,
        "mode": "stable",
        "kernel": "identity",
        "residual": "identity",
        "causal": False,
        "seed": 0,
        "sizes": {"n_fields": 3, "d_in": 384, "d_q": 4, "d_s": 8, "d_out": 384},
    }
    return {**cfg, **over}


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    m = LasF(3, 384, 4, 8, 384, mode="stable", residual="identity")
    with torch.no_grad():
        m.L_Y.normal_(0.0, 0.3)  # a residual LasF starts with silent fields; give them a voice
    out = tmp_path_factory.mktemp("lasf") / "tiny"
    save_checkpoint(m, tiny_config(), out)
    return out / "lasf.safetensors"


def test_checkpoint_round_trip(tiny_ckpt):
    ck = read_checkpoint(tiny_ckpt)
    assert ck.config["format"] == FORMAT and set(ck.tensors) == {
        "L",
        "L_S",
        "L_Y",
        "b_Y",
        "norm.weight",
        "norm.bias",
    }
    assert json.loads((tiny_ckpt.parent / "config.json").read_text()) == ck.config


def _write(path: Path, tensors: dict, config: dict | None) -> Path:
    from safetensors.numpy import save_file

    save_file(
        tensors, str(path), metadata=None if config is None else {"lasf_config": json.dumps(config)}
    )
    return path


@pytest.mark.parametrize(
    "case, words",
    [
        ("pe-file", "not a LasF checkpoint"),
        ("base", "base model 'gpt2'"),
        ("shape", "tensor L_S has shape [3, 384, 9]"),
        ("layer", "replaced layer 3"),
        ("nan", "NaN"),
    ],
)
def test_malformed_lasf_checkpoints_are_refused_with_a_reason(tiny_ckpt, tmp_path, case, words):
    ck = read_checkpoint(tiny_ckpt)
    tensors = dict(ck.tensors)
    cfg = ck.config
    if case == "pe-file":
        path = _write(
            tmp_path / "pe.safetensors", {"pos_embed": np.zeros((16, 8), np.float32)}, None
        )
    else:
        if case == "base":
            cfg = {**cfg, "base_model": "gpt2"}
        elif case == "shape":
            tensors["L_S"] = np.zeros((3, 384, 9), np.float32)
        elif case == "layer":
            cfg = {**cfg, "replaced_layer": 3}
        elif case == "nan":
            tensors["L"] = np.full_like(tensors["L"], np.nan)
        path = _write(tmp_path / f"{case}.safetensors", tensors, cfg)
    with pytest.raises(LasFCheckpointError, match=words.replace("[", r"\[").replace("]", r"\]")):
        read_checkpoint(path)


def test_trainer_lowers_the_loss_on_a_tiny_corpus(catalogue):
    from pydoc_data.topics import topics

    from workers.analyses.lasf.corpus import split_sentences
    from workers.analyses.lasf.train import (
        TrainConfig,
        baselines,
        build_lasf,
        extract_batches,
        masked_mse,
        train_models,
    )
    from workers.models import load_model

    sentences = split_sentences(
        topics["if"] + "\n\n" + topics["while"] + "\n\n" + topics["for"], min_words=3
    )[:24]
    assert len(sentences) >= 8
    loaded = load_model("tiny-bert", device="cpu")
    batches = extract_batches(loaded, sentences, layer=1, batch_size=8, max_tokens=32, sort=True)
    config = TrainConfig(n_fields=2, d_q=4, d_s=8, epochs=4, lr=1e-2)
    lasf = build_lasf(config, 32)
    with torch.no_grad():
        before = float(sum(masked_mse(lasf(b.x, b.mask), b.y, b.mask) for b in batches)) / len(
            batches
        )
    history = train_models({"lasf": lasf, **baselines(32, 0)}, config, batches, batches[:1])
    assert history[-1]["lasf"]["train_loss"] < 0.7 * before
    assert {"r2", "top1", "rho"} <= set(history[-1]["linear"])


def _probe_arrays(shuffle: bool, seed: int = 0):
    rng = np.random.default_rng(seed)
    sents = probe_sentences(60, seed=seed)
    weights, relations, real = [], [], []
    for s in sents:
        n = len(s.words) + 2
        word_of = [None, *range(len(s.words)), None]  # [CLS] words [SEP], one token per word
        rel = token_relations(s, word_of)
        w = rng.random((4, n, n)) * 0.1
        w[0] += rel["same-pos"]  # field 0 relates tokens of the same tag
        if shuffle:  # the test sees shuffled tags
            tags = list(s.tags)
            rng.shuffle(tags)
            s = type(s)(s.words, tags, s.deps, s.entities)
            rel = token_relations(s, word_of)
        weights.append(w)
        relations.append(rel)
        real.append(np.array([x is not None for x in word_of]))
    return weights, relations, real


def test_specialisation_finds_a_planted_field_and_nothing_on_shuffled_labels():
    res = permutation_test(*_probe_arrays(False), n_perm=1000)
    col = res["relations"].index("same-pos")
    assert res["passes"][0][col] and res["count"]["same-pos"] == 1
    assert all(not res["passes"][f][col] for f in (1, 2, 3))
    assert res["effect"][0][col] > 0.5
    shuffled = permutation_test(*_probe_arrays(True), n_perm=1000)
    assert shuffled["count"]["same-pos"] == 0


def test_lasf_analysis_fields_on_real_minilm(minilm, tiny_ckpt):
    from workers.analyses.lasf.fields import load_lasf
    from workers.engine.pipeline import analyze

    lasf = load_lasf(tiny_ckpt, name="tiny-lasf")
    text = "The old farmer wrote a letter to Alice Smith in Paris."
    res = analyze(minilm, text, ["lasf"], {"n_iter": 100, "early_exaggeration_iter": 50}, lasf=lasf)
    sec = res["lasf"]
    n, f = res["n_tokens"], 3
    assert res["model"] == "tiny-lasf" and res["base_model"] == "minilm"
    w = np.asarray(sec["weights"])
    assert w.shape == (f, n, n) and np.allclose(w.sum(-1), 1, atol=1e-5)  # stable: softmax rows
    phi = np.asarray(sec["phi"])
    assert np.allclose(phi, phi.T) and np.allclose(np.diag(phi), 0)
    assert np.allclose(np.asarray(sec["phi_norm"]).sum(1), 1, atol=1e-5)
    mr = np.asarray(sec["max_relation"])
    off = w + np.where(np.eye(n, dtype=bool), -np.inf, 0)[None]
    assert np.allclose(mr, off.max(axis=1), atol=1e-6)
    assert np.allclose(np.asarray(sec["contribution"]).sum(0), 1, atol=1e-5)
    assert len(sec["ablation"]) == f and np.asarray(sec["field_vs_head"]).shape == (f, 12)
    assert np.asarray(sec["field_tsne"]["embedding"]).shape == (f, n, 2)
    spec = sec["specialisation"]
    assert spec["n_perm"] == 1000 and set(spec["count"]) == {
        "same-pos",
        "dependency",
        "same-entity",
        "adjacent",
    }
    assert np.asarray(spec["p"]).shape == (f, 4)


def test_shipped_names_are_the_contracts_lasf_models_and_the_pickers_entries():
    from frontend.pages.lasf import lasf_models
    from workers.analyses.lasf.checkpoint import SHIPPED
    from workers.core.contracts import LASF_MODELS

    assert (
        tuple(SHIPPED) == LASF_MODELS == ("lasf-minilm", "lasf-minilm-paper")
    )  # stable first: the default

    class NoUploads:  # the picker's only other source is the API's checkpoint list
        class client:
            @staticmethod
            def checkpoints():
                return {"checkpoints": []}

    assert [o["value"] for o in lasf_models(NoUploads())] == list(LASF_MODELS)


@pytest.mark.parametrize(
    ("name", "mode", "least_r2"),
    [("lasf-minilm", "stable", 0.7), ("lasf-minilm-paper", "paper", 0.45)],
)
def test_shipped_checkpoint_reproduces_its_stored_test_metrics(minilm, name, mode, least_r2):
    from workers.analyses.lasf.distil import TEST_SENTENCES_FILE
    from workers.analyses.lasf.fields import load_lasf
    from workers.analyses.lasf.train import EVAL_BATCH, evaluate, extract_batches

    path = shipped_path(name)
    if not (path / "lasf.safetensors").exists():
        pytest.skip(f"no shipped {name} in this build")
    lasf = load_lasf(path, name=name)  # the safe reader: validated config, shapes, finite tensors
    cfg = lasf.config
    assert cfg["mode"] == mode and lasf.module.mode == mode
    assert (
        cfg["metrics"]["test"]["lasf"]["r2"] >= least_r2
    )  # the held-out R² it ships for (all 560 test sentences)
    sentences = json.loads((path / TEST_SENTENCES_FILE).read_text())[
        : cfg["metrics"]["test_subset_sentences"]
    ]
    batches = extract_batches(
        minilm,
        sentences,
        layer=5,
        batch_size=EVAL_BATCH,
        max_tokens=cfg["train"]["max_tokens"],
        sort=False,
    )
    got = evaluate(lasf.module, batches)
    want = cfg["metrics"]["test_subset"]["lasf"]
    for key in ("r2", "top1", "rho"):
        assert abs(got[key] - want[key]) < 0.01, (key, got[key], want[key])


def test_lasf_figures_from_a_result(minilm, tiny_ckpt):
    from frontend.figures import lasf as F
    from workers.analyses.lasf.fields import load_lasf
    from workers.engine.pipeline import analyze

    lasf = load_lasf(tiny_ckpt, name="tiny-lasf")
    res = analyze(
        minilm,
        "A small dog saw the river.",
        ["lasf"],
        {"drop_special": True, "n_iter": 50, "early_exaggeration_iter": 20},
        lasf=lasf,
    )
    figs = F.all_figures(res, 1)
    assert len(figs) == 7
    assert figs[1].data[0].customdata[1][0] == [
        res["lasf"]["kept"][0],
        1,
    ]  # [token, field] per cell
    assert figs[2].layout.title.text.startswith("Field 1")
    assert len(figs[0].layout.shapes) == 1  # the open field's row is outlined
    header, rows, counts = F.specialisation_rows(res)
    assert (
        len(rows) == 3
        and len(header) == 5
        and set(counts) == set(res["lasf"]["specialisation"]["relations"])
    )
    assert F.clicked_cell({"points": [{"customdata": [4, 2]}]}) == (2, 4)


def test_cli_analyze_lasf_with_a_checkpoint_file(minilm, tiny_ckpt, tmp_path, capsys):
    from backend.cli import main

    out = tmp_path / "r.json"
    rc = main(
        [
            "analyze",
            "--analysis",
            "lasf",
            "--model",
            str(tiny_ckpt),
            "--text",
            "A dog saw the river.",
            "--n-iter",
            "50",
            "--early-exaggeration-iter",
            "20",
            "-q",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["analysis"] == "lasf" and res["n_fields"] == 3 and res["base_model"] == "minilm"
    assert (
        main(["analyze", "--analysis", "lasf", "--model", str(tmp_path / "nope.safetensors"), "-q"])
        == 2
    )
    assert "unknown LasF model" in capsys.readouterr().err
