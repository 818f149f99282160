"""The JSON of a job's sections and result (``workers.core.jsonable.dumps``: orjson) and of
Dash's answers (plotly's standard engine): what they write, and which engine the page server uses."""

from __future__ import annotations

import math

import pytest

from workers.core.jsonable import dumps


def test_json_of_results_keeps_its_meaning():
    """``dumps`` (orjson, the standard library for what orjson refuses) writes what the
    standard library wrote, as JSON values: NaN and infinities as null, keys as text, any integer."""
    import json

    value = {"x": [1.5, math.nan, -math.inf, 1e-05, 3], 2: "naïve ⏎ <s>", "nested": {"a": [[0.1, 2e300]]},
             "flag": True, "none": None}  # fmt: skip
    want = {"x": [1.5, None, None, 1e-05, 3], "2": "naïve ⏎ <s>", "nested": {"a": [[0.1, 2e300]]}, "flag": True,
            "none": None}  # fmt: skip
    assert json.loads(dumps(value)) == want
    assert json.loads(dumps({"big": 2**70})) == {"big": 2**70}  # beyond orjson's 64 bits
    with pytest.raises(TypeError):
        dumps({"s": {1, 2}})  # not JSON, either way


def test_the_page_server_answers_with_the_standard_json_engine():
    """Dash's answers go through plotly's JSON engine; with orjson installed plotly would pick it, slower
    on the gallery's lists of floats (frontend/app.py)."""
    import plotly.io as pio

    from frontend.app import create_dash_app

    pio.json.config.default_engine = "auto"
    create_dash_app("http://127.0.0.1:9")
    assert pio.json.config.default_engine == "json"
