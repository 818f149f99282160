"""The `headscope analyze` command: JSON of every analysis on the default model, and its errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from backend.cli import main

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--n-iter", "100", "--early-exaggeration-iter", "50"]


@pytest.fixture(scope="module")
def text_file(tmp_path_factory, demo_text):
    path = tmp_path_factory.mktemp("cli") / "text.txt"
    path.write_text(demo_text[:500])
    return path


def _run(tmp_path, *args) -> dict:
    out = tmp_path / "r.json"
    assert main(["analyze", *args, "--out", str(out), "-q"]) == 0
    return json.loads(out.read_text())


def test_max_attention_json(tmp_path, text_file, minilm):
    r = _run(
        tmp_path, "--model", "minilm", "--text-file", str(text_file), "--analysis", "max-attention"
    )
    n = len(r["tokens"])
    ma = np.asarray(r["max_attention"])
    assert ma.shape == (6, 12, n) and np.all((ma > 0) & (ma <= 1))
    assert r["tokens"][0] == "[CLS]" and r["special"][0] and r["analysis"] == "max-attention"


def test_head_tsne_one_head_and_all_heads(tmp_path, text_file, minilm):
    one = _run(
        tmp_path,
        "--text-file",
        str(text_file),
        "--analysis",
        "head-tsne",
        "--layer",
        "2",
        "--head",
        "5",
        "--seed",
        "1",
        *FAST,
    )
    n = len(one["tokens"])
    assert np.asarray(one["embedding"]).shape == (n, 2)
    assert len(one["kl"]) == 1 and one["timings"]["tsne_s"] > 0
    grid = _run(
        tmp_path,
        "--text-file",
        str(text_file),
        "--analysis",
        "head-tsne",
        "--layer",
        "all",
        "--head",
        "all",
        "--drop-special",
        *FAST,
    )
    assert np.asarray(grid["embedding"]).shape == (6, 12, n - 2, 2)
    assert np.asarray(grid["kl"]).shape == (6, 12)


def test_hidden_word_robustness_decomposition(tmp_path, text_file, minilm):
    hid = _run(
        tmp_path, "--text-file", str(text_file), "--analysis", "hidden-tsne", "--layer", "3", *FAST
    )
    assert np.asarray(hid["embedding"]).shape == (len(hid["tokens"]), 2) and len(hid["kl"]) == 1
    words = tmp_path / "words.txt"
    words.write_text("apple\npear\nplum\ncar\nbus\ntrain\n")
    w = _run(tmp_path, "--text-file", str(words), "--analysis", "word-tsne", "--layer", "6", *FAST)
    assert w["words"] == ["apple", "pear", "plum", "car", "bus", "train"]
    rob = _run(
        tmp_path,
        "--text-file",
        str(text_file),
        "--analysis",
        "robustness",
        "--layer",
        "3",
        "--head",
        "10",
        "--repeats",
        "2",
        *FAST,
    )
    assert set(rob["head_tsne"]) == {"undisturbed", "disturbed"}
    dec = _run(tmp_path, "--text-file", str(text_file), "--analysis", "decomposition")
    per_token = np.asarray(dec["per_token"])
    assert per_token.shape == (7, len(dec["tokens"]), 4)
    np.testing.assert_allclose(per_token.sum(axis=-1), 1.0, atol=1e-4)


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "backend.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        input=stdin,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (
            ["--model", "gpt-17", "--text", "hi"],
            "unknown model 'gpt-17'; available models: gemma3-270m, minilm, smollm2",
        ),
        (["--text", "   "], "the text is empty"),
        (["--text-file", "/nonexistent/t.txt"], "text file not found: /nonexistent/t.txt"),
        (["--text", "hello there", "--layer", "7", "--head", "0"], "layer 7 is out of range"),
        (["--text", "word " * 600], "the text has 602 tokens but model 'minilm' takes at most 512"),
    ],
)
def test_errors_exit_nonzero_with_one_line(args, reason):
    proc = _cli("analyze", "--analysis", "head-tsne", "-q", *args)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("headscope: error: ") and reason in lines[0], (
        proc.stderr
    )
    assert proc.stdout == ""


def test_binary_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "x.bin"
    bad.write_bytes(b"\xff\xfe\x00\x81" * 10)
    proc = _cli("analyze", "--analysis", "max-attention", "-q", "--text-file", str(bad))
    assert proc.returncode == 2 and "not UTF-8 text" in proc.stderr


def test_truncate_opts_in(tmp_path, minilm):
    r = _run(tmp_path, "--text", "word " * 600, "--analysis", "max-attention", "--truncate")
    assert r["n_tokens"] == 512 and r["truncated_from"] == 602


def test_progress_in_a_log_file_is_one_line_per_step(tmp_path, text_file):
    """stderr that is not a terminal (a file, a pipe) gets lines, not carriage-return redraws."""
    out = _cli(
        "analyze",
        "--text-file",
        str(text_file),
        "--analysis",
        "robustness",
        "--layer",
        "1",
        "--head",
        "0",
        "--repeats",
        "12",
        *FAST,
        "--out",
        str(tmp_path / "r.json"),
    )
    assert out.returncode == 0, out.stderr
    assert "\r" not in out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("robustness ")]
    assert len(lines) >= 2 and all(len(ln) < 200 for ln in lines)
    pcts = [float(ln.split()[1].rstrip("%")) for ln in lines]
    assert pcts == sorted(pcts) and pcts[-1] == 100.0


def test_progress_lines_write_each_step_once_and_repeat_slowly():
    from workers.core.progress_lines import ProgressLines, step_of

    now = [0.0]
    lines = ProgressLines(every_s=5.0, clock=lambda: now[0])
    assert step_of("robustness: repeat 17/200") == "robustness: repeat #/#"
    due = []
    for i in range(200):  # 200 repeats, 0.1 s apart: the first, then one line each 5 s
        now[0] = i * 0.1
        due.append(lines.due(i / 200, f"robustness: repeat {i + 1}/200"))
    assert sum(due) == 4 and due[0] and due[50] and due[100] and due[150]
    assert lines.due(0.999, "decomposition: layer 1/6")  # a new step: at once
    assert lines.due(1.0, "done") and not lines.due(1.0, "done")  # the end, once
