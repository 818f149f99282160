"""The registry of analyses (docs/architecture.md): an analysis declared once, in its spec, is what
the contract, the API's checks, the CLI, the queue's weights and the memory plan read.

This module is itself an analysis: imported with ``HEADSCOPE_ANALYSES=tests.test_registry`` (as the
service and the CLI below do), it registers the toy ``token-lengths`` — a spec and a section function
written here and nowhere else — and the tests show it accepted by the API (a 422 for a bad option),
listed and run by the CLI, weighed by the queue and estimated by the memory plan. Its top-level
imports stay light: a worker imports this module.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import Field

from workers.core import registry
from workers.core.memory import Base, Footprint
from workers.core.options import TextOptions

ROOT = Path(__file__).resolve().parents[1]
TOY = "token-lengths"
HUGE = 2**50  # bytes the toy says it needs at bins = 50: over any budget


class TokenLengthsOptions(TextOptions):
    bins: int = Field(5, ge=1, le=50, description="token-lengths: bins of the histogram")


def token_lengths(ctx: Any, options: TokenLengthsOptions) -> dict[str, Any]:
    """The toy's section: a histogram of the text's tokens' lengths in characters."""
    enc = ctx.encoded
    lengths = [b - a for a, b in enc.offsets]
    counts, edges = np.histogram(lengths, bins=options.bins)
    return {"lengths": lengths, "counts": counts.tolist(), "edges": edges.tolist()}


def toy_memory(base: Base, options: TokenLengthsOptions) -> Footprint:
    return Footprint(stages={TOY: HUGE if options.bins == 50 else 1000 * base.n})


SPEC = registry.AnalysisSpec(
    kind=TOY,
    summary="a toy: a histogram of the tokens' lengths in characters",
    options=TokenLengthsOptions,
    section="tests.test_registry:token_lengths",
    order=1000,
    weight=2.5,
    needs={"whole_text"},
    memory=toy_memory,
)
if __name__ == "tests.test_registry":  # loaded by HEADSCOPE_ANALYSES, not collected by pytest
    registry.register(SPEC)


def _env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HEADSCOPE_ANALYSES": "tests.test_registry",
        **extra,
    }


def _python(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=ROOT,
        timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_the_toy_is_written_in_this_module_only():
    """No file of the project names the toy: registering it edited nothing."""
    named = [
        str(p.relative_to(ROOT))
        for top in ("workers", "backend", "frontend", "docs")
        for p in (ROOT / top).rglob("*")
        if p.is_file() and p.suffix in (".py", ".md", ".js") and TOY in p.read_text(errors="ignore")
    ]
    assert named == []


def test_the_queue_weighs_and_the_memory_plan_estimates_the_toy():
    out = _python(
        "from workers.queue.jobs import stage_weight\n"
        "from workers.engine.memory import ModelFacts, estimate_text_request\n"
        "from workers.core.contracts import AnalysisRequest\n"
        "from workers.queue.keys import is_short\n"
        "f = ModelFacts(2, 2, 16, 32, 1000)\n"
        f"print(stage_weight({TOY!r}))\n"
        f"print(estimate_text_request(f, 10, [{TOY!r}], {{'bins': 3}}).parts[{TOY!r}])\n"
        f"print(estimate_text_request(f, 10, [{TOY!r}], {{'bins': 50}}).parts[{TOY!r}])\n"
        f"r = AnalysisRequest.model_validate({{'text': 'a b', 'analyses': [{TOY!r}]}})\n"
        "print(r.normalised()['options'])\n"
        f"print(is_short('analysis', r.normalised()))\n"
    )
    weight, small, big, options, short = out.split("\n")[:5]
    assert float(weight) == SPEC.weight
    assert int(small) == 1000 * 10 and int(big) == HUGE
    assert "'bins'" not in options  # a new option at its default leaves earlier ids as they were
    assert short == "False"  # the toy declares no short job


def test_the_cli_lists_and_runs_the_toy(tmp_path, tiny_model_dirs):
    from service_helpers import write_catalogue

    cat = write_catalogue(tmp_path / "models.json", tiny_model_dirs)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "backend.cli", "analyze", *args], capture_output=True,
            text=True, env=_env(HEADSCOPE_MODELS=str(cat)), cwd=ROOT, timeout=300,
        )  # fmt: skip

    helped = cli("--help")
    assert helped.returncode == 0
    assert f"{TOY} {SPEC.summary}" in " ".join(helped.stdout.split())
    assert re.search(
        r"--bins BINS\s+token-lengths: bins of the histogram \(default: 5\)", helped.stdout
    )
    bad = cli("--analysis", TOY, "--model", "tiny-bert", "--text", "a few words", "--bins", "0")
    assert bad.returncode == 2 and "bad option: bins: must be at least 1" in bad.stderr
    out = tmp_path / "toy.json"
    text = "The cat sat on the mat, twice."
    ran = cli("--analysis", TOY, "--model", "tiny-bert", "--text", text, "--bins", "3", "-q",
              "--out", str(out))  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    import json

    got = json.loads(out.read_text())
    assert got["analysis"] == TOY and len(got["counts"]) == 3
    assert sum(got["counts"]) == got["n_tokens"] == len(got["lengths"])
    assert got["lengths"] == [b - a for a, b in got["offsets"]]
    # no report of its own: the generic one, its arrays' shapes read off its section
    assert ran.stdout.splitlines()[0] == f"{TOY} on tiny-bert ({got['n_tokens']} tokens):"
    assert f"counts {len(got['counts'])}" in ran.stdout


