"""Checkpoint uploads and PE analyses through ``headscope serve`` (real HTTP, Redis, workers).

Needs the PE core (``workers.models.checkpoints``, ``workers.analyses.positional.encodings``); skipped
without it.
"""

from __future__ import annotations

import io
import os
import pickle

import numpy as np
import pytest
from service_helpers import wait_done

pytest.importorskip("workers.models.checkpoints")
pytest.importorskip("workers.analyses.positional.encodings")

pytestmark = pytest.mark.slow

GRID = [4, 4]


def safetensors_bytes(tensors: dict[str, np.ndarray]) -> bytes:
    from safetensors.numpy import save

    return save(tensors)


@pytest.fixture(scope="module")
def client(service):
    with service.client() as c:
        yield c


@pytest.fixture(scope="module")
def uploaded(client) -> dict:
    rng = np.random.default_rng(0)
    pe = rng.normal(size=(16, 8)).astype(np.float32)  # [position, dim]
    data = safetensors_bytes(
        {
            "encoder.pos_embed": pe,
            "encoder.bias": np.zeros(8, np.float32),
            "steps": np.arange(3, dtype=np.int64),
        }
    )
    resp = client.post(
        "/api/checkpoints", files={"file": ("run 1.safetensors", data, "application/octet-stream")}
    )
    assert resp.status_code == 201, resp.text
    return {**resp.json(), "pe": pe, "data": data}


def test_upload_lists_candidates_and_is_content_addressed(client, uploaded):
    assert uploaded["id"].startswith("ck-") and uploaded["filename"] == "run 1.safetensors"
    assert uploaded["default"] == "encoder.pos_embed"
    assert [(c["name"], c["shape"]) for c in uploaded["candidates"]] == [
        ("encoder.pos_embed", [16, 8])
    ]
    again = client.post(
        "/api/checkpoints", files={"file": ("copy.safetensors", uploaded["data"], "x/y")}
    ).json()
    assert again["id"] == uploaded["id"]
    assert (
        client.get(f"/api/checkpoints/{uploaded['id']}").json()["candidates"]
        == uploaded["candidates"]
    )
    listed = client.get("/api/checkpoints").json()
    assert uploaded["id"] in [c["id"] for c in listed["checkpoints"]] and isinstance(
        listed["demos"], list
    )


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


@pytest.mark.parametrize(
    "name, data, words",
    [
        (
            "broken.safetensors",
            b"\x08\x00\x00\x00\x00\x00\x00\x00{not json",
            ["broken.safetensors"],
        ),
        ("evil.pt", pickle.dumps(_RunsCode()), ["evil.pt", "pickle"]),
        ("scalar.npy", None, ["scalar.npy", "2-D"]),
    ],
)
def test_bad_checkpoints_get_a_reason_and_leave_nothing_behind(client, service, name, data, words):
    if data is None:
        buf = io.BytesIO()
        np.save(buf, np.arange(5.0))
        data = buf.getvalue()
    before = service.leftovers()
    resp = client.post("/api/checkpoints", files={"file": (name, data, "application/octet-stream")})
    assert resp.status_code == 422, resp.text  # the file is at fault: 422 naming the problem
    for w in words:
        assert w in resp.json()["detail"]
    assert service.leftovers() == before


def test_pe_analysis_modularity_matches_networkx_and_shares(client, uploaded):
    nx = pytest.importorskip("networkx")
    body = {
        "checkpoints": [{"id": uploaded["id"], "tensor": "encoder.pos_embed"}],
        "reference": {"kind": "2d-fixed", "grid": GRID},
        "partition": {"kind": "rows", "grid": GRID},
    }
    resp = client.post("/api/pe-analyses", json=body)
    assert resp.status_code == 202, resp.text
    done = wait_done(client, f"/api/pe-analyses/{resp.json()['id']}")
    assert done["status"] == "finished", done["error"]
    (report,) = done["result"]["checkpoints"]
    assert report["name"] == "run 1.safetensors" and report["shape"] == [16, 8]
    assert report["procrustes_distance"] > 0
    D = np.asarray(report["distance_matrix"])  # [position, position]
    np.testing.assert_allclose(D, D.T)
    W = 1.0 - D / D.max()
    np.fill_diagonal(W, 0.0)
    rows = [set(range(r * 4, r * 4 + 4)) for r in range(4)]
    G = nx.from_numpy_array(W)
    assert report["modularity"] == pytest.approx(
        nx.community.modularity(G, rows, weight="weight"), abs=1e-5
    )

    share = client.post(
        "/api/shares", json={"pe_analysis_id": done["id"], "view": {"page": "pe"}}
    ).json()
    assert share["url"] == f"/pe?share={share['id']}"
    opened = client.get(f"/api/shares/{share['id']}").json()
    assert opened["kind"] == "pe" and opened["result"] == done["result"]
    wrong = client.post("/api/shares", json={"analysis_id": done["id"], "view": {}})
    assert wrong.status_code == 404  # a PE id is not a text analysis


def test_pe_requests_naming_missing_things_get_a_reason(client, uploaded):
    missing = client.post("/api/pe-analyses", json={"checkpoints": [{"id": "ck-" + "0" * 32}]})
    assert missing.status_code == 404 and "ck-" + "0" * 32 in missing.json()["detail"]
    bad_tensor = client.post(
        "/api/pe-analyses", json={"checkpoints": [{"id": uploaded["id"], "tensor": "wte"}]}
    )
    assert bad_tensor.status_code == 422 and "encoder.pos_embed" in bad_tensor.json()["detail"]
    traversal = client.post("/api/pe-analyses", json={"checkpoints": [{"id": "../../etc/passwd"}]})
    assert traversal.status_code == 422
    no_grid = client.post(
        "/api/pe-analyses",
        json={"checkpoints": [{"id": uploaded["id"]}], "partition": {"kind": "rows"}},
    )
    assert no_grid.status_code == 422 and "grid" in no_grid.json()["detail"]
    bad_csv = client.post(
        "/api/pe-analyses",
        json={
            "checkpoints": [{"id": uploaded["id"]}],
            "partition": {"kind": "csv", "csv": "pos,lab\n0,a"},
        },
    )
    assert bad_csv.status_code == 202
    failed = wait_done(client, f"/api/pe-analyses/{bad_csv.json()['id']}")
    assert failed["status"] == "failed" and "position,label" in failed["error"]
