"""The README's "Limits" table is a promise: each row's limit tried at the limit and one past it.

Through the API (the real app in-process on a real Redis, as tests/test_service_fair.py) or the CLI
(``backend.cli.main``, as tests/test_cli_messages.py), expecting the documented answer: 202 (201 for
an upload) at the limit, and past it a 422 (413 for bytes, 429 for the rate) whose sentence names the
limit; exit status 0 at the limit, 2 with one line past it. A limit that is a setting is made small
through its environment variable. ``ROWS`` maps each row of the table to its tests, here or elsewhere
in tests/ (``tests/file.py::test``); ``test_every_readme_row_has_a_test`` fails when a row has none.
"""

from __future__ import annotations

import ast
import gc
import json
import pickle
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from fuzz_corpus import GOOD_NPY, PE, npy
from redis import Redis
from rq import SimpleWorker
from safetensors.numpy import save as save_safetensors
from service_helpers import short_text

from backend.app import create_app
from backend.cli import main
from workers.core.errors import HeadscopeError
from workers.queue import keys as protocol
from workers.queue import parts

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30
FAST = {"n_iter": 50, "early_exaggeration_iter": 50}
CLI_FAST = ["--n-iter", "50", "--early-exaggeration-iter", "50"]

DEFAULTS = "test_readme_setting_defaults_are_the_code_defaults"
# README "## Limits": row title (its first cell) -> the tests that try it. A name alone is a test of
# this module; ``tests/file.py::name`` one elsewhere in the suite.
ROWS: dict[str, list[str]] = {
    "text length": ["test_text_length_is_the_models_own_limit_unless_truncated"],
    "text size before tokenisation (API)": ["test_text_size_before_tokenisation"],
    "word lists": ["test_word_lists_through_the_api", "test_word_lists_through_the_cli"],
    "t-SNE restarts": ["test_tsne_restarts_one_limit_for_the_api_and_the_cli"],
    "checkpoint uploads": [
        "test_checkpoint_upload_bytes_tensors_and_shapes",
        "tests/test_checkpoints.py::test_pickle_that_would_run_code_is_refused_and_never_runs",
        "tests/test_service_pe.py::test_bad_checkpoints_get_a_reason_and_leave_nothing_behind",
        DEFAULTS,
    ],
    "LasF checkpoints": ["test_lasf_checkpoint_format_base_and_sizes"],
    "models": [
        "test_models_are_catalogue_names_and_hub_names_need_the_switch",
        "test_readme_families_are_the_supported_ones",
        "tests/test_llm_families.py::test_maps_per_query_head_equal_the_eager_weights",
        "tests/test_text_parts.py::test_multimodal_text_part_is_the_multimodal_models_language_model",
    ],
    "memory": ["test_memory_budget_refuses_before_any_work", DEFAULTS],
    "jobs": [
        "test_job_timeout_and_one_retry_come_from_the_settings",
        "tests/test_service_kill.py::test_job_over_its_timeout_fails_with_a_reason_after_one_retry",
        "tests/test_service_kill.py::test_killed_worker_job_is_retried_and_finished_while_another_worker_serves",
        "tests/test_service_kill.py::test_job_whose_workers_die_twice_fails_with_a_reason",
        DEFAULTS,
    ],
    "jobs in parts (docs/scaling.md)": [
        "test_corpus_splits_at_its_setting",
        "test_comparison_splits_at_its_setting",
        "test_ablation_splits_at_its_run_tokens",
        "tests/test_parts.py::test_part_failing_twice_fails_the_job_with_its_reason",
        DEFAULTS,
    ],
    "gallery": [
        "test_gallery_pages_and_the_kept_attention",
        "tests/test_figures_gallery.py::test_gallery_pages_by_whole_layers",
        "tests/test_gallery_layers.py::test_every_layer_is_published_as_it_finishes_and_folds_into_the_section",
    ],
    "writes (POST) per client": ["test_writes_over_the_rate_limit_get_429", DEFAULTS],
    "storage": [
        "test_upload_quota_per_client",
        "test_storage_quota_deletes_the_least_recently_used_unshared_first",
        "test_results_expire_after_7_days_and_unused_uploads_after_30",
        DEFAULTS,
    ],
    "workers": [
        "test_worker_memory_bound",
        "test_short_workers_setting",
        "tests/test_service_queues.py::test_a_worker_stops_after_its_job_bound_and_leaves_the_rest_queued",
        "tests/test_causal.py::test_keep_freed_memory_is_glibc_mallopt_once",
        DEFAULTS,
    ],
    "Gemma": [  # behaviour, not a number to try; the memory and cost figures: tests/bench/bench_gemma3.py
        "tests/test_llm_families.py::test_sliding_window_layers_see_only_their_window",
        "tests/test_gemma3.py::test_sliding_window_layers_are_zero_beyond_512_keys",
        "tests/test_causal.py::test_logit_attribution_is_exact",
        "tests/test_gemma3.py::test_logit_lens_reads_the_whole_vocabulary",
    ],
    "information flow": [
        "test_information_flow_threshold_and_position",
        "tests/test_information_flow.py::test_top_down_graph_equals_every_query_computed",
    ],
    "causal views": ["test_causal_views_limits"],
    "comparisons (`/compare`, docs/compare.md)": [
        "test_comparison_max_tokens_memory_plan_and_picker",
        "tests/test_compare_service.py::test_two_models_that_do_not_fit_together_run_one_after_the_other",
        "tests/test_compare_service.py::test_a_corpus_whose_maps_fit_only_a_part_at_a_time_is_accepted_split",
    ],
    "corpora (docs/corpus.md)": [
        "test_corpus_texts_characters_and_bytes",
        "tests/test_corpus_formats.py::test_jsonl_and_datasets_directories_with_a_field_and_a_job_over_one",
        "tests/test_corpus_formats.py::test_a_100k_text_parquet_corpus_is_accepted_and_read_back_by_range",
        "tests/test_corpus_formats.py::test_archives_are_unpacked_safely",
        DEFAULTS,
    ],
    "head atlas (docs/atlas.md)": [
        "test_atlas_probe_and_resamples",
        "tests/test_atlas_service.py::test_the_service_refuses_bad_settings_and_stores_one_atlas",
    ],
    "circuits on a task set (docs/circuits.md)": [
        "test_circuits_on_a_set_examples_resamples_and_random_circuits",
        "tests/test_circuit_sets_service.py::test_bad_set_requests_get_422_before_queueing",
        "tests/test_circuit_tasks.py::test_jsonl_uploads",
        "tests/test_task_sets_service.py::test_a_too_big_file_and_a_full_quota_are_refused",
        "tests/test_task_sets_service.py::test_a_set_holds_2_to_2000_examples",
    ],
    "circuits": [
        "test_circuits_edges_steps_and_curve",
        "tests/test_circuits_service.py::test_edge_attribution_job_can_be_cancelled_while_running",
    ],
}


