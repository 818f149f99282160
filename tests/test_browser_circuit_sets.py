"""The data-set mode of /circuits (``/circuits/sets``) in a real headless Chromium against the real
service, on a tiny GPT-2 (docs/circuits.md, "Circuits on a task data set"): a pasted IOI set of a few
examples runs one ``circuits-set`` job; the page shows the accuracy, CPR and CMD beside random's (the
result's numbers), the faithfulness curve with the random band on a log axis, the stability and the
circuit; an example links to the single-pair view; the URL keeps the job and the size."""

from __future__ import annotations

import json
import math
from pathlib import Path

import httpx
import pytest
from test_browser import WAIT_MS, Watch, _pick, browser, server  # noqa: F401 - fixtures
from test_circuit_tasks import TINY_NAMES

from frontend.figures import circuit_sets as F
from workers.analyses.circuits.tasks import ioi

pytestmark = [pytest.mark.browser, pytest.mark.slow]

URL_JS = "(k) => new URLSearchParams(window.location.search).get(k)"
NODES_JS = "() => Array.from(document.querySelector('#cs-nodes-graph .js-plotly-plot').data[0].y)"
CURVE_JS = """() => { const gd = document.querySelector('#cs-curve-graph .js-plotly-plot');
  return {log: gd.layout.xaxis.type, names: gd.data.map(d => d.name),
          y: Array.from(gd.data.find(d => d.name.startsWith('circuit by score')).y)}; }"""


def test_the_data_set_mode_shows_the_curve_and_the_numbers(
    server, browser, tiny_model_dirs, tmp_path
):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dirs["tiny-gpt2"]))
    lines = "\n".join(json.dumps(ex.as_dict()) for ex in ioi(tok, 6, seed=0, names=TINY_NAMES))
    w = Watch(browser, server, tmp_path)
    page = w.page
    try:
        page.goto(server + "/circuits")
        page.click("#circuits-sets-link")  # /circuits leads to its data-set mode
        page.wait_for_selector("#cs-analyze")
        _pick(page, "cs-model", "tiny-gpt2")
        page.get_by_label("my JSON Lines").check()
        page.fill("#cs-jsonl", lines)
        for cid, value in (("cs-ig-steps", "2"), ("cs-bootstrap", "3"), ("cs-random", "2")):
            page.fill(f"#{cid}", value)
        page.click("#cs-analyze")
        page.wait_for_function(
            "() => document.querySelector('#cs-scores').textContent.includes('CPR')",
            timeout=WAIT_MS,
        )
        job = page.evaluate(URL_JS, "analysis")
        res = httpx.get(f"{server}/api/analyses/{job}", timeout=60).json()["result"]["circuits-set"]
        assert res["n_examples"] == {"discovery": 3, "evaluation": 3} and res["ig_steps"] == 2
        assert res["set_id"].startswith("cp-")  # the pasted set was stored, the job names it
        assert page.inner_text("#cs-set-info").startswith(f"stored as {res['set_id']} (")

        assert page.inner_text("#cs-scores") == F.scores_line(res)
        assert f"{res['cpr']:.2f}" in F.scores_line(res)  # the numbers, not a placeholder
        assert page.inner_text("#cs-accuracy") == F.accuracy_line(res)
        assert page.inner_text("#cs-warning") == (res["warning"] or "")
        curve = page.evaluate(CURVE_JS)
        assert curve["log"] == "log" and "random ± sd" in curve["names"]
        assert curve["y"] == pytest.approx([f for _, f in res["curve"]])
        page.wait_for_selector("#cs-stability-graph .scatterlayer .point", timeout=WAIT_MS)
        page.wait_for_selector("#cs-circuit-graph .scatterlayer .point", timeout=WAIT_MS)
        bars = page.evaluate(NODES_JS)  # the AtP node scores, the strongest at the top
        assert bars[::-1] == [nd["id"] for nd in res["node_scores"]["top"][:15]]
        page.wait_for_function(f"({URL_JS})('k') !== null", timeout=WAIT_MS)

        with page.expect_download() as dl:  # the export bar: the circuit at the page's k
            page.click("#cs-dl-circuit-json")
        doc = json.loads(Path(dl.value.path()).read_text())
        k = float(page.evaluate(URL_JS, "k"))
        n = math.ceil(k * res["n_edges_total"])
        assert doc["format"] == "headscope-circuit" and doc["k"] == k
        assert doc["edges"] == res["edges"][:n] and doc["model"] == "tiny-gpt2"
        w.shot("circuit-sets")

        href = page.get_attribute("#cs-examples li:first-child a", "href")
        first = res["examples"][0]
        assert href.startswith("/circuits?") and "run=1" in href
        page.goto(server + href)  # the pair view of that example, analysed
        page.wait_for_selector("#circuits-corrupted")
        assert page.input_value("#circuits-corrupted") == first["corrupted"]
        assert page.input_value("#circuits-text") == first["clean"]
        assert not w.problems, w.problems
    finally:
        w.close()
