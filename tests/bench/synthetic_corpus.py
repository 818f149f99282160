"""A synthetic benchmark corpus: N English-like sentences, deterministic from a seed, as a list or
written to Parquet, JSON Lines or text (issue 33; tests/test_corpus_formats.py and the benchmarks).

Sentences are 6-28 words drawn from a small vocabulary with names and nouns that recur inside a
sentence (so induction and duplicate-token statistics have queries), numbered so that no two are
equal. 100,000 sentences take ~0.5 s to make and ~5 MB as Parquet.

    .venv/bin/python -m tests.bench.synthetic_corpus --n 100000 --out corpus.parquet   # or .jsonl, .txt
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np

NAMES = ["Mary", "John", "Alice", "Bob", "Ada", "Alan", "Grace", "Linus", "Edsger", "Barbara"]
NOUNS = [
    "book",
    "cat",
    "river",
    "engine",
    "letter",
    "garden",
    "model",
    "window",
    "bridge",
    "song",
    "table",
    "lamp",
    "train",
    "cloud",
    "paper",
    "stone",
]
VERBS = [
    "gave",
    "found",
    "painted",
    "carried",
    "read",
    "watched",
    "fixed",
    "opened",
    "sold",
    "wrote",
]
SMALL = [
    "the",
    "a",
    "to",
    "and",
    "of",
    "with",
    "near",
    "after",
    "because",
    "then",
    "again",
    "quietly",
]


def synthetic_texts(n: int, *, seed: int = 0) -> list[str]:
    """``n`` distinct sentences (numbered), the same for the same ``seed``."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        length = rng.randint(6, 28)
        who, other = rng.sample(NAMES, 2)
        thing = rng.choice(NOUNS)
        words = [who, rng.choice(VERBS), "the", thing, "to", other]
        while len(words) < length:
            pick = rng.random()
            if pick < 0.15:
                words += [who, rng.choice(VERBS), "the", thing]  # a repeat: induction has a query
            elif pick < 0.5:
                words.append(rng.choice(NOUNS))
            else:
                words.append(rng.choice(SMALL))
        out.append(" ".join(words[:length]) + f" ({i}).")
    return out


def write(path: Path, texts: list[str], *, field: str = "text") -> Path:
    """``texts`` to ``path`` by its extension: ``.parquet`` (column ``field`` and an ``id`` column),
    ``.jsonl`` (objects with ``field`` and ``id``) or ``.txt`` (one per line)."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(
            pa.table({"id": np.arange(len(texts)), field: texts}), path, row_group_size=20_000
        )
    elif path.suffix == ".jsonl":
        with open(path, "w", encoding="utf-8") as fh:
            for i, t in enumerate(texts):
                fh.write(json.dumps({"id": i, field: t}, ensure_ascii=False) + "\n")
    elif path.suffix == ".txt":
        path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    else:
        raise ValueError(f"unknown corpus format {path.suffix!r}: use .parquet, .jsonl or .txt")
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--field", default="text")
    ap.add_argument("--out", required=True, help="a .parquet, .jsonl or .txt file")
    args = ap.parse_args()
    out = write(Path(args.out), synthetic_texts(args.n, seed=args.seed), field=args.field)
    print(json.dumps({"out": str(out), "n": args.n, "bytes": out.stat().st_size}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
