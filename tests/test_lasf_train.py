"""The LasF trainer's warm-up and gradient clipping options (tiny random batches, no model)."""

from __future__ import annotations

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from workers.analyses.lasf.train import Batch, TrainConfig, baselines, build_lasf, train_models
from workers.core.errors import HeadscopeError


def _batches(n: int = 4, d: int = 16) -> list[Batch]:
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        x = torch.randn(3, 5, d, generator=g)
        mask = torch.ones(3, 5, dtype=torch.bool)
        mask[0, 3:] = False  # one padded sentence
        out.append(Batch(x, 2.0 * x.flip(1) + 1.0, mask))
    return out


@pytest.mark.parametrize(
    ("over", "words"),
    [({"warmup": 0.0}, "warmup"), ({"warmup": 1.0}, "warmup"), ({"warmup": -0.2}, "warmup"),
     ({"clip": 0.0}, "clip must be positive"), ({"clip": -1.0}, "clip must be positive"),
     ({"weight_decay": -0.1}, "weight decay")],
)  # fmt: skip
def test_warmup_and_clip_are_validated(over, words):
    with pytest.raises(HeadscopeError, match=words):
        TrainConfig(**over).check()


def _run(config: TrainConfig, batches: list[Batch]) -> tuple[list[float], list[float], dict]:
    """Train LasF and the baselines; LasF's lr and pre-step gradient norm at every step, and the models."""
    lasf = build_lasf(config, batches[0].x.shape[-1])
    lasf_params = set(map(id, lasf.parameters()))
    lrs, norms = [], []

    def pre(opt, args, kwargs):
        params = [p for grp in opt.param_groups for p in grp["params"]]
        if id(params[0]) in lasf_params:
            lrs.append(opt.param_groups[0]["lr"])
            norms.append(
                float(
                    torch.linalg.vector_norm(
                        torch.stack([p.grad.norm() for p in params if p.grad is not None])
                    )
                )
            )

    handle = register_optimizer_step_pre_hook(pre)
    try:
        models = {"lasf": lasf, **baselines(batches[0].x.shape[-1], 0)}
        train_models(models, config, batches, batches[:1])
    finally:
        handle.remove()
    return lrs, norms, models


def test_clip_bounds_lasf_gradient_norm_and_changes_the_updates():
    batches = _batches()
    base = dict(
        mode="paper",
        kernel="gaussian",
        residual="none",
        n_fields=2,
        d_q=3,
        d_s=4,
        epochs=2,
        lr=1e-2,
    )
    _, free_norms, free = _run(TrainConfig(**base), batches)
    _, clipped_norms, clipped = _run(TrainConfig(**base, clip=1e-3), batches)
    assert len(clipped_norms) == 2 * len(batches)
    assert max(free_norms) > 1e-2  # unclipped gradients are far above the bound
    assert max(clipped_norms) <= 1e-3 * (1 + 1e-4)  # every LasF step saw a clipped gradient
    diff = max(
        float((a - b).detach().abs().max())
        for a, b in zip(free["lasf"].parameters(), clipped["lasf"].parameters(), strict=True)
    )
    assert (
        diff > 1e-6
    )  # clipping changed what LasF learned (Adam's eps makes tiny gradients move less)
    for k in ("linear", "linear_ln"):  # the baselines are never clipped: identical in both runs
        for a, b in zip(free[k].parameters(), clipped[k].parameters(), strict=True):
            assert torch.equal(a, b)


def test_weight_decay_is_lasf_only_and_shrinks_its_weights():
    batches = _batches()
    base = dict(
        mode="paper",
        kernel="identity",
        residual="none",
        n_fields=2,
        d_q=3,
        d_s=4,
        epochs=2,
        lr=1e-2,
    )
    _, _, light = _run(TrainConfig(**base, weight_decay=0.0), batches)
    _, _, heavy = _run(TrainConfig(**base, weight_decay=10.0), batches)
    norm = lambda m: float(  # noqa: E731
        torch.linalg.vector_norm(torch.cat([p.detach().flatten() for p in m.parameters()]))
    )
    assert norm(heavy["lasf"]) < 0.95 * norm(
        light["lasf"]
    )  # decoupled decay pulls LasF's weights in
    for k in ("linear", "linear_ln"):  # the baselines keep their own decay: identical in both runs
        for a, b in zip(light[k].parameters(), heavy[k].parameters(), strict=True):
            assert torch.equal(a, b)


