"""Benchmark of the corpus analysis (issue 24): every statistic of every head over N sentences
against the plain forward passes over the same batches, measured in the same run; one head's joint
query–key map of 10,000 points; peak memory for 1,000 and 10,000 sentences (each in a fresh process).

    PYTHONPATH=. python tests/bench/bench_corpus.py --model minilm --sentences 1000
    PYTHONPATH=. python tests/bench/bench_corpus.py --model minilm --memory 1000,10000
    PYTHONPATH=. python tests/bench/bench_corpus.py --model smollm2 --model-dir <converted SmolLM2 directory>

Sentences: the standard library's documentation sentences (``workers.analyses.lasf.corpus``, built offline;
~14k unique), then the shipped English set, cycled if more are asked for. Targets (2 cores):
MiniLM, 1,000 sentences, all heads: <= 60 s and <= 1.5x the plain forward; joint map <= 30 s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time


def sentences(n: int) -> list[str]:
    from workers.analyses.lasf.corpus import build_corpus
    from workers.inputs.corpora import shipped_corpus

    corpus = build_corpus(seed=0, max_sentences=None, fractions=(0.0, 0.0))
    pool = list(corpus.train) + shipped_corpus("builtin-english").texts
    return [pool[i % len(pool)] for i in range(n)]


def plain_forward(loaded, texts: list[str], *, max_tokens: int) -> float:
    """Seconds for the same padded batches through the model with no hook (attentions computed)."""
    import torch

    from workers.analyses.corpus.run import CorpusOptions, batches, encode_corpus
    from workers.models.adapters import Encoded
    from workers.models.sublayers import batch_inputs

    opts = CorpusOptions(max_tokens=max_tokens)
    enc = encode_corpus(loaded, texts, max_tokens=max_tokens)
    keep = [[not s for s in row] for row in enc.special]
    run = [i for i, k in enumerate(keep) if any(k)]
    plan = [
        [run[j] for j in b]
        for b in batches(
            [len(enc.ids[i]) for i in run], batch_tokens=opts.batch_tokens, max_batch=opts.max_batch
        )
    ]
    t0 = time.perf_counter()
    with torch.inference_mode():
        for b in plan:
            loaded.model(**batch_inputs(loaded, [Encoded(enc.ids[i], [], [], []) for i in b]))
    return time.perf_counter() - t0


def bench(
    model: str, n: int, *, max_tokens: int, joint_points: int, repeats: int, method: str
) -> dict:
    import torch

    from workers.analyses.corpus.joint_map import joint_map
    from workers.analyses.corpus.run import CorpusOptions, corpus_statistics
    from workers.models import load_model

    texts = sentences(n)
    loaded = load_model(model, device="cpu")
    corpus_statistics(loaded, texts[:16])  # warm-up
    plain, stats = [], []
    for _ in range(repeats):  # interleaved, so a busy machine slows both alike
        plain.append(plain_forward(loaded, texts, max_tokens=max_tokens))
        t0 = time.perf_counter()
        res = corpus_statistics(loaded, texts, options=CorpusOptions(max_tokens=max_tokens))
        stats.append(time.perf_counter() - t0)
    out = {
        "model": model,
        "threads": torch.get_num_threads(),
        "sentences": n,
        "tokens": res["n_tokens"],
        "heads": loaded.n_layers * loaded.n_heads,
        "plain_s": min(plain),
        "statistics_s": min(stats),
        "ratio": min(stats) / min(plain),
        "texts_per_s": n / min(stats),
    }
    if joint_points:
        t0 = time.perf_counter()
        jm = joint_map(
            loaded,
            texts,
            layer=loaded.n_layers // 2,
            head=0,
            max_points=joint_points,
            method=method,
        )
        out.update(
            joint_points=jm["n_points"],
            joint_sampled=jm["sampled"],
            joint_s=time.perf_counter() - t0,
        )
    return out


def peak_rss(model: str, n: int, max_tokens: int) -> dict:
    """Peak RSS of a fresh process loading the model, and of one also running the corpus."""
    code = (
        "import json,resource,sys,time;sys.path.insert(0,'.');"
        "from tests.bench.bench_corpus import sentences;"
        "from workers.models import load_model;from workers.analyses.corpus.run import corpus_statistics, CorpusOptions;"
        f"texts=sentences({n});m=load_model({model!r},device='cpu');"
        "base=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss;"
        "run=sys.argv[1]=='run';t=time.perf_counter();"
        f"r=corpus_statistics(m,texts,options=CorpusOptions(max_tokens={max_tokens})) if run else None;"
        "print(json.dumps({'rss_mb':resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024,'s':time.perf_counter()-t}))"
    )
    out = {}
    for mode in ("load", "run"):
        proc = subprocess.run(
            [sys.executable, "-c", code, mode],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONPATH": os.getcwd()},
        )
        out[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "sentences": n,
        "peak_rss_load_mb": round(out["load"]["rss_mb"]),
        "peak_rss_run_mb": round(out["run"]["rss_mb"]),
        "corpus_mb": round(out["run"]["rss_mb"] - out["load"]["rss_mb"]),
        "seconds": round(out["run"]["s"], 1),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="minilm")
    p.add_argument(
        "--model-dir",
        help="register --model as this local model directory (e.g. a converted SmolLM2)",
    )
    p.add_argument("--sentences", type=int, default=1000)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--joint-points", type=int, default=10_000, help="0: no joint map")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument(
        "--method", choices=["pca", "tsne"], default="pca", help="embedding of the joint map"
    )
    p.add_argument(
        "--memory", default="", help="comma-separated corpus sizes for the peak-memory runs"
    )
    args = p.parse_args()
    os.environ.setdefault("HEADSCOPE_DEVICE", "cpu")
    if args.model_dir:
        from workers.models import Catalogue, ModelSpec, set_catalogue

        cat = Catalogue()
        cat.register(
            ModelSpec(args.model, "local", args.model_dir, f"{args.model} (local directory)")
        )
        set_catalogue(cat)
    if args.memory:
        for n in (int(x) for x in args.memory.split(",")):
            print(json.dumps(peak_rss(args.model, n, args.max_tokens)), flush=True)
        return
    r = bench(
        args.model,
        args.sentences,
        max_tokens=args.max_tokens,
        joint_points=args.joint_points,
        repeats=args.repeats,
        method=args.method,
    )
    print(
        json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}),
        flush=True,
    )
    _ = resource  # (peak memory: --memory)


if __name__ == "__main__":
    main()
