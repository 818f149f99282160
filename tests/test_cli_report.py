"""`headscope analyze` says what it found: a few lines per analysis, read off the result JSON by the
analysis' own report (workers/core/report.py), and its --help lists every analysis on its own line."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from backend.cli import build_parser, main
from workers.core import registry
from workers.core.notation import display_text, head_label
from workers.core.report import generic, num, report_lines, signed

TEXT, CORRUPTED = "the cat sat on the mat", "the cat sat on the hat"
PAIR = ["--corrupted", CORRUPTED, "--target", "a", "b"]


def _run(tmp_path, capsys, kind: str, *extra: str) -> tuple[dict, str]:
    out = tmp_path / f"{kind}.json"
    argv = ["analyze", "--model", "tiny-gpt2", "--text", TEXT, "--analysis", kind]
    assert main([*argv, "--out", str(out), "-q", *extra]) == 0
    return json.loads(out.read_text()), capsys.readouterr().out


def test_help_lists_every_analysis_with_its_summary_on_its_own_line(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "160")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["analyze", "--help"])
    shown = capsys.readouterr().out
    for spec in registry.specs():
        if spec.cli:
            # the kind starts its own line; a long summary wraps onto deeper-indented lines after it
            line = re.search(rf"^  {re.escape(spec.kind)} +(.*(?:\n {{6,}}\S.*)*)$", shown, re.M)
            assert line is not None, spec.kind
            assert " ".join(line.group(1).split()) == " ".join(spec.summary.split()), spec.kind


def test_an_unknown_analysis_is_one_short_line(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["analyze", "--analysis", "nope"])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "unknown analysis 'nope'" in last and "--help" in last and len(last) < 160


def test_predictions_print_the_json_top_tokens(tmp_path, capsys, catalogue):
    r, out = _run(tmp_path, capsys, "predictions", "--k", "3")
    assert out.splitlines()[0] == f"predictions on tiny-gpt2 ({r['n_tokens']} tokens):"
    top = ", ".join(
        f"{display_text(t)} {num(p, 2)}"
        for t, p in zip(r["top_tokens"][-1], r["top_probs"][-1], strict=False)
    )
    assert f"next after position {r['n_tokens'] - 1} " in out and top in out
    bits = np.mean(r["surprisal_bits"])
    assert f"mean surprisal {num(bits)} bits" in out


def test_ablation_prints_its_strongest_heads(tmp_path, capsys, catalogue):
    r, out = _run(tmp_path, capsys, "ablation")
    m = np.abs(np.asarray(r["map"]))
    layer, head = np.unravel_index(m.argmax(), m.shape)
    assert f"changes it most: {head_label(layer, head)} {signed(r['map'][layer][head])}" in out


def test_a_circuit_prints_its_size_and_faithfulness(tmp_path, capsys, catalogue):
    r, out = _run(tmp_path, capsys, "edge-attribution", *PAIR, "--ig-steps", "1")
    c = r["circuit"]
    assert f"circuit of the top {c['n_top']} of {r['n_edges']} edges" in out
    assert f"{c['n_edges']} edges on a path, faithfulness {num(r['faithfulness'])}" in out
    e = r["edges"][0]
    assert f"strongest edges: {e['source']} -> {e['target']}" in out


def test_decomposition_prints_its_reconstruction_error(tmp_path, capsys, catalogue):
    r, out = _run(tmp_path, capsys, "decomposition")
    assert f"max {num(max(r['max_abs_error']))}, relative {num(max(r['max_rel_error']))}" in out


def test_the_json_on_stdout_stays_json_and_the_report_goes_to_stderr(capsys, catalogue):
    argv = ["analyze", "--model", "tiny-gpt2", "--text", TEXT, "--analysis", "logit-lens"]
    assert main(argv) == 0
    got = capsys.readouterr()
    r = json.loads(got.out)  # stdout is the JSON alone
    assert "logit-lens on tiny-gpt2" in got.err
    assert f"the final top token {display_text(r['top_tokens'][-1][-1])} leads from X[" in got.err


def test_an_analysis_without_a_report_gets_the_generic_one():
    spec = next(s for s in registry.specs() if s.report is None)
    section = {"n_words": 3, "maps": [[[[0.5]]]], "words": ["a", "b"], "method": "pca"}
    lines = report_lines(spec.kind, section, {"model": "m", "n_tokens": 4})
    assert lines[0] == f"{spec.kind} on m (4 tokens):"
    assert lines[1:] == ["  " + line for line in generic(section, {})]
    assert lines[1] == "  n_words 3, method pca" and lines[2] == "  arrays: maps 1x1x1x1, words 2"


@pytest.fixture(scope="module")
def ioi_set(tiny_model_dirs) -> str:
    """Four IOI examples for tiny-gpt2's tokenizer, as a pasted task set (JSONL)."""
    from test_circuit_tasks import TINY_NAMES
    from transformers import AutoTokenizer

    from workers.analyses.circuits.tasks import ioi

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dirs["tiny-gpt2"]))
    return "\n".join(json.dumps(ex.as_dict()) for ex in ioi(tok, 4, seed=0, names=TINY_NAMES))


@pytest.mark.parametrize(
    ("kind", "extra"),
    [
        ("circuits-set", ["--ig-steps", "1", "--bootstrap", "0", "--random-circuits", "0"]),
        ("atlas", ["--max-texts", "3", "--random-seqs", "2", "--random-len", "6",
                   "--resamples", "0", "--skip-evidence"]),
    ],
)  # fmt: skip
def test_a_placeholder_text_is_reported_as_what_the_job_read(
    tmp_path, capsys, catalogue, ioi_set, kind, extra
):
    """Circuits on a set and the atlas read no text: the heading says what they read instead."""
    out = tmp_path / f"{kind}.json"
    text = ioi_set if kind == "circuits-set" else "head atlas"
    argv = [
        "analyze",
        "--model",
        "tiny-gpt2",
        "--text",
        text,
        "--analysis",
        kind,
        "--out",
        str(out),
    ]
    assert main([*argv, "-q", *extra]) == 0
    r, heading = json.loads(out.read_text()), capsys.readouterr().out.splitlines()[0]
    if kind == "circuits-set":
        assert len(r["examples"]) == 4
        assert heading == "circuits-set on tiny-gpt2 (4 examples):"
    else:
        p = r["probe"]
        assert (p["corpus_texts"], p["random_seqs"], p["random_len"]) == (3, 2, 6)
        assert heading == (
            "atlas on tiny-gpt2 (3 texts of builtin-english and 2 random sequences of 6 tokens):"
        )


def test_a_stored_or_built_in_set_is_named_in_the_heading():
    for extra, name in (
        ({"task": "ioi"}, "ioi"),
        ({"task": "upload", "set_name": "mib.jsonl"}, "mib.jsonl"),
    ):
        section = {**extra, "examples": [{}] * 5}
        heading = report_lines("circuits-set", section, {"model": "m", "n_tokens": 2})[0]
        assert heading == f"circuits-set on m (5 examples of {name}):"
