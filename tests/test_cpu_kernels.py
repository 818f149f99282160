"""The float64 checks under each CPU kernel set (issue 20) and each MKL code path.

torch picks its CPU kernels (``default``, ``avx2``, ``avx512``) when it is imported, from
``ATEN_CPU_CAPABILITY`` or the processor. Before headscope kept float64 in float64, a padded batch and
the single text differed by ~2e-7 under AVX-512 and by 0 under ``default``: green on one machine, red
on another. Here the same checks run in a subprocess under ``default`` and under the machine's best,
and both must pass, so a difference that depends on the kernel set shows on any machine.

torch's BLAS (MKL on x86) picks its own code path the same way, from ``MKL_CBWR`` or the processor,
and the paths sum a matrix product in different orders: the last bits of a forward move. Checks that
read those bits (a finite difference at too small a step, a metric from two forwards or importances
from chunks of other heights compared with ``==``, a float32 tolerance below the logits' last place)
passed on one machine and failed on another (an Intel Xeon, an AMD Zen 3). The checks that compare
numbers from different computations therefore also run under ``MKL_CBWR=AVX512`` and
``MKL_CBWR=COMPATIBLE`` (docs/models.md, "Precision").
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
# finite differences at the weakest node (GPT-2) and the most curved (Gemma 3), a metric from two
# forwards, importances from query chunks of other heights, logits from block products, a padded
# batch against its single texts
MKL_CHECKS = [
    *(
        f"tests/test_circuits.py::{test}[{fam}]"
        for test in (
            "test_qk_fix_keys_and_queries_are_first_order",
            "test_atp_is_the_first_order_of_patching",
        )
        for fam in ("gpt2", "gemma3_text")
    ),
    *(
        f"tests/test_circuits_edges.py::test_eap_is_the_first_order_of_the_edge_patched_run[{fam}]"
        for fam in ("gpt2", "gemma3_text")
    ),
    "tests/test_circuits_service.py::test_job_computes_attribution_patching_beside_real_patching",
    "tests/test_information_flow.py::test_graph_hangs_from_the_position_and_thresholds_nest[gemma2]",
    "tests/test_vocab.py::test_blocks_give_what_the_full_logits_give",
    *(
        f"tests/test_decomposition.py::test_padded_batch_matches_single_texts[{model}-float64-1e-12]"
        for model in ("tiny-bert", "tiny-gpt2")
    ),
]


def _env(**variables: str | None) -> dict[str, str]:
    """This process's environment for a fresh Python, with each of ``variables`` set (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k not in variables}
    env.update(PYTHONPATH=str(ROOT), HEADSCOPE_DEVICE="cpu", OMP_NUM_THREADS="2")
    env.update({k: v for k, v in variables.items() if v is not None})
    return env


def _run_checks(checks: list[str], env: dict[str, str], what: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", *checks],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    print(f"{what}: {out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ''}")
    assert out.returncode == 0, f"the checks failed under {what}:\n{out.stdout[-4000:]}"
    assert " passed" in out.stdout and "failed" not in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("capability", ["default", None], ids=["default", "best"])
def test_float64_checks_pass_under_each_cpu_kernel_set(capability):
    env = _env(ATEN_CPU_CAPABILITY=capability)
    probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    used = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    if capability:
        assert used == capability.upper(), f"ATEN_CPU_CAPABILITY={capability} gave {used}"
    _run_checks(CHECKS, env, f"CPU kernels {used}")


@pytest.mark.slow
@pytest.mark.parametrize("branch", ["AVX512", "COMPATIBLE"])
def test_float64_checks_pass_under_each_mkl_code_path(branch):
    """``MKL_CBWR`` is read when MKL starts, so each branch runs in a fresh process. On a processor
    without AVX-512 (an AMD Zen 3) ``AVX512`` gives the bits of ``AVX2`` and ``AUTO``, other bits than
    the variable unset: another summation order all the same; ``COMPATIBLE`` runs on any x86."""
    import torch

    if not torch.backends.mkl.is_available():
        pytest.skip("torch's BLAS is not MKL here: MKL_CBWR changes nothing")
    _run_checks(MKL_CHECKS, _env(MKL_CBWR=branch), f"MKL_CBWR={branch}")
