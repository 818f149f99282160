"""Benchmark of the comparison of two models (issue 32, docs/compare.md), measured in one run:

- the comparison of A and B on the shipped English corpus against the sum of the two models' plain
  corpus runs (``corpus_statistics``) on the same texts (target: <= 1.5x);
- the similarity of every head pair over those texts (``similarity_sums``, from stored word maps)
  against the time of one forward pass of B over the corpus (target for 72 x 270 pairs: <= 5 s).

    PYTHONPATH=. python tests/bench/bench_compare.py --model-a minilm --model-b smollm2 --repeats 3

Both models are loaded and warmed up first (one untimed run each); each figure is the best of
``--repeats``. Report the figures with the machine's load (``uptime``).
"""

from __future__ import annotations

import argparse
import json
import os
import time


def best(fn, repeats: int) -> float:  # noqa: ANN001
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-a", default="minilm")
    p.add_argument("--model-b", default="smollm2")
    p.add_argument("--corpus", default="builtin-english")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()

    from workers.analysis.compare import WordMapTap, compare_models, similarity_sums
    from workers.analysis.corpus import CorpusOptions, corpus_statistics
    from workers.analysis.word_maps import covered
    from workers.corpora import shipped_corpus
    from workers.models import load_model

    texts = shipped_corpus(args.corpus).texts
    a, b = load_model(args.model_a, device="cpu"), load_model(args.model_b, device="cpu")
    opts = CorpusOptions(max_tokens=128, top_k=0)
    for m in (a, b):  # warm-up
        corpus_statistics(m, texts[:8], options=opts)
    plain = best(lambda: corpus_statistics(a, texts, options=opts), args.repeats) + \
        best(lambda: corpus_statistics(b, texts, options=opts), args.repeats)
    compare = best(lambda: compare_models(lambda: a, lambda: b, texts), args.repeats)

    maps: dict[str, dict[int, dict]] = {"a": {}, "b": {}}
    for key, m in (("a", a), ("b", b)):
        tap = WordMapTap(m, texts, max_tokens=128, surprisal=False,
                         per_text=lambda i, part, k=key: maps[k].__setitem__(i, part))
        corpus_statistics(m, texts, options=opts, tap=tap)

    def all_pairs() -> None:
        for i, pa in maps["a"].items():
            pb = maps["b"].get(i)
            if pb is not None:
                similarity_sums(pa["maps"], pb["maps"], valid=covered(pa["member"]) & covered(pb["member"]),
                                causal=a.causal or b.causal)

    pairs_s = best(all_pairs, args.repeats)
    print(json.dumps({
        "models": [args.model_a, args.model_b], "texts": len(texts),
        "heads": [a.n_layers * a.n_heads, b.n_layers * b.n_heads], "cores": os.cpu_count(),
        "load": os.getloadavg()[0], "plain_corpus_runs_s": round(plain, 2), "compare_s": round(compare, 2),
        "compare_over_plain": round(compare / plain, 2), "similarity_all_pairs_s": round(pairs_s, 2),
    }))


if __name__ == "__main__":
    main()
