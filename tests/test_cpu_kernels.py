"""The float64 checks under each CPU kernel set (issue 20).

torch picks its CPU kernels (``default``, ``avx2``, ``avx512``) when it is imported, from
``ATEN_CPU_CAPABILITY`` or the processor. Before headscope kept float64 in float64, a padded batch and
the single text differed by ~2e-7 under AVX-512 and by 0 under ``default``: green on one machine, red
on another. Here the same checks run in a subprocess under ``default`` and under the machine's best,
and both must pass, so a difference that depends on the kernel set shows on any machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKS = [
    "tests/test_llm_families.py::test_decomposition_of_a_padded_batch_matches_single_texts",
    "tests/test_llm_families.py::test_float64_maps_of_a_padded_batch_match_single_texts",
    "tests/test_llm_families.py::test_decomposition_is_exact_on_every_state",
    "tests/test_decomposition.py::test_padded_batch_matches_single_texts",
]


def _env(capability: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    env.update(PYTHONPATH=str(ROOT), HEADSCOPE_DEVICE="cpu", OMP_NUM_THREADS="2")
    if capability:
        env["ATEN_CPU_CAPABILITY"] = capability
    return env


@pytest.mark.slow
@pytest.mark.parametrize("capability", ["default", None], ids=["default", "best"])
def test_float64_checks_pass_under_each_cpu_kernel_set(capability):
    env = _env(capability)
    probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    used = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    if capability:
        assert used == capability.upper(), f"ATEN_CPU_CAPABILITY={capability} gave {used}"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", *CHECKS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    print(
        f"CPU kernels {used}: {out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ''}"
    )
    assert out.returncode == 0, (
        f"float64 checks failed under CPU kernels {used}:\n{out.stdout[-4000:]}"
    )
    assert " passed" in out.stdout and "failed" not in out.stdout