def readme_rows() -> dict[str, str]:
    """The README's limits table: row title -> its limit cell."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Limits\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 2 and cells[0] not in ("what", "---"):
            rows[cells[0]] = "|".join(cells[1:])
    return rows


def test_every_readme_row_has_a_test():
    rows = readme_rows()
    assert len(rows) >= 20, rows  # the parse found the table
    assert sorted(set(rows) - set(ROWS)) == [], "README limits rows without a test in ROWS"
    assert sorted(set(ROWS) - set(rows)) == [], "ROWS names rows the README no longer has"
    here = {n.name for n in ast.parse(Path(__file__).read_text()).body if hasattr(n, "name")}
    for title, tests in ROWS.items():
        assert tests, title
        for ref in tests:
            path, _, name = ref.rpartition("::")
            defined = (
                here
                if not path
                else {
                    n.name for n in ast.parse((ROOT / path).read_text()).body if hasattr(n, "name")
                }
            )
            assert name in defined and name.startswith("test_"), (title, ref)


UNITS = {"GiB": 2**30, "MiB": 2**20, "s": 1, "": 1}


def test_readme_setting_defaults_are_the_code_defaults(monkeypatch):
    """Every ``HEADSCOPE_X`` (default) the table states is the settings' own default."""
    import os

    from workers.core.settings import Settings

    for name in [n for n in os.environ if n.startswith("HEADSCOPE_")]:
        monkeypatch.delenv(name)
    defaults = Settings()
    stated = re.findall(
        r"`HEADSCOPE_([A-Z_]+)` \(([\d,.]+)(?: (GiB|MiB|s))?[,)]", "\n".join(readme_rows().values())
    )
    assert len(stated) >= 17, stated
    for name, number, unit in stated:
        assert getattr(defaults, name.lower()) == float(number.replace(",", "")) * UNITS[unit], name
    assert defaults.memory_budget_gb is None  # "default: the machine's memory"


# ---------------------------------------------------------------------------------------- helpers


@pytest.fixture
def api(redis_server, tmp_path, catalogue, setting):
    """``api(HEADSCOPE_X="1", ...)``: a TestClient on the real app and Redis, built after the
    variables are set (its settings read them); each call a fresh data directory."""
    from backend.config import Settings

    conn = Redis.from_url(redis_server)
    conn.flushdb()
    made: list[TestClient] = []

    def make(**env: str) -> TestClient:
        for name, value in env.items():
            setting(name, value)
        settings = Settings(data_dir=tmp_path / f"data{len(made)}", redis_url=redis_server)
        client = TestClient(create_app(settings, redis=conn, background=False, frontend=False))
        made.append(client)
        return client

    yield make
    conn.flushdb()


def ok(resp, status: int = 202) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    return resp.json()


def refused(resp, *words: str, status: int = 422) -> str:
    """The response is ``status`` with a one-sentence detail holding every one of ``words``."""
    assert resp.status_code == status, resp.text
    detail = resp.json()["detail"]
    assert isinstance(detail, str) and all(w in detail for w in words), detail
    return detail


def analyses(client: TestClient, text: str, kinds: list[str], model: str = "tiny-bert", **opts):
    return client.post(
        "/api/analyses", json={"model": model, "text": text, "analyses": kinds, "options": opts}
    )


