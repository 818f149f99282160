"""Circuits (issue 30) through the API (422s before queueing), the job pipeline and the CLI: the same
fixtures as tests/test_causal_service.py (tiny GPT-2 with a head, MiniLM an encoder, real Redis)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fastapi.testclient import TestClient
from redis import Redis

from backend.app import create_app
from backend.cli import main
from backend.config import Settings
from workers.contracts import AnalysisRequest
from workers.jobs import compute_analysis

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CLEAN = "The head of the model is in the text and the word is of the token"
CORRUPTED = "The head of the model is in the text and a word is of the token"


@pytest.fixture(scope="module")
def client(redis_server, tmp_path_factory, catalogue):
    s = Settings(data_dir=tmp_path_factory.mktemp("data"), redis_url=redis_server)
    with TestClient(create_app(s, redis=Redis.from_url(redis_server), background=False)) as c:
        yield c


@pytest.mark.parametrize(
    ("model", "options", "words"),
    [
        ("minilm", {"corrupted": CORRUPTED}, ["minilm has no language-model head", "encoder"]),
        ("tiny-gpt2", {}, ["attribution-patching needs a corrupted text"]),
        ("tiny-gpt2", {"corrupted": CORRUPTED + " of the"}, ["the corrupted text has 33 tokens and the text 31"]),
        ("tiny-gpt2", {"corrupted": CORRUPTED, "real": "yes"}, ["options.real"]),
    ],
)
def test_bad_attribution_patching_gets_422_before_queueing(client, model, options, words):
    resp = client.post("/api/analyses", json={"model": model, "text": CLEAN, "analyses": ["attribution-patching"],
                                              "options": options})  # fmt: skip
    assert resp.status_code == 422, resp.text
    body = json.dumps(resp.json())
    for w in words:
        assert w in body, (w, body)


def test_job_computes_attribution_patching_beside_real_patching(catalogue):
    req = AnalysisRequest.model_validate({
        "model": "tiny-gpt2", "text": CLEAN, "analyses": ["patching", "attribution-patching"],
        "options": {"corrupted": CORRUPTED, "target": [5, 9], "real": True, "dtype": "float64"},
    })  # fmt: skip
    steps: list[float] = []
    result = compute_analysis(req, progress=lambda f, m: steps.append(f), on_partial=lambda fields: None)
    json.dumps(result)
    n, L, H = result["n_tokens"], result["n_layers"], result["n_heads"]
    atp = result["attribution-patching"]
    assert np.asarray(atp["heads"]).shape == (L, H) and np.asarray(atp["heads_by_position"]).shape == (L, H, n)
    assert np.asarray(atp["residual"]).shape == (L + 1, n) and len(atp["feedforward"]) == L
    assert atp["a"] == 5 and atp["b"] == 9 and len(atp["corrupted_token_texts"]) == n
    # its real patching is the patching view's own
    assert np.allclose(atp["real"]["heads"], result["patching"]["heads"], atol=1e-12)
    assert atp["metric_clean"] == result["patching"]["metric_clean"]
    assert -1 <= atp["pearson"] <= 1 and -1 <= atp["spearman"] <= 1
    assert steps == sorted(steps) and steps[-1] == 1.0
    # the request without the new option keeps the id it had before the option existed
    plain = AnalysisRequest.model_validate({"model": "tiny-gpt2", "text": CLEAN, "analyses": ["patching"],
                                            "options": {"corrupted": CORRUPTED}})  # fmt: skip
    assert "real" not in plain.normalised()["options"]


def test_cli_attribution_patching(tmp_path, catalogue):
    out = tmp_path / "a.json"
    args = ["analyze", "--model", "tiny-gpt2", "--text", CLEAN, "-q", "--out", str(out), "--dtype", "float64",
            "--analysis", "attribution-patching"]  # fmt: skip
    assert main([*args, "--corrupted", CORRUPTED, "--target", "5", "9", "--real"]) == 0
    atp = json.loads(out.read_text())
    assert len(atp["heads"]) == atp["n_layers"] and "pearson" in atp and atp["corrupted_text"] == CORRUPTED
    assert main(args) == 2  # no --corrupted


def test_memory_estimate_counts_the_gradient_run():
    from workers.analysis.memory import ModelFacts, estimate_text_request

    facts = ModelFacts(n_layers=30, n_heads=9, hidden=576, intermediate=1536, n_params=135_000_000, head_dim=64,
                       vocab=49152)  # SmolLM2-135M's shapes
    plain = estimate_text_request(facts, 512, ["patching"], {})
    atp = estimate_text_request(facts, 512, ["attribution-patching"], {})
    real = estimate_text_request(facts, 512, ["attribution-patching"], {"real": True})
    stage = atp.parts.get("attribution-patching")
    assert stage is not None and stage > 30 * atp.parts["forward"]  # every layer's activations are kept
    assert real.parts["attribution-patching"] >= max(stage, plain.parts["patching"])
