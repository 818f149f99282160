"""The causal views through the API (checks before queueing), the job pipeline and the CLI (issue 23).

In process: FastAPI's TestClient on a real Redis for the 422s, ``compute_analysis`` (what the worker
runs) for the result, ``headscope analyze`` for the CLI. The tiny GPT-2 has a head (tied embedding);
the tiny Llama of the shared catalogue is a base model without one, MiniLM an encoder.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from fastapi.testclient import TestClient
from redis import Redis

from backend.app import create_app
from backend.cli import main
from backend.config import Settings
from workers.core.contracts import AnalysisRequest
from workers.queue.jobs import compute_analysis

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CLEAN = "The head of the model is in the text and the word is of the token"
CORRUPTED = "The head of the model is in the text and a word is of the token"
CAUSAL = ["predictions", "logit-lens", "logit-attribution", "ablation", "patching"]


@pytest.fixture(scope="module")
def client(redis_server, tmp_path_factory, catalogue):
    s = Settings(data_dir=tmp_path_factory.mktemp("data"), redis_url=redis_server)
    with TestClient(create_app(s, redis=Redis.from_url(redis_server), background=False)) as c:
        yield c


def _post(client, model: str, analyses: list[str], text: str = CLEAN, **options):
    return client.post(
        "/api/analyses",
        json={"model": model, "text": text, "analyses": analyses, "options": options},
    )


def test_models_say_which_have_a_head(client):
    models = {m["name"]: m for m in client.get("/api/models").json()["models"]}
    assert models["tiny-gpt2"]["lm_head"] is True
    assert models["minilm"]["lm_head"] is False and "encoder" in models["minilm"]["lm_head_reason"]
    assert (
        models["tiny-llama"]["lm_head"] is False
        and "base model only" in models["tiny-llama"]["lm_head_reason"]
    )


@pytest.mark.parametrize(
    ("model", "analyses", "options", "words"),
    [
        (
            "minilm",
            ["predictions"],
            {},
            ["minilm has no language-model head", "encoder", "tiny-gpt2"],
        ),
        (
            "tiny-llama",
            ["logit-attribution"],
            {},
            ["tiny-llama has no language-model head", "base model only"],
        ),
        (
            "tiny-gpt2",
            ["patching"],
            {"corrupted": CORRUPTED + " of the"},
            ["the corrupted text has 33 tokens and the text 31"],
        ),
        ("tiny-gpt2", ["patching"], {}, ["patching needs a corrupted text"]),
        ("tiny-gpt2", ["predictions"], {"k": 51}, ["options.k", "50"]),
        (
            "tiny-gpt2",
            ["ablation"],
            {"ablate": [[0, h] for h in range(65)]},
            ["options.ablate", "64"],
        ),
        (
            "tiny-gpt2",
            ["ablation"],
            {"ablate": [[5, 0]]},
            ["head L5H0 is out of range", "layers 0-1"],
        ),
        (
            "tiny-gpt2",
            ["continue", "predictions"],
            {"continue_tokens": 65},
            ["continue_tokens", "64"],
        ),
        (
            "tiny-gpt2",
            ["continue", "predictions"],
            {"continue_tokens": 60},
            ["with 60 more", "limit of 64"],
        ),
        (
            "tiny-gpt2",
            ["continue", "max-attention"],
            {},
            ["continue extends the text of the causal views only"],
        ),
        (
            "tiny-gpt2",
            ["logit-attribution"],
            {"target": " model"},
            ["target ' model' is 5 tokens", "exactly one"],
        ),
        ("tiny-gpt2", ["logit-attribution"], {"target": [1, 2, 3]}, ["two tokens [a, b], got 3"]),
        ("tiny-gpt2", ["ablation"], {"position": 99}, ["position 99 is out of range"]),
    ],
)
def test_bad_causal_requests_get_422_before_queueing(client, model, analyses, options, words):
    resp = _post(client, model, analyses, **options)
    assert resp.status_code == 422, resp.text
    body = json.dumps(resp.json())
    for w in words:
        assert w in body, (w, body)


def test_good_causal_request_is_queued(client):
    resp = _post(client, "tiny-gpt2", CAUSAL, corrupted=CORRUPTED, target=" the")
    assert resp.status_code == 202, resp.text


def test_job_computes_every_causal_view(catalogue):
    req = AnalysisRequest.model_validate({
        "model": "tiny-gpt2", "text": CLEAN, "analyses": ["continue", *CAUSAL],
        "options": {"corrupted": CORRUPTED, "continue_tokens": 3, "k": 4, "target": [5, 9], "ablate": "each", "position": 5,
                    "dtype": "float64"},
    })  # fmt: skip
    seen: list[str] = []
    steps: list[float] = []
    result = compute_analysis(req, progress=lambda f, m: steps.append(f),
                              on_partial=lambda fields: seen.extend(k for k in fields if k in CAUSAL))  # fmt: skip
    json.dumps(result)  # JSON-ready
    n, L, H = result["n_tokens"], result["n_layers"], result["n_heads"]
    assert result["generated"] == [False] * (n - 3) + [True] * 3
    assert result["continue"]["n_generated"] == 3 and result["text"].startswith(CLEAN)
    assert np.asarray(result["predictions"]["top_probs"]).shape == (n, 4)
    assert np.asarray(result["logit-lens"]["top_probs"]).shape == (L + 1, n)
    att = result["logit-attribution"]
    total = (
        np.asarray(att["input"])
        + np.asarray(att["heads"]).sum((0, 1))
        + np.asarray(att["feedforward"]).sum(0)
    )
    assert np.abs(total + np.asarray(att["bias"]) - np.asarray(att["logit"])).max() < 1e-9
    assert (
        np.asarray(result["ablation"]["map"]).shape == (L, H)
        and result["ablation"]["position"] == 5
    )
    pat = result["patching"]
    assert (
        np.asarray(pat["residual"]).shape == (L + 1, n)
        and abs(pat["residual"][L][n - 1] - 1) < 1e-9
    )
    assert len(pat["corrupted_token_texts"]) == n
    assert seen == CAUSAL and steps == sorted(steps) and steps[-1] == 1.0


def test_cli_attribution_and_patching(tmp_path, catalogue):
    out = tmp_path / "a.json"
    args = [
        "analyze",
        "--model",
        "tiny-gpt2",
        "--text",
        CLEAN,
        "-q",
        "--out",
        str(out),
        "--dtype",
        "float64",
    ]
    assert main([*args, "--analysis", "logit-attribution", "--target", "5", "9"]) == 0
    att = json.loads(out.read_text())
    assert (
        att["analysis"] == "logit-attribution" and att["target"][0] == 5 and att["target_b"][0] == 9
    )
    assert att["max_abs_error"] < 1e-9
    assert (
        main([*args, "--analysis", "patching", "--corrupted", CORRUPTED, "--target", "5", "9"]) == 0
    )
    pat = json.loads(out.read_text())
    assert len(pat["residual"]) == pat["n_layers"] + 1 and pat["corrupted_text"] == CORRUPTED
    assert main([*args, "--analysis", "ablation", "--ablate", "0.1,1.2", "--ablation", "zero"]) == 0
    abl = json.loads(out.read_text())
    assert abl["heads"] == [[0, 1], [1, 2]] and len(abl["effect"]) == abl["n_tokens"]
    assert main([*args, "--analysis", "patching"]) == 2  # no --corrupted
    assert main([*args, "--analysis", "predictions", "--k", "0"]) == 2
    assert (
        main(["analyze", "--model", "minilm", "--text", CLEAN, "-q", "--analysis", "predictions"])
        == 2
    )
