"""Results as JSON: ``jsonable`` turns numpy values into plain ones, ``dumps`` writes compact JSON.

Torch-free and shared by every layer that writes JSON: the analyses (their sections), the store
(requests, views, results), the queue service (Redis values) and the backend (responses spliced
around stored results, docs/api.md)::

    jsonable({"kl": np.array([0.5, 1.0]), 3: np.float32(2)})  -> {"kl": [0.5, 1.0], "3": 2.0}
    dumps({"x": float("nan"), "w": "Wörter"})                 -> '{"x":null,"w":"Wörter"}'
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson


def jsonable(obj: Any) -> Any:
    """``obj`` with numpy arrays as (nested) lists, numpy scalars as Python numbers, tuples as lists
    and dict keys as strings, recursively; anything else as it is."""
    import numpy as np  # here, not at the top: the store and the backend write JSON without numpy

    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        if isinstance(value, np.ndarray):
            return value.tolist()
        if isinstance(value, np.generic):
            return value.item()
        return value

    return plain(obj)


def dumps(obj: Any) -> str:
    """Compact JSON; NaN and infinities become null (JSON has none); non-ASCII text as UTF-8.

    orjson first: a job's sections (megabytes of floats) in a small part of the standard library's
    CPU time (docs/dashboard.md, "JSON of results"); the standard library for what orjson refuses
    (integers beyond 64 bits)."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:  # orjson.JSONEncodeError: the standard library decides (and raises)
        pass
    try:
        return json.dumps(obj, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps(_finite(obj), separators=(",", ":"), allow_nan=False)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj
