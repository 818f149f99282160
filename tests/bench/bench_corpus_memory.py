"""Peak memory of a corpus upload and of a corpus job run in one process, at 10,000 and 100,000 texts
(issue 33: memory does not depend on the corpus size). The workers' peak in a job split into parts
is reported by tests/bench/bench_scale.py with the throughput (the issue's figure); this script
covers what it does not: the upload (the API's side) and the unsplit path (a job with splitting off,
the CLI), against the pre-issue-33 reference of reading the corpus whole.

For each size, a synthetic corpus (tests/bench/synthetic_corpus.py) is written as Parquet and, each in
a fresh process (one thread) on one store:
- ``upload``: checked, spooled and stored as the API does (``stage_corpus`` + ``put_corpus_chunks``);
- ``job``: the corpus job's path (``open_corpus`` + ``compute_corpus``): the texts stream from the
  store a window (500 texts) at a time;
- ``whole`` (the reference, the path before issue 33): the corpus read whole (``Store.corpus_texts``)
  and run as one window.
Printed: peak RSS (``VmHWM``), RSS once the model is loaded (``base``), their difference, seconds.

    nice -n 10 .venv/bin/python -m tests.bench.bench_corpus_memory [--sizes 10000,100000] [--model tiny-bert]
        [--max-tokens 32] [--database-url postgresql://...]

``--model tiny-bert`` (default) is a random 2-layer BERT built here (memory is about mechanics);
``--model minilm`` runs the real one (slow: ~18 texts/s on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))


def _peak_mb() -> float:
    """This process' peak resident memory (VmHWM: reset by exec, unlike ``ru_maxrss``, which a child
    inherits from the parent it was forked from)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(
    mode: str, *, data: Path, url: str | None, parquet: Path, model: str, max_tokens: int
) -> dict:
    """One measurement in this (fresh) process (``upload`` imports no torch, as the API)."""
    from backend.config import Settings
    from backend.store import Store
    from workers.queue.recycle import rss_mb

    store = Store(Settings(data_dir=data, database_url=url), migrate=True)
    t0 = time.perf_counter()
    if mode == "upload":
        from workers.inputs.corpora import stage_corpus

        staged = stage_corpus(parquet, fmt="parquet", name=parquet.name, spool_dir=store.tmp_dir)
        store.put_corpus_chunks(
            staged.id,
            staged.chunks(),
            n_texts=staged.n_texts,
            size=staged.size,
            meta={"id": staged.id, "name": parquet.name, "n_texts": staged.n_texts},
        )
        staged.discard()
        return {
            "mode": mode,
            "corpus": staged.id,
            "n": staged.n_texts,
            "peak_mb": _peak_mb(),
            "seconds": time.perf_counter() - t0,
        }
    import torch

    from workers.analyses.corpus.run import CorpusOptions, corpus_statistics
    from workers.core.contracts import CorpusRequest
    from workers.inputs.source import open_corpus
    from workers.models import load_model
    from workers.queue.jobs_corpus import compute_corpus

    torch.set_num_threads(1)
    corpus = json.loads((data / "corpus.json").read_text())["id"]
    loaded = load_model(model, device="cpu")
    base = rss_mb()
    t0 = time.perf_counter()
    if mode == "job":
        req = CorpusRequest(model=model, corpus=corpus, options={"max_tokens": max_tokens})
        res = compute_corpus(
            req,
            texts=open_corpus(corpus, store=store),
            progress=lambda f, m: None,
            on_partial=lambda _: None,
        )
    else:  # whole: the list in memory, one window
        texts = store.corpus_texts(corpus)
        res = corpus_statistics(
            loaded, texts, options=CorpusOptions(max_tokens=max_tokens), window=len(texts)
        )
    return {
        "mode": mode,
        "n": res["n_texts"],
        "base_mb": base,
        "peak_mb": _peak_mb(),
        "seconds": time.perf_counter() - t0,
    }


def run_child(mode: str, *, env: dict[str, str], **kw: str) -> dict:
    args = [sys.executable, "-m", "tests.bench.bench_corpus_memory", "--child", mode]
    for k, v in kw.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    out = subprocess.run(args, capture_output=True, text=True, env=env, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"{mode} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--data")
    ap.add_argument("--parquet")
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--model", default="tiny-bert")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--database-url", default=None)
    ap.add_argument("--modes", default="upload,job,whole")
    args = ap.parse_args()
    if args.child:
        print(
            json.dumps(
                child(
                    args.child,
                    data=Path(args.data),
                    url=args.database_url,
                    parquet=Path(args.parquet),
                    model=args.model,
                    max_tokens=args.max_tokens,
                )
            )
        )
        return 0

    from bench.synthetic_corpus import synthetic_texts, write
    from service_helpers import write_catalogue
    from tiny_models import build_tiny_bert

    base = Path(tempfile.mkdtemp(prefix="bench-corpus-memory-"))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    if args.model == "tiny-bert":
        env["HEADSCOPE_MODELS"] = str(
            write_catalogue(base / "models.json", {"tiny-bert": build_tiny_bert(base / "tb")})
        )
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        data = base / f"data-{n}"
        data.mkdir()
        parquet = write(base / f"corpus-{n}.parquet", synthetic_texts(n))
        url = args.database_url
        kw = {
            "data": data,
            "parquet": parquet,
            "model": args.model,
            "max_tokens": args.max_tokens,
            **({"database_url": url} if url else {}),
        }
        up = run_child("upload", env=env, **kw)
        (data / "corpus.json").write_text(json.dumps({"id": up["corpus"]}))
        for mode in args.modes.split(","):
            got = up if mode == "upload" else run_child(mode, env=env, **kw)
            got.update(n=n, load=os.getloadavg()[0])
            rows.append(got)
            print(
                json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in got.items()}),
                flush=True,
            )
    print("\nmode    texts    peak RSS MB  base MB  peak-base MB  seconds  load")
    for r in rows:
        extra = r["peak_mb"] - r["base_mb"] if "base_mb" in r else float("nan")
        print(
            f"{r['mode']:<7} {r['n']:>7,}  {r['peak_mb']:>11.0f}  {r.get('base_mb', float('nan')):>7.0f}  "
            f"{extra:>12.0f}  {r['seconds']:>7.1f}  {r['load']:.1f}"
        )
    by = {(r["mode"], r["n"]): r for r in rows}
    sizes = sorted({r["n"] for r in rows})
    if len(sizes) >= 2:
        lo, hi = sizes[0], sizes[-1]
        for mode in args.modes.split(","):
            if (mode, lo) in by and (mode, hi) in by:
                print(
                    f"{mode}: peak at {hi:,} texts / at {lo:,} = {by[(mode, hi)]['peak_mb'] / by[(mode, lo)]['peak_mb']:.2f}x"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
