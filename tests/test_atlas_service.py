"""The atlas through the service (docs/atlas.md): refused with a reason before queueing, run by a
worker, stored once per (model, settings) like any result. Real serve: uvicorn, Redis, a worker."""

from __future__ import annotations

import pytest

from workers.analyses.atlas.spec import ATLAS, ATLAS_TEXT


@pytest.mark.slow
def test_the_service_refuses_bad_settings_and_stores_one_atlas(tmp_path, tiny_model_dirs):
    from service_helpers import ServeProcess, wait_done

    serve = ServeProcess.for_tests(tmp_path, tiny_model_dirs, workers=1)
    serve.start()
    try:
        with serve.client() as client:
            body = {"model": "tiny-gpt2", "text": ATLAS_TEXT, "analyses": [ATLAS]}
            small = {"random_seqs": 3, "random_len": 8, "max_texts": 6, "resamples": 20}
            for options, field, problem in [
                ({"random_len": 1}, "options.random_len", "must be at least 2"),
                ({"random_seqs": 0}, "options.random_seqs", "must be at least 1"),
                ({"thresholds": {"copying": 0.5}}, "options.thresholds.copying", None),
            ]:
                bad = client.post("/api/analyses", json={**body, "options": options})
                assert bad.status_code == 422, bad.text
                errors = bad.json()["errors"]
                assert errors[0]["field"].startswith(field), errors
                assert problem is None or errors[0]["problem"] == problem
            for model, options, words in [
                (
                    "tiny-bert",
                    {**small, "loss": True},
                    "needs a decoder with a language-model head",
                ),
                ("tiny-gpt2", {"random_len": 40}, "too long for tiny-gpt2"),
            ]:
                bad = client.post(
                    "/api/analyses", json={**body, "model": model, "options": options}
                )
                assert bad.status_code == 422 and words in bad.json()["detail"], bad.text
            ok = client.post("/api/analyses", json={**body, "options": small})
            assert ok.status_code == 202, ok.text
            done = wait_done(client, f"/api/analyses/{ok.json()['id']}")
            assert done["status"] == "finished", done["error"]
            section = done["result"][ATLAS]
            assert len(section["heads"]) == 8 and section["probe"]["random_len"] == 8
            assert section["evidence"]["sequences"] == 3 and section["loss_repeated"] is not None
            again = client.post("/api/analyses", json={**body, "options": small})
            assert again.json()["id"] == ok.json()["id"]  # one stored atlas per model and settings

            # an uploaded corpus as the corpus probe: read from the store by the job's runner
            texts = [f"Mary gave book {i} to John, and John thanked Mary." for i in range(5)]
            up = client.post("/api/corpora", data={"text": "\n".join(texts)})
            assert up.status_code == 201, up.text
            corpus_id = up.json()["id"]
            unknown = client.post(
                "/api/analyses",
                json={**body, "options": {**small, "corpus": "cp-" + "0" * 32}},
            )
            assert unknown.status_code == 404 and "upload it first" in unknown.text, unknown.text
            mine = client.post(
                "/api/analyses", json={**body, "options": {**small, "corpus": corpus_id}}
            )
            assert mine.status_code == 202 and mine.json()["id"] != ok.json()["id"], mine.text
            done = wait_done(client, f"/api/analyses/{mine.json()['id']}")
            assert done["status"] == "finished", done["error"]
            probe = done["result"][ATLAS]["probe"]
            assert probe["corpus"] == corpus_id and probe["corpus_texts"] == 5, probe
    finally:
        serve.stop()