def cli(capsys, tmp_path: Path, *argv: str) -> tuple[int, str, dict | None]:
    """``headscope analyze ARGV``: exit status, stderr (one line expected on errors), the JSON."""
    out = tmp_path / "out.json"
    out.unlink(missing_ok=True)
    code = main(["analyze", *argv, "-q", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    if code != 0:
        assert "\n" not in err and err.startswith("headscope: error: "), err
        assert not out.exists()
    return code, err, json.loads(out.read_text()) if out.exists() else None


def lines(n: int) -> str:
    return "\n".join(f"w{i}" for i in range(n))


def _reached(*args: Any, **kwargs: Any) -> None:
    """``load_model`` for a CLI run that may not reach the model: an exit with another message
    proves the refusal came before any model work."""
    raise HeadscopeError("reached the model")


# -------------------------------------------------------------------------------- text and words


def test_text_length_is_the_models_own_limit_unless_truncated(api, minilm, tmp_path, capsys):
    client = api()
    at, past = "word " * 510, "word " * 511  # + [CLS] and [SEP]: 512 and 513 tokens
    ok(analyses(client, at, ["max-attention"], model="minilm"))
    refused(analyses(client, past, ["max-attention"], model="minilm"), "513 tokens", "at most 512")
    ok(analyses(client, past, ["max-attention"], model="minilm", truncate=True))

    code, _, r = cli(capsys, tmp_path, "--text", at, "--analysis", "max-attention")
    assert code == 0 and r["n_tokens"] == 512
    code, err, _ = cli(capsys, tmp_path, "--text", past, "--analysis", "max-attention")
    assert code == 2 and "the text has 513 tokens but model 'minilm' takes at most 512" in err
    code, _, r = cli(capsys, tmp_path, "--text", past, "--analysis", "max-attention", "--truncate")
    assert code == 0 and r["n_tokens"] == 512 and r["truncated_from"] == 513


def test_text_size_before_tokenisation(api):
    client = api()
    ok(analyses(client, "w" * 20_000, ["max-attention"], truncate=True))
    refused(
        analyses(client, "w" * 20_001, ["max-attention"], truncate=True),
        "20,001 characters",
        "20,000",
    )


def test_word_lists_through_the_api(api):
    client = api()
    ok(analyses(client, lines(2_000), ["word-tsne"]))
    refused(analyses(client, lines(2_001), ["word-tsne"]), "2,001 items", "2,000")
    ok(analyses(client, "cat, dog, horse, car", ["word-tsne"]))  # one line: commas split it
    refused(analyses(client, "cat\ndog\nhorse", ["word-tsne"]), "at least 4 items", "got 3")


def test_word_lists_through_the_cli(tmp_path, capsys, catalogue, monkeypatch):
    words = tmp_path / "words.txt"
    run = ["--analysis", "word-tsne", "--text-file", str(words)]
    with monkeypatch.context() as mp:
        import workers.models

        mp.setattr(workers.models, "load_model", _reached)
        # 2,000 is accepted: on to the model (not run here: the t-SNE of 2,000 words is slow)
        for n, says in (
            (2_001, ("the word list has 2,001 items", "2,000")),
            (3, ("at least 4 items", "got 3")),
            (2_000, ("reached the model",)),
        ):
            words.write_text(lines(n) + "\n")
            code, err, _ = cli(capsys, tmp_path, *run)
            assert code == 2 and all(w in err for w in says), err
    words.write_text("cat\ndog\n\nhorse\ncar\n")  # the smallest list, run end to end
    code, _, r = cli(capsys, tmp_path, *run, "--model", "tiny-bert", "--layer", "1", *CLI_FAST)
    assert code == 0 and r["words"] == ["cat", "dog", "horse", "car"]
    assert np.asarray(r["embedding"]).shape == (4, 2)


def test_tsne_restarts_one_limit_for_the_api_and_the_cli(api, tmp_path, capsys, catalogue):
    client = api()
    text = short_text(10)
    ok(analyses(client, text, ["head-tsne"], layer=0, head=0, restarts=20))
    refused(analyses(client, text, ["head-tsne"], restarts=21), "restarts", "at most 20")
    refused(analyses(client, text, ["head-tsne"], restarts=0), "restarts", "at least 1")

    run = ["--model", "tiny-bert", "--text", text, "--analysis", "hidden-tsne", "--layer", "0"]
    for bad, says in (("21", "at most 20"), ("0", "at least 1")):
        code, err, _ = cli(capsys, tmp_path, *run, "--restarts", bad)
        assert code == 2 and "restarts" in err and says in err, err
    code, _, r = cli(capsys, tmp_path, *run, "--restarts", "20", *CLI_FAST)
    assert code == 0 and len(np.ravel(r["kl_restarts"])) == 20  # every restart ran


# ------------------------------------------------------------------------------------ checkpoints


def upload(client: TestClient, name: str, data: bytes, kind: str = "any"):
    return client.post(f"/api/checkpoints?kind={kind}", files={"file": (name, data, "x/y")})


def test_checkpoint_upload_bytes_tensors_and_shapes(api):
    ok(upload(api(HEADSCOPE_MAX_UPLOAD_BYTES=str(len(GOOD_NPY))), "pe.npy", GOOD_NPY), 201)
    small = api(HEADSCOPE_MAX_UPLOAD_BYTES=str(len(GOOD_NPY) - 1))
    refused(upload(small, "pe.npy", GOOD_NPY), f"{len(GOOD_NPY) - 1:,}-byte limit", status=413)

    client = api(HEADSCOPE_MAX_UPLOAD_BYTES=str(256 * 2**20))  # the default, 256 MiB
    ones = {f"extra.{i}": np.ones(1, np.float32) for i in range(4_094)}
    ok(upload(client, "a.safetensors", save_safetensors({"pe": PE, **ones, "x": PE[0]})), 201)
    refused(
        upload(
            client, "b.safetensors", save_safetensors({"pe": PE, **ones, "x": PE[0], "y": PE[1]})
        ),
        "holds 4097 tensors; the limit is 4096",
    )
    rng = np.random.default_rng(1)
    for rows, cols in ((2, 8), (1_024, 8), (16, 4_096)):
        got = ok(upload(client, "pe.npy", npy(rng.normal(size=(rows, cols)).astype("f4"))), 201)
        assert [c["shape"] for c in got["candidates"]] == [[rows, cols]]
    for rows, cols in ((1, 8), (1_025, 8), (16, 4_097)):
        refused(
            upload(client, "pe.npy", npy(rng.normal(size=(rows, cols)).astype("f4"))),
            "2..1024 positions x at most 4096 dims",
        )

    class RunsCode:
        def __reduce__(self):
            return (print, ("pwned",))

    refused(upload(client, "evil.pt", pickle.dumps(RunsCode())), "evil.pt", "pickle")


def lasf_file(**over: Any) -> bytes:
    """A LasF checkpoint (format, base model, sizes, tensors of the config's shapes)."""
    from workers.analyses.lasf.checkpoint import FORMAT, META_KEY, expected_shapes

    sizes = {"n_fields": 1, "d_in": 384, "d_q": 1, "d_s": 1, "d_out": 384}
    sizes.update(over.pop("sizes", {}))
    cfg = {
        "format": FORMAT, "base_model": "minilm", "replaced_layer": 5, "mode": "stable",
        "kernel": "identity", "residual": "identity", "seed": 0, "sizes": sizes, **over,
    }  # fmt: skip
    rng = np.random.default_rng(0)
    tensors = {
        k: (0.01 * rng.normal(size=shape)).astype(np.float32)
        for k, shape in expected_shapes(cfg).items()
    }
    return save_safetensors(tensors, metadata={META_KEY: json.dumps(cfg)})


def test_lasf_checkpoint_format_base_and_sizes(api):
    client = api()
    for size, limit in (("n_fields", 64), ("d_q", 256), ("d_s", 1_024)):
        got = ok(upload(client, f"{size}.safetensors", lasf_file(sizes={size: limit}), "lasf"), 201)
        assert got["lasf"]["sizes"][size] == limit
        refused(
            upload(client, f"{size}.safetensors", lasf_file(sizes={size: limit + 1}), "lasf"),
            f"size {size}={limit + 1} is not an integer in 1..{limit}",
        )
    for over, says in (
        ({"base_model": "gpt2"}, "base model 'gpt2'"),
        ({"replaced_layer": 4}, "LasF replaces minilm's last layer (5)"),
        ({"sizes": {"d_in": 383, "d_out": 383}}, "hidden size 384"),
        ({"format": "lasf-ckpt-v0"}, 'lacks format "lasf-ckpt-v1"'),
    ):
        refused(upload(client, "bad.safetensors", lasf_file(**over), "lasf"), says)
    refused(
        upload(client, "pe.safetensors", save_safetensors({"pe": PE}), "lasf"),
        "not a LasF checkpoint",
    )


# --------------------------------------------------------------------------------------- models


def test_models_are_catalogue_names_and_hub_names_need_the_switch(
    api, catalogue, tiny_model_dirs, tmp_path, setting
):
    from workers.models.catalogue import Catalogue, set_catalogue

    client = api()
    path = str(tiny_model_dirs["tiny-bert"])  # a real model directory, named by path
    refused(analyses(client, short_text(5), ["max-attention"], model=path), "unknown model", path)
    spec = tmp_path / "models.json"
    spec.write_text(json.dumps({"models": {"hub-model": {"hub": "org/some-model"}}}))
    setting("HEADSCOPE_MODELS", str(spec))
    try:
        for allow, listed in (("0", False), ("1", True)):
            setting("HEADSCOPE_ALLOW_HUB", allow)
            set_catalogue(Catalogue.from_env())
            names = [m["name"] for m in ok(client.get("/api/models"), 200)["models"]]
            assert ("hub-model" in names) is listed and "minilm" in names
            if not listed:
                refused(
                    analyses(client, "hi", ["max-attention"], model="hub-model"), "unknown model"
                )
    finally:
        set_catalogue(catalogue)


def test_readme_families_are_the_supported_ones():
    from workers.models.families import TEXT_PARTS, family_of

    cell = readme_rows()["models"]
    listed = re.search(r"families: (.*?), and a multimodal `(\w+)`", cell)
    assert listed, cell
    names = [n.strip() for n in listed.group(1).split(",")]
    assert len(names) == 12 and listed.group(2) in TEXT_PARTS
    for name in [*names, listed.group(2)]:
        family_of(name)  # raises for an unsupported model type
    with pytest.raises(HeadscopeError, match="not supported"):
        family_of("t5")


def test_memory_budget_refuses_before_any_work(tmp_path, capsys, catalogue, setting):
    from workers.engine.memory import ModelFacts, estimate_text_request
    from workers.engine.pipeline import resolve_options
    from workers.models import encode, load_model

    text = short_text(20)
    loaded = load_model("tiny-bert", device="cpu")
    n = encode(loaded, text).n
    total = estimate_text_request(
        ModelFacts.of(loaded), n, ["max-attention"], resolve_options({})
    ).total
    run = ["--model", "tiny-bert", "--text", text, "--analysis", "max-attention"]
    setting("HEADSCOPE_MEMORY_BUDGET_GB", repr(total / GIB))  # exactly the estimate, in bytes
    code, _, r = cli(capsys, tmp_path, *run)
    assert code == 0 and r["timings"]["memory_estimate_gib"] == round(total / GIB, 3)
    setting("HEADSCOPE_MEMORY_BUDGET_GB", repr((total - 1) / GIB))  # one byte less
    code, err, _ = cli(capsys, tmp_path, *run)
    assert code == 2 and f"needs about {total / GIB:.1f} GiB" in err
    assert "the memory budget is" in err and "(HEADSCOPE_MEMORY_BUDGET_GB)" in err


# ----------------------------------------------------------------------------------------- jobs


def test_job_timeout_and_one_retry_come_from_the_settings(api, redis_server):
    conn = Redis.from_url(redis_server)
    for env, timeout in (({}, 1_800), ({"HEADSCOPE_JOB_TIMEOUT_S": "7"}, 7)):
        client = api(**env)
        job_id = ok(analyses(client, short_text(5 + timeout % 3), ["max-attention"]))["id"]
        job = protocol.fetch_job(conn, job_id)
        assert job.timeout == timeout and job.retries_left == 1  # tried, then retried once


@pytest.fixture
def run_first_job(redis_server, monkeypatch):
    """Run the first queued job (a coordinator splits there) in this process, writing to ``store``."""
    import workers.queue.reporter

    conn = Redis.from_url(redis_server)

    def run(client: TestClient) -> None:
        store = client.app.state.store
        monkeypatch.setattr(workers.queue.reporter, "store", lambda: store)
        worker = SimpleWorker(
            [protocol.queue(conn, q) for q in protocol.QUEUES],
            connection=conn,
            serializer=protocol.SERIALIZER,
        )
        worker.work(burst=True, max_jobs=1)

    return run


def corpus_of(client: TestClient, n: int) -> str:
    texts = [f"{short_text(6)} number {i}." for i in range(n)]
    return ok(client.post("/api/corpora", data={"text": "\n".join(texts)}), 201)["id"]


def split_parts(client: TestClient, path: str, body: dict, run_first_job) -> int:
    """Submit, run the job itself; the parts it handed on (0: it ran in one piece)."""
    job_id = ok(client.post(path, json=body))["id"]
    run_first_job(client)
    plan = parts.plan(Redis.from_url(client.app.state.settings.redis_url), job_id)
    if plan is None:
        status = client.get(f"{path}/{job_id}?result=none").json()
        assert status["status"] == "finished", status
        return 0
    return int(plan["n_parts"])


def test_corpus_splits_at_its_setting(api, run_first_job):
    client = api(HEADSCOPE_SPLIT_MIN_ITEMS="4", HEADSCOPE_SPLIT_PART_ITEMS="2")
    for n, n_parts in ((3, 0), (4, 2)):
        body = {"model": "tiny-bert", "corpus": corpus_of(client, n), "options": {"max_tokens": 16}}
        assert split_parts(client, "/api/corpus-analyses", body, run_first_job) == n_parts, n


def test_comparison_splits_at_its_setting(api, run_first_job):
    client = api(HEADSCOPE_SPLIT_COMPARE_MIN_TEXTS="4", HEADSCOPE_SPLIT_COMPARE_PART_TEXTS="2")
    for n, n_parts in ((3, 0), (4, 2)):
        body = {"model_a": "tiny-bert", "model_b": "tiny-gpt2", "corpus": corpus_of(client, n)}
        assert split_parts(client, "/api/compare", body, run_first_job) == n_parts, n


def test_ablation_splits_at_its_run_tokens(api, run_first_job, catalogue, monkeypatch):
    """Every head's ablation of ``HEADSCOPE_SPLIT_MIN_RUN_TOKENS`` run tokens or more goes to parts
    (the tiny GPT-2's 9 runs fit one forward call unless calls hold fewer rows, as in
    tests/test_causal_parts.py)."""
    from backend.tokens import count_tokens
    from workers.analyses.causal import interventions
    from workers.analyses.causal import parts as cp

    monkeypatch.setattr(interventions, "ROW_TOKENS", 64)
    text = short_text(12)
    n = count_tokens(catalogue.get("tiny-gpt2"), text)[0]
    runs = sum(t for _, t in cp.ablation_plan(n_layers=2, n_heads=4, position=n - 1))
    assert runs == 9 * n  # the base run and each of the 8 heads', n tokens each
    for min_tokens, split in ((runs + 1, False), (runs, True)):
        client = api(
            HEADSCOPE_SPLIT_MIN_RUN_TOKENS=str(min_tokens),
            HEADSCOPE_SPLIT_PART_RUN_TOKENS=str(n),
        )
        body = {"model": "tiny-gpt2", "text": text, "analyses": ["ablation"]}
        got = split_parts(client, "/api/analyses", body, run_first_job)
        assert (got > 1) is split and (got == 0) is not split, (min_tokens, got)
        Redis.from_url(client.app.state.settings.redis_url).flushdb()


# -------------------------------------------------------------------------------------- gallery


def test_gallery_pages_and_the_kept_attention():
    from frontend.figures.gallery import MAX_PANELS, gallery_pages
    from workers.core.packing import packed_shape

    assert MAX_PANELS == 96
    assert gallery_pages(list(range(8)), 12) == [list(range(8))]  # 96 panels: one page
    assert gallery_pages(list(range(9)), 12) == [list(range(8)), [8]]  # 108: a second page
    assert gallery_pages(list(range(4)), 32) == [[0, 1, 2], [3]]  # whole layers only
    assert packed_shape([0], list(range(128)), np.arange(512))[1] is None  # 32 MiB exactly: kept
    too_large = packed_shape([0], list(range(128)), np.arange(513))[1]
    assert too_large and "exceed the 32 MiB kept for the head view" in too_large
    assert packed_shape(list(range(6)), list(range(12)), np.arange(512))[1] is None  # MiniLM
    assert packed_shape(list(range(16)), list(range(32)), np.arange(512))[1]  # 16 x 32 does not


# ------------------------------------------------------------------------------- writes, storage


def test_writes_over_the_rate_limit_get_429(api):
    client = api(HEADSCOPE_RATE_LIMIT_WRITES="3", HEADSCOPE_RATE_LIMIT_WINDOW_S="60")
    for i in range(3):
        ok(analyses(client, f"write number {i}", ["max-attention"]))
    over = analyses(client, "one too many", ["max-attention"])
    refused(over, "3 per 60 s", status=429)
    assert 1 <= int(over.headers["retry-after"]) <= 61


def test_upload_quota_per_client(api):
    alice, bob = {"X-Headscope-Client": "alice-0123456789abcdef"}, {"X-Headscope-Client": "bob-0123456789abcdefgh"}  # fmt: skip
    client = api(HEADSCOPE_UPLOAD_QUOTA_BYTES=str(len(GOOD_NPY)))
    files = {"file": ("pe.npy", GOOD_NPY)}
    ok(client.post("/api/checkpoints", files=files, headers=alice), 201)  # exactly the quota
    other = {"file": ("pe2.npy", npy(PE[:2]))}
    refused(client.post("/api/checkpoints", files=other, headers=alice), "upload quota", status=413)
    ok(client.post("/api/checkpoints", files=other, headers=bob), 201)  # a quota per client
    client = api(HEADSCOPE_UPLOAD_QUOTA_BYTES=str(len(GOOD_NPY) - 1))
    refused(client.post("/api/checkpoints", files=files, headers=alice), "upload quota", status=413)


def test_storage_quota_deletes_the_least_recently_used_unshared_first(api):
    def stored(client: TestClient) -> tuple[Any, int]:
        """Three results, least recently used first; the oldest is shared."""
        store = client.app.state.store
        for job_id, when in (("a" * 32, 1), ("b" * 32, 2), ("c" * 32, 3)):
            store.write_result(
                job_id, kind="analysis", request={"text": job_id}, result_raw="1" * 999
            )
            _set_used(store, job_id, when)
        store.create_share(kind="analysis", target="a" * 32, view={})
        return store, sum(i["bytes"] for i in store.stored_items())

    store, total = stored(api())
    upload_bytes = len(GOOD_NPY)
    for quota, gone in ((total + upload_bytes, []), (total + upload_bytes - 1, ["b" * 32])):
        client = api(HEADSCOPE_STORAGE_QUOTA_BYTES=str(quota))
        store, _ = stored(client)
        ok(client.post("/api/checkpoints", files={"file": ("pe.npy", GOOD_NPY)}), 201)
        kept = {i["id"] for i in store.stored_items() if i["kind"] == "result"}
        assert kept == {"a" * 32, "b" * 32, "c" * 32} - set(gone), quota


def _set_used(store: Any, job_id: str, when: float) -> None:
    from sqlalchemy import update

    from workers.store.schema import results

    with store.engine.begin() as conn:
        conn.execute(
            update(results).where(results.c.id == job_id).values(created_at=when, used_at=when)
        )


def test_results_expire_after_7_days_and_unused_uploads_after_30(api, monkeypatch):
    from backend import quota

    for name in ("HEADSCOPE_RESULT_TTL_S", "HEADSCOPE_UPLOAD_TTL_S"):
        monkeypatch.delenv(name, raising=False)
    client = api()
    settings, store = client.app.state.settings, client.app.state.store
    assert (settings.result_ttl_s, settings.upload_ttl_s) == (7 * 86_400, 30 * 86_400)
    before = time.time()
    store.write_result("d" * 32, kind="analysis", request={"text": "x"}, result_raw="{}")
    after = time.time()
    assert store.sweep(now=before + 7 * 86_400) == [] and store.has_result("d" * 32)
    assert store.sweep(now=after + 7 * 86_400 + 1) == ["d" * 32]
    ck = ok(client.post("/api/checkpoints", files={"file": ("pe.npy", GOOD_NPY)}), 201)["id"]
    used = next(i["used_at"] for i in store.stored_items() if i["id"] == ck)
    assert quota.enforce(store, settings, now=used + 30 * 86_400) == []
    assert quota.enforce(store, settings, now=used + 30 * 86_400 + 1) == [ck]


# -------------------------------------------------------------------------------------- workers


def test_worker_memory_bound(redis_server, monkeypatch, setting):
    """A worker stops (to be replaced) after a job that leaves it over HEADSCOPE_WORKER_MAX_RSS_MB
    resident, not at the bound; its resident memory reads 100 MiB here."""
    from backend.config import Settings
    from workers.queue import recycle

    conn = Redis.from_url(redis_server)
    monkeypatch.setattr(recycle, "rss_mb", lambda pid="self": 100.0)
    try:
        for bound, left in (("100", 0), ("99", 1)):
            setting("HEADSCOPE_WORKER_MAX_RSS_MB", bound)
            q = protocol.queue(conn, "hs-test-limits-rss")
            q.empty()
            for _ in range(2):
                q.enqueue_call("held_jobs.noop")
            worker = recycle.RecyclingWorker([q], connection=conn, serializer=protocol.SERIALIZER)
            worker.max_rss_mb = float(Settings().worker_max_rss_mb)  # as workers.queue.worker does
            worker.work(burst=True)
            assert q.count == left, bound
    finally:
        gc.unfreeze()  # the worker froze the heap (recycle.settle): the session collects as usual


def test_short_workers_setting(monkeypatch, tmp_path, setting):
    from backend.config import Settings
    from backend.serve import Supervisor

    setting("HEADSCOPE_DATA_DIR", str(tmp_path))
    for n in (0, 2):
        setting("HEADSCOPE_SHORT_WORKERS", str(n))
        sup = Supervisor(settings=Settings(), redis_url="redis://127.0.0.1:1/0", n_workers=1)
        monkeypatch.setattr(sup, "spawn_worker", lambda short=False: short)  # no process started
        monkeypatch.setattr(sup, "record", lambda: None)
        sup.start_workers()
        assert sup.workers == [False] + [True] * n  # one general worker, n for short jobs


# ------------------------------------------------------------------------ flow, causal, circuits


@pytest.fixture(scope="module")
def wide_gpt2(catalogue, tmp_path_factory):
    """A tiny GPT-2 of 8 layers x 16 heads and 128 positions (23,000 edges): room for the causal
    and circuit limits the 2 x 4 test models cannot reach. Registered while this module runs."""
    from tiny_models import build_tiny_gpt2

    from workers.models import ModelSpec

    path = build_tiny_gpt2(
        tmp_path_factory.mktemp("wide") / "wide-gpt2", layers=8, heads=16, max_positions=128
    )
    catalogue.register(ModelSpec("wide-gpt2", "local", str(path), "wide-gpt2 (random, tests)"))
    yield "wide-gpt2"
    catalogue.specs.pop("wide-gpt2")


def test_information_flow_threshold_and_position(api, catalogue):
    from backend.tokens import count_tokens

    client = api()
    text = short_text(8)
    n = count_tokens(catalogue.get("tiny-bert"), text)[0]
    flow = ["information-flow"]
    for tau in (1e-9, 0.999_999):
        ok(analyses(client, text, flow, threshold=tau))
    for tau, says in ((0.0, "must be more than 0"), (1.0, "must be less than 1")):
        refused(analyses(client, text, flow, threshold=tau), "threshold", says)
    ok(analyses(client, text, flow, position=n - 1))
    refused(
        analyses(client, text, flow, position=n),
        f"position {n} is out of range: the text has positions 0-{n - 1}",
    )


def test_causal_views_limits(api, catalogue, wide_gpt2):
    from backend.tokens import count_tokens

    client = api()
    text = short_text(12)
    refused(analyses(client, text, ["predictions"]), "tiny-bert has no language-model head")
    ok(analyses(client, text, ["predictions"], model=wide_gpt2, k=50))
    refused(analyses(client, text, ["predictions"], model=wide_gpt2, k=51), "k", "at most 50")
    heads = [[layer, head] for layer in range(8) for head in range(16)]
    ok(analyses(client, text, ["ablation"], model=wide_gpt2, ablate=heads[:64]))
    refused(
        analyses(client, text, ["ablation"], model=wide_gpt2, ablate=heads[:65]),
        "ablate",
        "at most 64",
    )
    ok(analyses(client, "one", ["continue"], model=wide_gpt2, continue_tokens=64))
    refused(
        analyses(client, "one", ["continue"], model=wide_gpt2, continue_tokens=65),
        "continue_tokens",
        "at most 64",
    )
    n = count_tokens(catalogue.get("tiny-gpt2"), text)[0]  # within its 64 positions
    ok(analyses(client, text, ["continue"], model="tiny-gpt2", continue_tokens=64 - n))
    refused(
        analyses(client, text, ["continue"], model="tiny-gpt2", continue_tokens=64 - n + 1),
        f"the text has {n} tokens; with {64 - n + 1} more",
        "limit of 64",
    )
    same, longer = corrupted(text), text + " and"
    ok(analyses(client, text, ["patching"], model="tiny-gpt2", corrupted=same))
    m = count_tokens(catalogue.get("tiny-gpt2"), longer)[0]
    refused(
        analyses(client, text, ["patching"], model="tiny-gpt2", corrupted=longer),
        f"the corrupted text has {m} tokens and the text {n}",
    )


def corrupted(text: str) -> str:
    """``text`` with one word changed and the same token length for every test model."""
    from backend.tokens import count_tokens
    from workers.models.catalogue import get_catalogue

    out = text.replace("the", "a", 1)
    for name in ("tiny-gpt2", "wide-gpt2"):
        spec = get_catalogue().get(name)
        assert count_tokens(spec, out)[0] == count_tokens(spec, text)[0], name
    return out


def test_circuits_edges_steps_and_curve(api, catalogue, wide_gpt2):
    from workers.analyses.circuits.spec import edge_count

    client = api()
    text = short_text(8)
    pair = {"corrupted": corrupted(text)}
    small = edge_count(2, 4, False)  # tiny-gpt2's edges

    def edges(model: str = wide_gpt2, **opts: Any):
        return analyses(client, text, ["edge-attribution"], model=model, **pair, **opts)

    assert edge_count(8, 16, False) > 10_000
    ok(edges(top_edges=10_000))
    refused(edges(top_edges=10_001), "top_edges", "at most 10000")
    ok(edges("tiny-gpt2", top_edges=small))
    refused(edges("tiny-gpt2", top_edges=small + 1), f"more than tiny-gpt2's {small} edges")
    ok(edges(ig_steps=50))
    refused(edges(ig_steps=51), "ig_steps", "at most 50")
    ok(edges(curve_sizes=list(range(1, 25))))
    refused(edges(curve_sizes=list(range(1, 26))), "curve_sizes", "at most 24")
    ok(edges("tiny-gpt2", curve_sizes=[1, small]))
    refused(edges("tiny-gpt2", curve_sizes=[1, small + 1]), f"curve size {small + 1} is more than")


# --------------------------------------------------------------------------- compare and corpora


def test_comparison_max_tokens_memory_plan_and_picker(api, setting):
    from frontend.pages.compare import MAX_PICK, text_options
    from workers.analyses.compare.plan import plan_of

    client = api()
    body = {"model_a": "tiny-bert", "model_b": "tiny-gpt2", "text": short_text(12)}
    ok(client.post("/api/compare", json={**body, "max_tokens": 512}))
    refused(client.post("/api/compare", json={**body, "max_tokens": 513}), "max_tokens", "512")
    peak = plan_of("tiny-bert", "tiny-gpt2", [body["text"]], max_tokens=64).one_at_a_time
    setting("HEADSCOPE_MEMORY_BUDGET_GB", repr(peak / GIB))
    ok(client.post("/api/compare", json={**body, "max_tokens": 64}))
    setting("HEADSCOPE_MEMORY_BUDGET_GB", repr((peak - 1) / GIB))
    refused(
        client.post("/api/compare", json={**body, "max_tokens": 64}),
        f"needs about {peak / GIB:.1f} GiB",
        "memory budget",
    )
    assert MAX_PICK == 1_000
    for n in (1_000, 1_001):
        assert len(text_options({"texts": [f"text {i}" for i in range(n)]})) == 1_000


def test_corpus_texts_characters_and_bytes(api):
    client = api(HEADSCOPE_CORPUS_MAX_TEXTS="3", HEADSCOPE_CORPUS_MAX_TEXT_CHARS="8")

    def paste(text: str):
        return client.post("/api/corpora", data={"text": text})

    def file(data: bytes):
        return client.post("/api/corpora", files={"file": ("c.txt", data, "text/plain")})

    ok(paste("one\ntwo\nthree"), 201)
    refused(paste("one\ntwo\nthree\nfour"), "more than 3 texts; a corpus may have at most 3")
    ok(paste("12345678"), 201)
    refused(paste("123456789"), "longer than 8 characters")
    client = api(
        HEADSCOPE_CORPUS_MAX_TEXTS="1000000",
        HEADSCOPE_CORPUS_MAX_TEXT_CHARS="5000",
        HEADSCOPE_CORPUS_MAX_BYTES="40",
    )
    ok(file(b"1234567\n" * 5), 201)  # 40 bytes
    refused(file(b"1234567\n" * 5 + b"1"), "40-byte limit", status=413)  # 41
    client = api(HEADSCOPE_MAX_UPLOAD_BYTES="30")  # the upload limit bounds a corpus too
    ok(file(b"1234567\n" * 3 + b"123456"), 201)  # 30 bytes
    refused(file(b"1234567\n" * 3 + b"1234567"), "30-byte limit", status=413)


# ---------------------------------------------------------------------- the atlas and task sets


def test_atlas_probe_and_resamples(api):
    """The atlas' probe: S in 1-256 sequences, R in 2-512 tokens (and 2R + 1 within the model's
    limit), 0-2,000 bootstrap resamples; each tried at its limit and one past it."""
    from workers.analyses.atlas.spec import ATLAS, ATLAS_TEXT

    client = api()
    small = {"random_len": 8, "max_texts": 4, "skip_evidence": True}

    def atlas(**opts: Any):
        return analyses(client, ATLAS_TEXT, [ATLAS], model="tiny-gpt2", **{**small, **opts})

    ok(atlas(random_seqs=256, resamples=2_000))
    ok(atlas(random_seqs=1, resamples=0, random_len=2))
    refused(atlas(random_seqs=257), "random_seqs", "at most 256")
    refused(atlas(random_seqs=0), "random_seqs", "at least 1")
    refused(atlas(resamples=2_001), "resamples", "at most 2000")
    refused(atlas(random_len=1), "random_len", "at least 2")
    refused(atlas(random_len=513), "random_len", "at most 512")
    refused(atlas(random_len=40), "too long for tiny-gpt2")  # 2R + 1 past the tiny model's limit


def test_circuits_on_a_set_examples_resamples_and_random_circuits(api):
    """A task set: 2-2,000 examples drawn, 0-200 bootstrap resamples, 0-50 random circuits."""
    client = api()

    def task(**opts: Any):
        return analyses(client, "ioi", ["circuits-set"], model="tiny-gpt2", **opts)

    ok(task(set_examples=2_000, bootstrap=200, random_circuits=50))
    ok(task(set_examples=2, bootstrap=0, random_circuits=0))
    refused(task(set_examples=2_001), "set_examples", "at most 2000")
    refused(task(set_examples=1), "set_examples", "at least 2")
    refused(task(bootstrap=201), "bootstrap", "at most 200")
    refused(task(random_circuits=51), "random_circuits", "at most 50")
