"""The README's Python example of the analysis core runs as written (on the real MiniLM)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def readme_block(after: str) -> str:
    """The first ```python block after the line containing ``after``."""
    text = (ROOT / "README.md").read_text()
    start = text.index(after)
    found = re.search(r"```python\n(.*?)```", text[start:], re.S)
    assert found, f"no python block after {after!r}"
    return found.group(1)


@pytest.mark.slow
def test_the_core_example_runs_as_written(minilm):
    code = readme_block("The analysis functions underneath are plain Python too")
    names: dict = {}
    exec(compile(code, "README.md", "exec"), names)
    run, ma, res, result = names["run"], names["ma"], names["res"], names["result"]
    assert ma.shape == (run.n_layers, run.n_heads, run.encoded.n)
    assert np.isfinite(res.kl).all() and res.embedding.shape[-1] == 2
    assert {"max-attention", "head-tsne"} <= set(result) and result["model"] == "minilm"
