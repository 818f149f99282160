"""Service settings, read from ``HEADSCOPE_*`` environment variables (pydantic-settings).

The API, ``headscope serve`` and the workers all read the same variables, so one environment
configures a whole deployment (docker-compose passes them to every service). It lives below
both the backend and the workers (it imports only pydantic); ``backend.config`` re-exports it.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# The OpenMP runtime's environment a worker process starts with, unless the environment sets it
# (``headscope serve`` passes it to its workers; ``workers.queue.worker`` sets it before torch loads). With
# libgomp's default wait policy every torch and numba thread spins for milliseconds after each
# parallel region; where the cores are shared (the dashboard's browser, a second worker, anything else
# on the machine) the spinning threads take the cores from the working ones (measured with and
# without PASSIVE: docs/dashboard.md, "How fast the gallery arrives").
WORKER_OPENMP_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


def default_model_cache() -> Path:
    """The model cache when HEADSCOPE_MODEL_CACHE_DIR is unset: the user's cache directory (XDG), so
    every data dir and checkout of one user shares one conversion (docs/models.md)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "headscope" / "models"


class Settings(BaseSettings):
    """Everything an operator can set; every field has a safe default for one machine."""

    model_config = SettingsConfigDict(
        env_prefix="HEADSCOPE_", extra="ignore", populate_by_name=True
    )

    data_dir: Path = Field(
        Path("data"), description="the SQLite store (by default), embedded Redis, caches"
    )
    model_cache_dir: Path = Field(
        default_factory=default_model_cache,
        description="converted built-in models (SmolLM2 from its GGUF file), shared by every data dir; "
        "unset: $XDG_CACHE_HOME/headscope/models, else ~/.cache/headscope/models",
    )
    database_url: str | None = Field(
        None,
        description="the store's SQLAlchemy URL: sqlite:///PATH or postgresql://USER:PASS@HOST:PORT/DB; "
        "unset: sqlite:///<data dir>/headscope.db",
    )
    blob_dir: Path | None = Field(
        None,
        description="a directory every replica and worker shares for checkpoint bytes; unset: in the database",
    )
    redis_url: str | None = Field(
        None,
        validation_alias=AliasChoices("REDIS_URL", "HEADSCOPE_REDIS_URL", "redis_url"),
        description="an existing Redis; unset: `headscope serve` starts the bundled redis-server",
    )
    api_token: str | None = Field(
        None, description="if set, write endpoints (POST) need `Authorization: Bearer <token>`"
    )
    cors_origins: list[str] = Field(
        default_factory=list, description="origins allowed by CORS; empty = CORS off"
    )
    job_timeout_s: int = Field(
        1800, ge=1, description="a job running longer is stopped (then retried once)"
    )
    max_upload_bytes: int = Field(256 * 2**20, ge=1, description="checkpoint upload limit")
    result_ttl_s: int = Field(
        7 * 86400, ge=60, description="unshared results are deleted after this"
    )
    redis_result_ttl_s: int = Field(86400, ge=60, description="results and partials kept in Redis")
    worker_ttl_s: float = Field(30.0, gt=0, description="a worker silent this long counts as dead")
    worker_heartbeat_s: float = Field(5.0, gt=0, description="how often a worker says it is alive")
    reaper_interval_s: float = Field(
        5.0, gt=0, description="how often abandoned jobs are looked for"
    )
    max_view_bytes: int = Field(64 * 1024, ge=256, description="size limit of a share's view JSON")
    # fair use (docs/api.md "Fair use"); 0 turns a limit off
    rate_limit_writes: int = Field(
        120,
        ge=0,
        description="writes (POST) one client may make per rate window; over it: 429 + Retry-After",
    )
    rate_limit_window_s: int = Field(60, ge=1, description="the rate limit's window")
    trusted_proxies: list[str] = Field(
        default_factory=lambda: ["127.0.0.1", "::1"],
        description="peers whose X-Forwarded-For names the client (the dashboard, a reverse proxy)",
    )
    upload_quota_bytes: int = Field(
        1024 * 2**20, ge=0, description="what one client's uploads may take on disk in all"
    )
    storage_quota_bytes: int = Field(
        20 * 2**30,
        ge=0,
        description="results and uploads in all; over it the oldest that no share references go first",
    )
    upload_ttl_s: int = Field(
        30 * 86400, ge=60, description="unshared uploads unused this long are deleted"
    )
    short_workers: int = Field(
        1,
        ge=0,
        description="`headscope serve`: workers that take only short jobs (PE, one head), so "
        "they start while long analyses run",
    )
    worker_max_jobs: int = Field(
        200, ge=0, description="a worker is replaced after this many jobs (memory)"
    )
    worker_max_rss_mb: int = Field(
        3072, ge=0, description="a worker whose resident memory passes this after a job is replaced"
    )
    # models and compute (workers; the API reads `models` and `allow_hub` for its checks)
    docs_dir: Path | None = Field(
        None,
        description="the docs pages the dashboard serves at /help (default: the checkout's docs/, "
        "else ./docs)",
    )
    models: Path | None = Field(
        None,
        description="an operator's model catalogue file (JSON: name -> path or hub id); unset: builtins only",
    )
    allow_hub: bool = Field(
        False, description="catalogue entries may name a Hugging Face hub id (downloads)"
    )
    device: str | None = Field(
        None,
        description="where models and t-SNE compute: cpu, cuda, cuda:1; unset: cuda when available",
    )
    memory_budget_gb: float | None = Field(
        None,
        gt=0,
        description="GiB one request may use (checked before any work); unset: the machine's memory",
    )
    keep_freed_memory: bool = Field(
        True,
        description="workers and the CLI keep freed heap blocks for reuse within a job (glibc mallopt, "
        "workers/models/allocator.py); false: glibc's defaults",
    )
    cuda_graphs: bool = Field(True, description="the GPU t-SNE replays its rounds as CUDA graphs")
    tsne_layout: str = Field(
        "auto",
        description="the GPU t-SNE kernels' layout: fused, wide, or auto (fused with >= 2 heads per SM)",
    )
    api_base_url: str = Field(
        "http://127.0.0.1:8050",
        description="where the dashboard (mounted in the API) reaches the API",
    )

    analyses: str = Field(
        "",
        description="more analyses to register: comma-separated dotted module paths, each a spec "
        "registering itself (docs/architecture.md, 'How to add an analysis')",
    )
    tsne_engines: str | None = Field(
        None,
        description="fast t-SNE engines a worker may use, in order, checked at its start (comma-separated "
        "from triton-fused, triton-wide, torch; cpu always last); unset: all three on CUDA, none on CPU. "
        "torch on a CPU worker runs the device path there (tests)",
    )
    tsne_fault: str | None = Field(
        None,
        description="inject a t-SNE engine failure (tests, a first run on a GPU; docs/gpu.md): compile, "
        "launch or fatal, optionally @engine (default triton)",
    )

    split_min_items: int = Field(
        2000,
        ge=1,
        description="a corpus job over fewer texts stays one queue job; more is split into "
        "parts every worker shares (workers/queue/parts.py, docs/scaling.md)",
    )
    split_part_items: int = Field(500, ge=1, description="texts per part of a split corpus job")
    split_max_parts: int = Field(
        200,
        ge=2,
        description="a split corpus job has at most this many parts (larger parts then): the parts' "
        "partial results wait in Redis for the merge",
    )
    split_min_run_tokens: int = Field(
        100_000,
        ge=1,
        description="an ablation of every head or a patching with fewer run tokens (intervened "
        "runs x their tokens) stays in its analysis job; more is split into parts (docs/scaling.md)",
    )
    split_part_run_tokens: int = Field(
        25_000, ge=1, description="run tokens per part of a split ablation or patching"
    )
    split_compare_min_texts: int = Field(
        800,
        ge=1,
        description="a comparison of two models over fewer corpus texts stays one queue job; more is "
        "split into parts of texts, both models run in each (docs/scaling.md)",
    )
    split_compare_part_texts: int = Field(
        200,
        ge=1,
        description="texts per part of a split comparison (more when that would make over "
        "split_max_parts parts: whole multiples), and the texts a comparison sorts into batches together",
    )

    # corpus uploads (docs/corpus.md "Input"); the file limit is also capped by max_upload_bytes
    corpus_max_bytes: int = Field(
        256 * 2**20,
        ge=1,
        description="a corpus upload's size (file or archive, unpacked) and its texts' size in "
        "all (UTF-8 bytes)",
    )
    corpus_max_texts: int = Field(1_000_000, ge=1, description="texts one corpus may hold")
    corpus_max_text_chars: int = Field(
        5_000, ge=1, description="characters one text of a corpus may have"
    )

    @field_validator("tsne_layout")
    @classmethod
    def _layout(cls, value: str) -> str:
        if value not in ("auto", "fused", "wide"):
            raise ValueError(
                f"HEADSCOPE_TSNE_LAYOUT must be one of auto, fused, wide, got {value!r}"
            )
        return value

    @property
    def tmp_dir(self) -> Path:
        return self.data_dir / "tmp"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return Settings()
