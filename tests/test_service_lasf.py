"""LasF checkpoints and the ``lasf`` analysis through ``headscope serve`` (real HTTP, Redis, workers)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from service_helpers import wait_done

from workers.analyses.lasf.checkpoint import FORMAT, save_checkpoint
from workers.analyses.lasf.module import LasF

pytestmark = pytest.mark.slow
TEXT = "The old farmer wrote a letter to Alice Smith in Paris."


def _lasf_bytes(tmp_path, **config_over) -> bytes:
    torch.manual_seed(1)
    m = LasF(2, 384, 4, 8, 384, mode="stable", residual="identity")
    cfg = {
        "format": FORMAT,
        "base_model": "minilm",
        "replaced_layer": 5,
        "mode": "stable",
        "kernel": "identity",
        "residual": "identity",
        "seed": 1,
        "sizes": {"n_fields": 2, "d_in": 384, "d_q": 4, "d_s": 8, "d_out": 384},
    }
    save_checkpoint(m, cfg, tmp_path / "ok")
    if not config_over:
        return (tmp_path / "ok" / "lasf.safetensors").read_bytes()
    from safetensors.numpy import save

    tensors = {k: v.detach().numpy() for k, v in m.state_dict().items()}
    return save(tensors, metadata={"lasf_config": json.dumps({**cfg, **config_over})})


@pytest.fixture(scope="module")
def client(service):
    with service.client() as c:
        yield c


def _upload(client, name: str, data: bytes, kind: str = "any"):
    return client.post(
        f"/api/checkpoints?kind={kind}", files={"file": (name, data, "application/octet-stream")}
    )


def test_lasf_upload_analysis_and_refusals(client, service, tmp_path):
    resp = _upload(client, "mine.safetensors", _lasf_bytes(tmp_path), kind="lasf")
    assert resp.status_code == 201, resp.text
    up = resp.json()
    assert (
        up["lasf"]["base_model"] == "minilm"
        and up["lasf"]["sizes"]["n_fields"] == 2
        and up["candidates"] == []
    )

    before = service.leftovers()
    bad = _upload(client, "gpt.safetensors", _lasf_bytes(tmp_path, base_model="gpt2"))
    assert bad.status_code == 422 and "base model 'gpt2'" in bad.json()["detail"]
    from safetensors.numpy import save

    pe = save({"pos_embed": np.zeros((16, 8), np.float32)})
    not_lasf = _upload(client, "pe.safetensors", pe, kind="lasf")
    assert not_lasf.status_code == 422 and "not a LasF checkpoint" in not_lasf.json()["detail"]
    assert service.leftovers() == before  # nothing kept

    pe_id = _upload(client, "pe.safetensors", pe).json()["id"]  # a PE upload is fine as such...
    r = client.post("/api/analyses", json={"model": pe_id, "text": TEXT, "analyses": ["lasf"]})
    assert r.status_code == 422 and "not a LasF checkpoint" in r.text  # ...but not as a LasF model
    r = client.post("/api/analyses", json={"model": "minilm", "text": TEXT, "analyses": ["lasf"]})
    assert r.status_code == 422 and "LasF model" in r.text
    r = client.post(
        "/api/analyses", json={"model": up["id"], "text": TEXT, "analyses": ["max-attention"]}
    )
    assert r.status_code == 422

    r = client.post(
        "/api/analyses",
        json={
            "model": up["id"],
            "text": TEXT,
            "analyses": ["lasf"],
            "options": {"n_iter": 100, "early_exaggeration_iter": 50},
        },
    )
    assert r.status_code == 202, r.text
    body = wait_done(client, f"/api/analyses/{r.json()['id']}", timeout_s=240)
    assert body["status"] == "finished", body.get("error")
    sec = body["result"]["lasf"]
    assert (
        sec["n_fields"] == 2
        and len(sec["weights"]) == 2
        and sec["specialisation"]["n_perm"] == 1000
    )
    assert body["result"]["model"] == up["id"]


def test_both_shipped_layers_are_listed_and_the_paper_one_runs(client):
    models = client.get("/api/models").json()
    assert [m["name"] for m in models["lasf_models"]] == ["lasf-minilm", "lasf-minilm-paper"]
    assert all(m["base_model"] == "minilm" for m in models["lasf_models"])
    r = client.post(
        "/api/analyses",
        json={
            "model": "lasf-minilm-paper",
            "text": TEXT,
            "analyses": ["lasf"],
            "options": {"n_iter": 100, "early_exaggeration_iter": 50},
        },
    )
    assert r.status_code == 202, r.text
    body = wait_done(client, f"/api/analyses/{r.json()['id']}", timeout_s=240)
    assert body["status"] == "finished", body.get("error")
    sec, res = body["result"]["lasf"], body["result"]
    assert (
        res["model"] == "lasf-minilm-paper"
        and sec["mode"] == "paper"
        and sec["kernel"] == "identity"
    )
    assert sec["checkpoint_metrics"]["lasf"]["r2"] >= 0.45  # what it ships for
    weights = np.asarray(sec["weights"])  # paper mode: the weights are Psi, distances
    assert (
        weights.shape[0] == 12
        and np.allclose(weights, weights.transpose(0, 2, 1))
        and (weights >= 0).all()
    )