@pytest.mark.slow
def test_the_service_accepts_runs_weighs_and_estimates_the_toy(tmp_path, tiny_model_dirs):
    """Real serve (uvicorn, Redis, a worker) with the toy registered by the environment only."""
    from service_helpers import ServeProcess, wait_done

    serve = ServeProcess.for_tests(
        tmp_path, tiny_model_dirs, workers=1, HEADSCOPE_ANALYSES="tests.test_registry"
    )
    serve.start()
    try:
        with serve.client() as client:
            body = {"model": "tiny-bert", "text": "The cat sat on the mat.", "analyses": [TOY]}
            bad = client.post("/api/analyses", json={**body, "options": {"bins": 0}})
            assert bad.status_code == 422
            assert bad.json()["errors"] == [
                {"field": "options.bins", "problem": "must be at least 1"}
            ]
            ok = client.post("/api/analyses", json={**body, "options": {"bins": 4}})
            assert ok.status_code == 202, ok.text
            done = wait_done(client, f"/api/analyses/{ok.json()['id']}")
            assert done["status"] == "finished", done["error"]
            section = done["result"][TOY]
            assert (
                len(section["counts"]) == 4 and sum(section["counts"]) == done["result"]["n_tokens"]
            )
            assert done["progress"] == 1.0
            # the memory plan reads the toy's estimate: 2**50 bytes fail before any work, naming it
            huge = client.post("/api/analyses", json={**body, "options": {"bins": 50}})
            assert huge.status_code == 202
            failed = wait_done(client, f"/api/analyses/{huge.json()['id']}")
            assert failed["status"] == "failed"
            assert "memory budget" in failed["error"] and TOY in failed["error"]
            schema = client.get("/openapi.json").json()["components"]["schemas"]
            assert "bins" in schema["AnalysisOptions"]["properties"]
    finally:
        serve.stop()


def test_an_option_declared_twice_differently_is_refused():
    """A shared option has one definition: two specs declaring ``bins`` differently cannot both
    register (the request's options would have two defaults)."""

    class Other(TextOptions):
        bins: int = Field(7, ge=1, le=9)

    other = registry.AnalysisSpec(
        kind="token-lengths-other", summary="x", options=Other, section="x:y", order=1001,
        weight=1.0,
    )  # fmt: skip
    registry.register(SPEC)
    registry.register(other)
    try:
        with pytest.raises(ValueError, match="option 'bins' is declared differently"):
            registry.request_options()
    finally:
        for kind in (SPEC.kind, other.kind):
            registry._SPECS.pop(kind)  # the test's own registrations
        registry.request_options.cache_clear()
    assert "bins" not in registry.request_options().model_fields


# Strings spelled as a kind that mean something else (homonyms), by (kind, file): not counted below.
HOMONYMS = {
    ("lasf", "backend/api/analyses.py"): "a checkpoint's lasf metadata (its base model)",
    (
        "lasf",
        "backend/api/checkpoints.py",
    ): "the upload kind of a LasF checkpoint, its lasf metadata",
    ("lasf", "workers/analyses/lasf/distil.py"): "the LasF model's name beside the baselines",
    ("lasf", "workers/analyses/lasf/train.py"): "the same model name in the training loop",
    ("lasf", "frontend/notebook/__init__.py"): "the notebook view hs.lasf() naming itself",
    ("ablation", "workers/analyses/lasf/fields.py"): "the LasF section's field: R² lost per field",
    ("ablation", "frontend/figures/lasf.py"): "that field of the LasF section, read",
    ("ablation", "frontend/notebook/__init__.py"): "the LasF view's figure of that field",
    ("atlas", "workers/__init__.py"): "the notebook function workers.atlas, named for its module",
    ("atlas", "frontend/notebook/__init__.py"): "the view hs.atlas_grid naming its one figure",
}


def test_every_spec_is_consistent():
    """Every spec's section resolves, its options are fields of the request's, and a kind's name
    stands in at most three source files (its spec, its page, its figures): elsewhere the spec's
    constant names it. ``HOMONYMS`` lists the same spelling meaning something else (each must still
    be there, so the list cannot go stale)."""
    flat = registry.request_options().model_fields
    for spec in registry.specs():
        assert set(spec.options.model_fields) <= set(flat), spec.kind
        if spec.kind != TOY:
            assert callable(registry.resolve(spec.section)), spec.kind
    sources = [p for top in ("workers", "backend", "frontend") for p in (ROOT / top).rglob("*.py")]
    texts = {p: p.read_text() for p in sources}
    for spec in registry.specs():
        if spec.kind == TOY:
            continue
        quoted = re.compile(r"[\"']" + re.escape(spec.kind) + r"[\"']")
        files = sorted(str(p.relative_to(ROOT)) for p, t in texts.items() if quoted.search(t))
        homonyms = {f for k, f in HOMONYMS if k == spec.kind}
        assert homonyms <= set(files), f"stale HOMONYMS of {spec.kind}: {homonyms - set(files)}"
        counted = [f for f in files if f not in homonyms]
        assert len(counted) <= 3, (spec.kind, counted)
