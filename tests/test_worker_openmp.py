"""Workers' OpenMP threads sleep while they wait (issue 34; ``workers.core.settings.WORKER_OPENMP_ENV``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from backend.serve import Supervisor
from workers.core.settings import WORKER_OPENMP_ENV, Settings

ROOT = Path(__file__).resolve().parents[1]


def test_serve_starts_workers_with_passive_openmp_waits_unless_the_environment_says(
    monkeypatch, tmp_path
):
    monkeypatch.setenv("HEADSCOPE_DATA_DIR", str(tmp_path))
    sup = Supervisor(settings=Settings(), redis_url="redis://127.0.0.1:1/0", n_workers=1)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert WORKER_OPENMP_ENV == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert sup.worker_env()["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # an operator's choice wins
    assert sup.worker_env()["OMP_WAIT_POLICY"] == "ACTIVE"


def _run(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


@pytest.mark.parametrize("torch_first", [False, True])
def test_the_worker_sets_the_wait_policy_before_torch_loads_or_says_it_came_too_late(torch_first):
    """``workers.queue.worker`` imports no torch, so the policy is in place when torch's OpenMP runtime loads;
    a process that loaded torch before gets a warning naming it."""
    code = ("import sys\n" + ("import torch\n" if torch_first else "")
            + "import workers.queue.worker as m\nassert ('torch' in sys.modules) == " + str(torch_first) + "\n"
            "import logging; logging.basicConfig()\nok = m.quiet_openmp_waits()\nimport os\n"
            "print(ok, os.environ['OMP_WAIT_POLICY'])\n")  # fmt: skip
    out = _run(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(not torch_first), "PASSIVE"]
    assert ("torch loaded before the worker set OMP_WAIT_POLICY" in out.stderr) == torch_first