@pytest.mark.parametrize("warmup", [0.1, 0.5])
def test_warmup_sets_where_lasf_learning_rate_peaks(warmup):
    batches = _batches(n=10)
    config = TrainConfig(n_fields=2, d_q=3, d_s=4, epochs=2, lr=4e-3, warmup=warmup)
    lrs, _, _ = _run(config, batches)
    steps = len(lrs)
    assert steps == 20
    peak = max(range(steps), key=lrs.__getitem__)
    assert lrs[peak] == pytest.approx(4e-3, rel=1e-3)
    assert abs(peak - warmup * steps) <= 1.5  # one-cycle peaks after the warm-up share of the steps
    assert all(lrs[i] < lrs[i + 1] for i in range(peak - 1))  # rising before, falling after
    assert all(lrs[i] > lrs[i + 1] for i in range(peak, steps - 1))


@pytest.mark.parametrize(
    ("flag", "words"),
    [("--warmup=1.5", "warmup is a share"), ("--clip=-1", "clip must be positive"), ("--weight-decay=-1", "weight decay")],
)  # fmt: skip
def test_cli_refuses_bad_warmup_or_clip_before_any_work(flag, words, tmp_path, capsys):
    from backend.cli import main

    assert main(["lasf-train", "--mode", "paper", flag, "--out", str(tmp_path / "out"), "-q"]) != 0
    assert words in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing trained, nothing written


@pytest.mark.parametrize(
    ("argv", "want"),
    [(["--mode", "paper"], {"lr": 1e-3, "clip": 1.0, "warmup": 0.1, "init_scale": 0.1, "weight_decay": 1.0,
                             "kernel": "identity", "epochs": 12, "residual": "none"}),
     (["--mode", "stable"], {"lr": 2e-3, "clip": None, "warmup": 0.1, "init_scale": 1.0, "weight_decay": 0.01,
                             "kernel": "identity", "epochs": 4, "residual": "linear"}),
     (["--mode", "paper", "--kernel", "gaussian", "--epochs", "4"], {"kernel": "gaussian", "epochs": 4, "lr": 1e-3}),
     (["--mode", "paper", "--clip", "0", "--lr", "3e-4", "--warmup", "0.3", "--weight-decay", "0"],
      {"lr": 3e-4, "clip": None, "warmup": 0.3, "weight_decay": 0.0, "baseline_weight_decay": 0.01})],
)  # fmt: skip
def test_cli_defaults_per_mode(argv, want, tmp_path, monkeypatch):
    """Paper mode defaults to the recipe of docs/lasf.md's sweep (lasf-minilm-paper); the stable defaults are lasf-minilm's."""
    import workers.analyses.lasf.distil as distil_mod
    from backend.cli import main

    seen = {}

    def record(config, out_dir, **_):  # the CLI's mapping of flags to TrainConfig, not training
        config.check()
        seen.update(vars(config))
        raise HeadscopeError("recorded")

    monkeypatch.setattr(distil_mod, "distil", record)
    assert main(["lasf-train", *argv, "--out", str(tmp_path / "o"), "-q"]) == 2
    assert {k: seen[k] for k in want} == want


def test_probe_script_trains_with_lasf_train_loop(tmp_path, one_torch_thread):
    """scripts/lasf_probe.py (docs/lasf.md, "Paper mode, second sweep") is a thin script over
    ``train_models``: on the same cached features and settings it ends with the very weights the
    library's loop gives, and its diagnostics and result lines come out."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    batches = _batches(n=6, d=384)
    cache = tmp_path / "cache"
    cache.mkdir()
    raw = {s: [(b.x, b.y, b.mask) for b in batches] for s in ("train", "val", "test")}
    torch.save(raw, cache / "lasf-features-tiny.pt")
    run = subprocess.run(
        [sys.executable, str(root / "scripts" / "lasf_probe.py"), "--cache", str(cache),
         "--out-dir", str(tmp_path / "out"), "--name", "p", "--kernel", "identity", "--wd", "1",
         "--epochs", "2", "--diag-every", "4", "--test"],
        capture_output=True, text=True, cwd=root, timeout=300,
        env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    diag = [json.loads(x) for x in lines if x.startswith('{"step"')]
    assert [d["step"] for d in diag] == [0, 4, 8, 12]  # 6 batches x 2 epochs
    assert all(0.0 <= b["sat"] <= 1.0 and b["z_std"] > 0 for d in diag for b in d["diag"])
    result = json.loads(next(x for x in lines if x.startswith("RESULT "))[len("RESULT ") :])
    assert len(result["val_r2"]) == 2 and set(result["test"]) == {"r2", "top1", "rho", "tokens"}

    config = TrainConfig(mode="paper", kernel="identity", residual="none", init_scale=0.1,
                         lr=1e-3, clip=1.0, weight_decay=1.0, epochs=2)  # fmt: skip
    lasf = build_lasf(config, 384)  # on one thread, as the probe runs
    train_models({"lasf": lasf}, config, batches, batches)
    probed = torch.load(tmp_path / "out" / "p.pt", weights_only=True)
    assert set(probed) == {"L", "L_S", "L_Y"}
    for name, tensor in lasf.state_dict().items():
        assert torch.equal(probed[name], tensor), name
