"""Latin Square Task: puzzles are right and far enough apart; the trainer writes usable checkpoints."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from backend.cli import main
from workers.analyses.positional.encodings import attention_agreement, make_reference
from workers.analyses.positional.lst import puzzles as P
from workers.analyses.positional.lst.train import (
    LSTConfig,
    attention_maps,
    build_model,
    evaluate,
    load_run,
    train_lst,
)
from workers.core.errors import HeadscopeError
from workers.models.checkpoints import list_candidates, read_tensor

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _is_latin(square: np.ndarray) -> bool:
    g = square.reshape(4, 4)
    return all(len(set(g[i])) == 4 and len(set(g[:, i])) == 4 for i in range(4))


def test_all_576_latin_squares() -> None:
    squares = P.latin_squares()
    assert squares.shape == (576, 16) and len({tuple(s) for s in squares}) == 576
    assert all(_is_latin(s) for s in squares)


def _brute_vectors(tokens: np.ndarray) -> int:
    """Fewest lines whose constraints alone pin the probe, by enumerating every line filling."""
    probe = int(np.flatnonzero(tokens == P.PROBE)[0])
    perms = list(itertools.permutations(range(4)))
    options = []
    for cells in P.LINES:
        shown = tokens[cells]
        options.append(
            [p for p in perms if all(s >= 4 or s == v for s, v in zip(shown, p, strict=True))]
        )
    for k in (1, 2, 3):
        for subset in itertools.combinations(range(8), k):
            if not any(probe in P.LINES[line] for line in subset):
                continue
            values = set()
            for choice in itertools.product(*(options[line] for line in subset)):
                filled: dict[int, int] = {}
                ok = True
                for line, perm in zip(subset, choice, strict=True):
                    for cell, v in zip(P.LINES[line], perm, strict=True):
                        ok &= filled.setdefault(int(cell), v) == v
                if ok:
                    values.add(filled[probe])
                    if len(values) > 1:
                        break
            if len(values) == 1:
                return k
    return 0


def test_complexity_matches_brute_force_and_the_answer_is_forced() -> None:
    rng = np.random.default_rng(5)
    cand = P._candidates(rng, 60, shown=(4, 9), allowed=None)
    assert set(cand.vectors.tolist()) == {0, 1, 2, 3}
    assert [_brute_vectors(t) for t in cand.tokens] == cand.vectors.tolist()
    squares = P.latin_squares()
    for t, answer, k in zip(cand.tokens, cand.answer, cand.vectors, strict=True):
        fits = squares[((t[None] >= 4) | (squares == t[None])).all(axis=1)]
        if k:  # every Latin square that fits the shown cells has the answer at the probe
            assert set(fits[:, int(np.flatnonzero(t == P.PROBE)[0])].tolist()) == {answer}


def test_dataset_mix_balance_and_jaccard_distance() -> None:
    train, val = P.make_dataset(n_train=300, n_val=90, seed=1)
    assert len(train) == 300 and len(val) == 90
    assert np.bincount(train.vectors).tolist() == [0, 100, 100, 100]
    assert np.bincount(val.answer, minlength=4).min() >= 21  # answers balanced per complexity
    for p in (train, val):
        assert all(_is_latin(s) for s in p.solution)
        shown = p.tokens < 4
        assert np.array_equal(p.tokens[shown], p.solution[shown])
        assert np.array_equal(p.answer, p.solution[np.arange(len(p)), p.probe])
        assert (p.tokens == P.PROBE).sum(axis=1).tolist() == [1] * len(p)

    def items(t: np.ndarray) -> set[tuple[int, int]]:
        return {(c, int(v)) for c, v in enumerate(t) if v != P.BLANK}

    train_sets = [items(t) for t in train.tokens]
    worst = max(len(a & b) / len(a | b) for a in map(items, val.tokens) for b in train_sets)
    assert worst < 0.2  # Jaccard dissimilarity > 0.8 to every training puzzle
    assert P.max_similarity(val.tokens, train.tokens).max() == pytest.approx(worst)


def test_same_seed_same_weights_except_the_pe() -> None:
    learned = build_model(LSTConfig(pe="learned", sigma=0.2, seed=3))
    fixed = build_model(LSTConfig(pe="2d-fixed", seed=3))
    a, b = learned.state_dict(), fixed.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a if k != "pe")
    assert torch.equal(
        b["pe"],
        torch.tensor(make_reference("2d-fixed", n=16, d=160, grid=(4, 4)), dtype=torch.float32),
    )
    assert learned.pe.std().item() == pytest.approx(0.2, rel=0.1)
    wide = build_model(LSTConfig(pe="learned", sigma=2.0, seed=3))
    assert torch.allclose(wide.pe, learned.pe * 10)  # same draw, scaled
    assert sum(p.numel() for p in fixed.parameters()) == pytest.approx(1.24e6, rel=0.01)
    with pytest.raises(HeadscopeError, match="unknown PE"):
        LSTConfig(pe="rope").check()


def test_model_can_fit_a_handful_of_puzzles() -> None:
    torch.manual_seed(0)
    train, _ = P.make_dataset(n_train=32, n_val=4, seed=2)
    model = build_model(LSTConfig(pe="2d-fixed", seed=0))
    opt = torch.optim.Adam(model.parameters(), lr=3e-4)
    tokens, probe, answer = (torch.as_tensor(a) for a in (train.tokens, train.probe, train.answer))
    before = evaluate(model, train)["loss"]
    for _ in range(60):
        logits, _ = model(tokens, probe)
        loss = torch.nn.functional.cross_entropy(logits, answer)
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = evaluate(model, train)
    assert after["loss"] < before / 4 and after["accuracy"] > 0.9


def test_trainer_writes_checkpoint_config_metrics(tmp_path: Path) -> None:
    cfg = LSTConfig(pe="learned", sigma=0.2, epochs=2, n_train=96, n_val=30, batch_size=32, seed=4)
    seen: list[float] = []
    metrics = train_lst(cfg, tmp_path / "run", progress=lambda f, m: seen.append(f))
    assert seen[-1] == 1.0 and seen == sorted(seen)
    files = {p.name for p in (tmp_path / "run").iterdir()}
    assert files == {"model.safetensors", "config.json", "metrics.json"}
    on_disk = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert on_disk["epoch"] == [1, 2] and len(on_disk["val_accuracy"]) == 2
    assert set(on_disk["val_accuracy_by_vectors"]) == {"1", "2", "3"}
    assert all(0 <= a <= 1 for a in on_disk["train_accuracy"] + on_disk["val_accuracy"])
    assert metrics["val_accuracy"] == on_disk["val_accuracy"]
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["pe_tensor"] == "pe" and config["sigma"] == 0.2 and config["grid"] == [4, 4]
    ckpt = tmp_path / "run" / "model.safetensors"
    assert list_candidates(ckpt)[0]["name"] == "pe"
    pe, pe_init = read_tensor(ckpt, "pe"), read_tensor(ckpt, "pe_init")
    assert pe.shape == (16, 160) and 0 < np.abs(pe - pe_init).max() < 0.01  # 6 Adam steps of 1e-4
    model, loaded_cfg = load_run(tmp_path / "run")
    assert loaded_cfg == cfg
    np.testing.assert_array_equal(model.pe.detach().numpy(), pe)
    _, val = P.make_dataset(n_train=96, n_val=30, seed=0)
    assert evaluate(model, val)["accuracy"] == pytest.approx(metrics["val_accuracy"][-1])
    maps = attention_maps(model, val)  # [layer, puzzle, head, query, key]
    assert maps.shape == (4, 30, 1, 16, 16)
    np.testing.assert_allclose(maps.sum(axis=-1), 1.0, atol=1e-5)
    agree = attention_agreement(maps, maps)
    assert agree["cosine"] == pytest.approx(1.0) and agree["jsd"] == pytest.approx(0.0, abs=1e-9)


def test_cli_lst_train_then_pe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "fixed"
    args = ["--epochs", "1", "--n-train", "48", "--n-val", "12", "--batch-size", "48", "-q"]
    assert main(["lst-train", "--pe", "2d-fixed", "--out", str(run), *args]) == 0
    assert (
        main(
            [
                "lst-train",
                "--pe",
                "learned",
                "--sigma",
                "2.0",
                "--out",
                str(tmp_path / "wide"),
                *args,
            ]
        )
        == 0
    )
    out = tmp_path / "r.json"
    ckpt = str(run / "model.safetensors")
    assert main(["pe", "--checkpoint", ckpt, "--reference", "2d-fixed", "--grid", "4x4",
                 "--partition", "rows", "--out", str(out)]) == 0  # fmt: skip
    rep = json.loads(out.read_text())
    for key in ("procrustes_distance", "procrustes_distance_normalised", "distance_matrix",
                "modularity", "clustering", "candidates", "order", "coords_2d"):  # fmt: skip
        assert key in rep
    assert (
        rep["tensor"] == "pe" and rep["procrustes_distance"] < 1e-5
    )  # the fixed PE is the reference
    assert np.array(rep["distance_matrix"]).shape == (16, 16)
    # a sweep against another checkpoint as reference, with a CSV partition
    csv = tmp_path / "part.csv"
    csv.write_text(
        "position,label\n" + "\n".join(f"{t},{'top' if t < 8 else 'bottom'}" for t in range(16))
    )
    assert main(["pe", "--checkpoint", str(tmp_path / "wide" / "model.safetensors"), "--checkpoint", ckpt,
                 "--reference-checkpoint", ckpt, "--partition", str(csv), "--out", str(out)]) == 0  # fmt: skip
    sweep = json.loads(out.read_text())
    assert [r["procrustes_distance"] < 1e-5 for r in sweep["summary"]] == [False, True]
    assert (
        sweep["checkpoints"][0]["labels"][0] == "top" and sweep["reference"]["kind"] == "checkpoint"
    )
    # compare the two runs against the fixed one
    cmp = tmp_path / "cmp.json"
    assert (
        main(
            [
                "lst-compare",
                str(tmp_path / "wide"),
                str(run),
                "--reference-run",
                str(run),
                "--out",
                str(cmp),
            ]
        )
        == 0
    )
    rows = json.loads(cmp.read_text())["runs"]
    assert (
        rows[1]["attention"]["cosine"] == pytest.approx(1.0)
        and rows[1]["pe_final"]["procrustes_distance"] < 1e-5
    )
    assert rows[0]["attention"]["cosine"] < 1.0 and rows[0]["attention"]["n_puzzles"] == 12
    assert rows[0]["pe_init"]["norm"] == pytest.approx(
        2.0 * np.sqrt(16 * 160), rel=0.05
    )  # N(0, 2²) draw
    # bad input: one line on stderr, exit 2
    capsys.readouterr()
    assert main(["pe", "--checkpoint", ckpt, "--partition", str(csv), "--tensor", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("headscope: error: no tensor named 'nope'") and "\n" not in err
    assert main(["pe", "--checkpoint", ckpt, "--reference", "2d-fixed", "--grid", "3x3"]) == 2
    assert "3 x 3 grid has 9 cells" in capsys.readouterr().err


def test_demo_checkpoints_are_small_and_readable() -> None:
    from workers.data.pe_demo import DEMO_DIR, demo_checkpoints, demo_index

    demos = demo_checkpoints()
    assert len(demos) >= 3
    total = sum(p.stat().st_size for p in DEMO_DIR.iterdir() if p.is_file())
    assert total < 300_000
    for demo in demos:
        assert demo["id"].startswith("demo-") and demo["name"] and demo["description"]
        assert read_tensor(demo["path"]).shape == (16, 160)
    kinds = {d["config"]["pe"] for d in demo_index()}
    assert {"learned", "2d-fixed"} <= kinds
