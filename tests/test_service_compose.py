"""docker-compose.yml is valid for Debian's docker-compose (1.29) and has the pieces the docs promise."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def compose(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("docker-compose is not installed (make system-deps)")
    return subprocess.run(
        [exe, "-f", str(ROOT / "docker-compose.yml"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_compose_file_validates():
    out = compose("config", "-q")
    assert out.returncode == 0, out.stderr


def test_compose_services_volumes_gpu_and_healthchecks():
    yaml = pytest.importorskip("yaml")  # PyYAML comes with transformers
    out = compose("config")
    assert out.returncode == 0, out.stderr
    cfg = yaml.safe_load(out.stdout)
    services = cfg["services"]
    assert {"redis", "api", "worker"} <= set(services)
    for name in ("redis", "api", "worker"):
        assert services[name]["healthcheck"]["test"], name
    worker = services["worker"]
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert "container_name" not in worker and "ports" not in worker  # --scale worker=N works
    assert "gpus" not in worker
    assert "--appendonly" in services["redis"]["command"]  # the queue survives a restart
    assert any(str(v).startswith("redis-data:/data") for v in services["redis"]["volumes"])
    assert any(str(v).startswith("data:/data") for v in services["api"]["volumes"])
    env = services["api"]["environment"]
    assert (
        env["REDIS_URL"] == worker["environment"]["REDIS_URL"] == "redis://:headscope@redis:6379/0"
    )
    # Redis asks for the password every client's URL carries (and the healthcheck's redis-cli has)
    command = services["redis"]["command"]
    assert command[command.index("--requirepass") + 1] == "headscope"
    assert services["redis"]["environment"]["REDISCLI_AUTH"] == "headscope"
    assert "ports" not in services["redis"]
    assert set(cfg["volumes"]) >= {"redis-data", "data"}


def test_compose_runs_api_and_workers_on_one_postgres():
    yaml = pytest.importorskip("yaml")
    out = compose("config")
    assert out.returncode == 0, out.stderr
    cfg = yaml.safe_load(out.stdout)
    services = cfg["services"]
    pg = services["postgres"]
    assert pg["healthcheck"]["test"] and any(
        str(v).startswith("postgres-data:/var/lib/postgresql/data") for v in pg["volumes"]
    )
    assert "postgres-data" in cfg["volumes"]
    urls = {
        services[name]["environment"]["HEADSCOPE_DATABASE_URL"]
        for name in ("api", "worker", "migrate")
    }
    assert len(urls) == 1
    url = urls.pop()
    assert url.startswith("postgresql://headscope:") and "@postgres:5432/" in url
    assert services["migrate"]["command"] == ["headscope", "migrate"]
    assert services["api"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["worker"]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_worker_image_has_a_c_compiler_and_the_worker_its_engine_settings():
    """Triton builds a C launcher at its first launch: the image installs gcc before the project."""
    yaml = pytest.importorskip("yaml")
    docker = (ROOT / "Dockerfile").read_text()
    assert "apt-get install -y --no-install-recommends gcc" in docker
    assert docker.index("gcc") < docker.index("pip install .")
    out = compose("config")
    worker = yaml.safe_load(out.stdout)["services"]["worker"]
    assert {"HEADSCOPE_TSNE_ENGINES", "HEADSCOPE_TSNE_FAULT"} <= set(worker["environment"])


def test_workers_on_more_machines_share_the_first_machines_redis_and_database(monkeypatch):
    """docs/scaling.md: the first machine publishes Redis and PostgreSQL; the others' workers use them."""
    yaml = pytest.importorskip("yaml")
    monkeypatch.setenv("HEADSCOPE_HOST", "10.0.0.5")
    first = compose("-f", str(ROOT / "docs" / "compose-first-machine.yml"), "config")
    assert first.returncode == 0, first.stderr
    services = yaml.safe_load(first.stdout)["services"]
    assert any("6379" in str(p) for p in services["redis"]["ports"])
    assert any("5432" in str(p) for p in services["postgres"]["ports"])
    more = compose("-f", str(ROOT / "docs" / "compose-more-workers.yml"), "config")
    assert more.returncode == 0, more.stderr
    services = yaml.safe_load(more.stdout)["services"]
    for name in ("worker", "worker-cpu"):
        env = services[name]["environment"]
        assert env["REDIS_URL"] == "redis://:headscope@10.0.0.5:6379/0"
        assert (
            env["HEADSCOPE_DATABASE_URL"]
            == "postgresql://headscope:headscope@10.0.0.5:5432/headscope"
        )
        assert env["HEADSCOPE_SPLIT_MIN_ITEMS"] == "2000"  # the split settings reach every worker
    assert services["api"]["environment"]["REDIS_URL"] == "redis://:headscope@redis:6379/0"
