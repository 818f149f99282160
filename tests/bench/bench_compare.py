"""Benchmark of the comparison of two models (issue 32, docs/compare.md), measured in one run:

- the comparison of A and B on the shipped English corpus against the sum of the two models' plain
  corpus runs (``corpus_statistics``) on the same texts (target: <= 1.5x);
- the similarity of every head pair over those texts (``SimilarityAccumulator``, from word maps kept
  in memory, as ``compare_models`` folds them in) (target for 72 x 270 pairs: <= 5 s on 2 cores),
  beside model B's plain corpus run.

    PYTHONPATH=. nice -n 10 python tests/bench/bench_compare.py --model-a minilm --model-b smollm2 --repeats 3

Both models are loaded and warmed up first (one short untimed run each). Each round times the plain
runs and the comparison back to back, so they share the machine's load; each figure is the best of
``--repeats`` rounds, as wall-clock seconds and as this process' CPU seconds (``process_time``: on a
shared machine the CPU seconds move less with the load than the wall clock does; with one torch
thread they are the single core's work). Report the figures with the machine's load (printed).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-a", default="minilm")
    p.add_argument("--model-b", default="smollm2")
    p.add_argument("--corpus", default="builtin-english")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)"
    )
    args = p.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from workers.analyses.compare.comparison import WordMapTap, compare_models
    from workers.analyses.compare.head_similarity import SimilarityAccumulator
    from workers.analyses.compare.word_maps import covered
    from workers.analyses.corpus.run import CorpusOptions, corpus_statistics
    from workers.inputs.corpora import shipped_corpus
    from workers.models import load_model

    texts = shipped_corpus(args.corpus).texts
    a, b = load_model(args.model_a, device="cpu"), load_model(args.model_b, device="cpu")
    opts = CorpusOptions(max_tokens=128, top_k=0)
    for m in (a, b):  # warm-up
        corpus_statistics(m, texts[:8], options=opts)

    maps: dict[str, dict[int, dict]] = {"a": {}, "b": {}}
    for key, m in (("a", a), ("b", b)):
        tap = WordMapTap(
            m,
            texts,
            max_tokens=128,
            surprisal=False,
            per_text=lambda i, part, k=key: maps[k].__setitem__(i, part),
        )
        corpus_statistics(m, texts, options=opts, tap=tap)
    causal = a.causal or b.causal

    def all_pairs() -> None:
        acc = SimilarityAccumulator(a.n_layers * a.n_heads, b.n_layers * b.n_heads)
        for i, pa in maps["a"].items():
            pb = maps["b"].get(i)
            if pb is not None:
                acc.add(
                    pa["maps"],
                    pb["maps"],
                    valid=covered(pa["member"]) & covered(pb["member"]),
                    causal=causal,
                )
        acc.sums()

    rounds = []
    loads = []
    for _ in range(args.repeats):
        loads.append(os.getloadavg()[0])
        rounds.append(
            {
                "plain_a": timed(lambda: corpus_statistics(a, texts, options=opts)),
                "plain_b": timed(lambda: corpus_statistics(b, texts, options=opts)),
                "compare": timed(lambda: compare_models(lambda: a, lambda: b, texts)),
                "pairs": timed(all_pairs),
            }
        )

    def best(key: str, k: int) -> float:
        return min(r[key][k] for r in rounds)

    out: dict[str, object] = {
        "models": [args.model_a, args.model_b],
        "texts": len(texts),
        "heads": [a.n_layers * a.n_heads, b.n_layers * b.n_heads],
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average_1min": loads,
    }
    for k, clock in ((0, "wall"), (1, "cpu")):
        plain = best("plain_a", k) + best("plain_b", k)
        out[clock] = {
            "plain_corpus_runs_s": round(plain, 2),
            "compare_s": round(best("compare", k), 2),
            "compare_over_plain": round(best("compare", k) / plain, 2),
            "similarity_all_pairs_s": round(best("pairs", k), 2),
            "similarity_over_plain_b": round(best("pairs", k) / best("plain_b", k), 3),
            "per_round_compare_over_plain": [
                round(r["compare"][k] / (r["plain_a"][k] + r["plain_b"][k]), 2) for r in rounds
            ],
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
