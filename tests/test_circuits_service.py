"""Circuits (issue 30) through the API (422s before queueing), the job pipeline and the CLI: the same
fixtures as tests/test_causal_service.py (tiny GPT-2 with a head, MiniLM an encoder, real Redis)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import test_corpus_service
from fastapi.testclient import TestClient
from redis import Redis

from backend.app import create_app
from backend.cli import main
from backend.config import Settings
from workers.core.contracts import AnalysisRequest
from workers.queue.jobs import compute_analysis

pytestmark = pytest.mark.usefixtures("one_torch_thread")
app, run_jobs = (
    test_corpus_service.app,
    test_corpus_service.run_jobs,
)  # the in-process app and a burst worker

CLEAN = "The head of the model is in the text and the word is of the token"
CORRUPTED = "The head of the model is in the text and a word is of the token"


@pytest.fixture(scope="module")
def client(redis_server, tmp_path_factory, catalogue):
    s = Settings(data_dir=tmp_path_factory.mktemp("data"), redis_url=redis_server)
    with TestClient(create_app(s, redis=Redis.from_url(redis_server), background=False)) as c:
        yield c


TINY_GPT2_EDGES = 110  # 2 layers x 4 heads (tests/conftest.py), q/k/v apart
BAD_PAIRS = [  # everything the causal page refuses, for both analyses of a pair
    (kind, model, options, [w.replace("KIND", kind) for w in words])
    for kind in ("attribution-patching", "edge-attribution")
    for model, options, words in [
        ("minilm", {"corrupted": CORRUPTED}, ["minilm has no language-model head", "encoder"]),
        ("tiny-gpt2", {}, ["KIND needs a corrupted text"]),
        (
            "tiny-gpt2",
            {"corrupted": CORRUPTED + " of the"},
            ["the corrupted text has 33 tokens and the text 31"],
        ),
    ]
]
BAD_OPTIONS = [
    ("attribution-patching", {"real": "yes"}, ["options.real"]),
    ("attribution-patching", {"qk_fix": "yes"}, ["options.qk_fix"]),
    ("edge-attribution", {"top_edges": 10_001}, ["options.top_edges", "10000"]),
    ("edge-attribution", {"top_edges": TINY_GPT2_EDGES + 1}, ["top_edges 111", "110 edges"]),
    ("edge-attribution", {"ig_steps": 51}, ["options.ig_steps", "50"]),
    ("edge-attribution", {"ig_steps": 0}, ["options.ig_steps"]),
    ("edge-attribution", {"curve_sizes": [0, 5]}, ["curve sizes are edge counts"]),
    ("edge-attribution", {"curve_sizes": [5, 111]}, ["curve size 111", "110 edges"]),
    ("edge-attribution", {"curve_sizes": list(range(1, 26))}, ["options.curve_sizes"]),
    ("edge-attribution", {"all_edges": 1}, ["options.all_edges"]),
]


@pytest.mark.parametrize(
    ("kind", "model", "options", "words"),
    BAD_PAIRS
    + [(kind, "tiny-gpt2", {"corrupted": CORRUPTED, **o}, w) for kind, o, w in BAD_OPTIONS],
)
def test_bad_circuits_requests_get_422_before_queueing(client, kind, model, options, words):
    resp = client.post("/api/analyses", json={"model": model, "text": CLEAN, "analyses": [kind],
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
    result = compute_analysis(
        req, progress=lambda f, m: steps.append(f), on_partial=lambda fields: None
    )
    json.dumps(result)
    n, L, H = result["n_tokens"], result["n_layers"], result["n_heads"]
    atp = result["attribution-patching"]
    assert np.asarray(atp["heads"]).shape == (L, H) and np.asarray(
        atp["heads_by_position"]
    ).shape == (L, H, n)
    assert np.asarray(atp["residual"]).shape == (L + 1, n) and len(atp["feedforward"]) == L
    assert atp["a"] == 5 and atp["b"] == 9 and len(atp["corrupted_token_texts"]) == n
    # its real patching is the patching view's own
    assert np.allclose(atp["real"]["heads"], result["patching"]["heads"], atol=1e-12)
    # the same float64 metric from two forwards of the clean text: AtP's unembeds the last position alone
    # (a vector product), patching's every position (a matrix product), and the BLAS may sum those in
    # another order (MKL's AVX-512 paths do: -0.09584123936375166 vs ...65). Rounding is ~1e-16 here; a
    # real difference (another target, text or dtype: the metric in float32 is off by 3e-8) is far above 1e-12.
    assert atp["metric_clean"] == pytest.approx(
        result["patching"]["metric_clean"], rel=1e-12, abs=1e-12
    )
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
    assert (
        len(atp["heads"]) == atp["n_layers"]
        and "pearson" in atp
        and atp["corrupted_text"] == CORRUPTED
    )
    assert main(args) == 2  # no --corrupted


def test_memory_estimate_counts_the_gradient_run():
    from workers.engine.memory import ModelFacts, estimate_text_request

    facts = ModelFacts(
        n_layers=30,
        n_heads=9,
        hidden=576,
        intermediate=1536,
        n_params=135_000_000,
        head_dim=64,
        vocab=49152,
    )  # SmolLM2-135M's shapes
    plain = estimate_text_request(facts, 512, ["patching"], {})
    atp = estimate_text_request(facts, 512, ["attribution-patching"], {})
    real = estimate_text_request(facts, 512, ["attribution-patching"], {"real": True})
    stage = atp.parts.get("attribution-patching")
    assert (
        stage is not None and stage > 30 * atp.parts["forward"]
    )  # every layer's activations are kept
    assert real.parts["attribution-patching"] >= max(stage, plain.parts["patching"])


# ----------------------------------------------------------------------------- edge-attribution (issue 30)
def test_qk_fix_is_an_option_of_attribution_patching(catalogue):
    req = AnalysisRequest.model_validate(
        {
            "model": "tiny-gpt2",
            "text": CLEAN,
            "analyses": ["attribution-patching"],
            "options": {"corrupted": CORRUPTED, "target": [5, 9], "qk_fix": True},
        }
    )
    atp = compute_analysis(req, progress=lambda f, m: None, on_partial=lambda fields: None)[
        "attribution-patching"
    ]
    assert atp["qk_fix"] is True and np.asarray(atp["keys"]).shape == np.asarray(atp["heads"]).shape
    assert len(atp["qk_top"]) == 20 and "keys_rank_spearman" in atp


def test_job_computes_edge_attribution(catalogue):
    from workers.analyses.circuits.spec import edge_count

    req = AnalysisRequest.model_validate({
        "model": "tiny-gpt2", "text": CLEAN, "analyses": ["edge-attribution", "patching"],
        "options": {"corrupted": CORRUPTED, "target": [5, 9], "top_edges": 20, "ig_steps": 3, "dtype": "float64",
                    "curve_sizes": [30, 5, TINY_GPT2_EDGES]},
    })  # fmt: skip
    steps: list[tuple[float, str]] = []
    result = compute_analysis(
        req, progress=lambda f, m: steps.append((f, m)), on_partial=lambda fields: None
    )
    json.dumps(result)
    eap = result["edge-attribution"]
    assert eap["n_edges"] == TINY_GPT2_EDGES == edge_count(2, 4, False)
    assert eap["method"] == "EAP-IG" and eap["ig_steps"] == 3 and len(eap["edges"]) == 20
    assert [n for n, _ in eap["curve"]] == [5, 30, TINY_GPT2_EDGES]  # sorted, every edge last
    assert abs(eap["curve"][-1][1] - 1) < 1e-9  # every edge: the clean run
    assert abs(eap["metric_clean"] - result["patching"]["metric_clean"]) < 1e-12 and eap["a"] == 5
    assert len(eap["corrupted_token_texts"]) == result["n_tokens"]
    fractions = [f for f, _ in steps]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    messages = " | ".join(m for _, m in steps)
    assert (
        "EAP-IG: steps 1-3 of 3: backward at layer 1" in messages
        and "faithfulness: 4/4 circuits" in messages
    )
    # a request without the new options keeps its id; the defaults are left out of it
    plain = AnalysisRequest.model_validate(
        {
            "model": "tiny-gpt2",
            "text": CLEAN,
            "analyses": ["patching"],
            "options": {"corrupted": CORRUPTED, "top_edges": 200, "ig_steps": 5},
        }
    )
    assert not {"top_edges", "ig_steps", "curve_sizes", "all_edges", "qk_fix"} & set(
        plain.normalised()["options"]
    )


def test_cli_edge_attribution(tmp_path, catalogue):
    out = tmp_path / "e.json"
    args = ["analyze", "--model", "tiny-gpt2", "--text", CLEAN, "-q", "--out", str(out), "--analysis",
            "edge-attribution", "--target", "5", "9"]  # fmt: skip
    assert (
        main(
            [
                *args,
                "--corrupted",
                CORRUPTED,
                "--top-edges",
                "7",
                "--ig-steps",
                "2",
                "--curve-sizes",
                "3",
                "9",
            ]
        )
        == 0
    )
    eap = json.loads(out.read_text())
    assert (
        len(eap["edges"]) == 7 and eap["ig_steps"] == 2 and [n for n, _ in eap["curve"]] == [3, 9]
    )
    assert eap["corrupted_text"] == CORRUPTED and "faithfulness" in eap
    assert main(args) == 2  # no --corrupted
    assert main([*args, "--corrupted", CORRUPTED, "--ig-steps", "99"]) == 2


def test_edge_attribution_job_can_be_cancelled_while_running(app, monkeypatch):
    """DELETE /api/analyses/{id} while the job runs EAP-IG: it stops at its next step, keeps nothing, and
    never reaches the circuits; submitted again it runs to the end."""
    import workers.queue.reporter
    from workers.queue import keys as protocol

    client, store, conn = app
    req = {
        "model": "tiny-gpt2",
        "text": CLEAN,
        "analyses": ["edge-attribution"],
        "options": {"corrupted": CORRUPTED, "target": [5, 9], "ig_steps": 4},
    }
    job_id = client.post("/api/analyses", json=req).json()["id"]
    seen: list[str] = []
    real = workers.queue.reporter.Reporter.progress

    def spy(self, fraction, message):
        seen.append(message)
        if message.startswith("EAP-IG") and len(seen) < 1000:  # the user cancels while the job runs
            client.delete(f"/api/analyses/{job_id}")
        real(self, fraction, message)

    monkeypatch.setattr(workers.queue.reporter.Reporter, "progress", spy)
    run_jobs(conn)
    state = client.get(f"/api/analyses/{job_id}").json()
    assert state["status"] == "failed" and "cancelled" in state["error"], state
    assert any(m.startswith("EAP-IG") for m in seen) and not any("faithfulness" in m for m in seen)
    assert not conn.exists(protocol.partial_key(job_id)) and not store.has_result(job_id)
    monkeypatch.setattr(workers.queue.reporter.Reporter, "progress", real)
    assert (
        client.post("/api/analyses", json=req).json()["status"] == "queued"
    )  # submitted again, it runs
    run_jobs(conn)
    done = client.get(f"/api/analyses/{job_id}").json()
    assert done["status"] == "finished" and done["result"]["edge-attribution"]["curve"]
    assert client.delete("/api/analyses/" + "0" * 32).status_code == 404


def test_memory_estimate_of_edge_attribution():
    from workers.analyses.circuits.spec import edge_rows
    from workers.engine.memory import ModelFacts, estimate_text_request

    facts = ModelFacts(
        n_layers=30,
        n_heads=9,
        hidden=576,
        intermediate=1536,
        n_params=135_000_000,
        head_dim=64,
        vocab=49152,
    )  # SmolLM2-135M's shapes
    ig_rows, ig_row, patched_rows, patched_row = edge_rows(facts, 16)
    assert (
        ig_rows >= 5 and patched_rows >= 13
    )  # n = 16: EAP-IG's 5 steps and 13 circuits each in one batch
    short = estimate_text_request(facts, 16, ["edge-attribution"], {})
    long = estimate_text_request(facts, 512, ["edge-attribution"], {})
    one = estimate_text_request(
        facts, 512, ["edge-attribution"], {"ig_steps": 1, "curve_sizes": [10]}
    )
    stage = long.parts["edge-attribution"]
    assert stage > 2 * 301 * 512 * 576 * 4  # at least the clean and corrupted runs' writers
    assert short.parts["edge-attribution"] < stage and one.parts["edge-attribution"] <= stage
    assert (
        edge_rows(facts, 512)[0] == 1 and edge_rows(facts, 512)[1] > ig_row
    )  # long texts: one row at a time
