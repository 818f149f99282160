"""The CLI's error messages for bad options: one line in our words naming the option and the problem
(as the API's 422 words it), exit status 2, no output file, never pydantic's own text or its help URL."""

from __future__ import annotations

import pytest

from backend.cli import main


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["corpus", "--corpus", "builtin-english", "--max-tokens", "100000"],
            "max_tokens: must be at most",
        ),
        (
            ["corpus", "--corpus", "builtin-english", "--max-tokens", "1"],
            "max_tokens: must be at least 2",
        ),
        (["corpus", "--corpus", "builtin-english", "--statistics", "entropy,nope"], "'previous'"),
        (
            ["corpus", "--corpus", "builtin-english", "--joint", "x,1"],
            "--joint: expected LAYER,HEAD",
        ),
        (["corpus", "--corpus", "builtin-english", "--joint", "1,-1"], "head: must be at least 0"),
        (
            ["compare", "--corpus", "builtin-english", "--max-tokens", "0"],
            "max_tokens: must be at least",
        ),
        (
            ["analyze", "--analysis", "predictions", "--text", "a b", "--k", "0"],
            "bad option: k: must be at least 1",
        ),
    ],
)
def test_bad_options_get_one_clean_line(tmp_path, capsys, argv, expected):
    out = tmp_path / "out.json"
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("headscope: error: ") and expected in err, err
    assert (
        "\n" not in err
        and "pydantic" not in err
        and "http" not in err
        and "validation error" not in err
    ), err
    assert not out.exists()


@pytest.mark.parametrize(
    ("joint", "expected"),
    [
        ("99,0", "--joint: layer 99 is out of range: minilm has layers 0-5"),
        ("0,99", "--joint: head 99 is out of range: minilm has heads 0-11"),
    ],
)
def test_joint_head_outside_the_model_is_refused_before_the_corpus_runs(
    tmp_path, capsys, monkeypatch, joint, expected
):
    """``--joint`` names a head the model lacks: refused from the model's shape (MiniLM: 6 x 12) before
    a single text is run (the corpus run would fail this test), one clean line, exit 2, no output."""
    import workers.queue.jobs_corpus

    def _no_run(*_a, **_k):
        raise AssertionError("the corpus ran before the head was checked")

    monkeypatch.setattr(workers.queue.jobs_corpus, "compute_corpus", _no_run)
    monkeypatch.setattr(workers.queue.jobs_corpus, "compute_joint", _no_run)
    out = tmp_path / "out.json"
    assert main(["corpus", "--corpus", "builtin-english", "--joint", joint, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"headscope: error: {expected}", err
    assert not out.exists()
