"""Peak memory of a comparison of two models in one piece and in parts of texts (docs/scaling.md,
"the comparison of two models"): each figure a fresh process, one thread, VmHWM.

Model A holds its word maps of every text until model B has read it (heads x words² floats a text);
a part holds them for its own texts only. Random models from configs, since memory is about
mechanics: A is a BERT of 12 layers x 12 heads (hidden 96, so its maps, not its compute, dominate),
B the tiny GPT-2; texts of ``--words`` words. ``parts`` runs every part one after the other in one
process (a worker that takes them all) and merges them, as the merge job does::

    nice -n 10 .venv/bin/python -m tests.bench.bench_compare_memory --texts 200 --part 20 --words 60

``--real N``: instead, MiniLM (A) against SmolLM2 (B) on the first N shipped English texts, in one
piece and in parts of ``--part``, in this process: whether the results are equal, and both times.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def hwm_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def texts_of(n: int, words: int) -> list[str]:
    from workers.inputs.corpora import shipped_corpus

    pool = " ".join(shipped_corpus("builtin-english").texts).split()
    return [
        " ".join(pool[(i * 7 + j) % len(pool)] for j in range(words)) + f" number {i}"
        for i in range(n)
    ]


def child(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)
    from workers.analyses.compare.comparison import compare_models
    from workers.analyses.compare.parts import CompareMerge, compare_partial
    from workers.models import Catalogue, ModelSpec, load_model, set_catalogue

    cat = Catalogue()
    for name in ("wide-bert", "tiny-gpt2"):
        cat.register(ModelSpec(name, "local", str(Path(args.models) / name), name))
    set_catalogue(cat)
    texts = texts_of(args.texts, args.words)
    la, lb = (
        (lambda: load_model("wide-bert", device="cpu")),
        (lambda: load_model("tiny-gpt2", device="cpu")),
    )
    la(), lb()
    loaded = hwm_mib()
    t0 = time.perf_counter()
    if args.mode == "one":
        res = compare_models(la, lb, texts, max_tokens=args.max_tokens, window=args.part)
    else:
        merge = CompareMerge()
        for a in range(0, len(texts), args.part):
            part = compare_partial(
                la,
                lb,
                texts[a : a + args.part],
                first=a,
                max_tokens=args.max_tokens,
                window=args.part,
            )
            merge.add(json.loads(json.dumps(part)))  # as it travels through Redis
            del part
        res = merge.result()
    seconds = time.perf_counter() - t0
    res.pop("seconds")
    digest = hashlib.sha256(json.dumps(res, sort_keys=True).encode()).hexdigest()[:16]
    print(
        json.dumps(
            {
                "mode": args.mode,
                "loaded_mib": loaded,
                "peak_mib": hwm_mib(),
                "seconds": seconds,
                "digest": digest,
                "rows": res["n_query_words"],
            }
        )
    )


def real(n: int, part: int) -> None:
    """MiniLM x SmolLM2 on ``n`` shipped texts: one piece against parts of ``part`` (equality, seconds)."""
    import numpy as np
    import torch

    torch.set_num_threads(1)
    from workers.analyses.compare.comparison import compare_models
    from workers.analyses.compare.parts import CompareMerge, compare_partial
    from workers.inputs.corpora import shipped_corpus
    from workers.models import load_model

    texts = shipped_corpus("builtin-english").texts[:n]
    la, lb = (lambda: load_model("minilm")), (lambda: load_model("smollm2"))
    la(), lb()
    t0 = time.perf_counter()
    one = compare_models(la, lb, texts, max_tokens=128, window=part)
    t1 = time.perf_counter()
    merge = CompareMerge()
    for a in range(0, len(texts), part):
        merge.add(
            json.loads(
                json.dumps(compare_partial(la, lb, texts[a : a + part], first=a, window=part))
            )
        )
    split = merge.result()
    t2 = time.perf_counter()
    differ = [k for k in one if k != "seconds" and one[k] != split[k]]
    sims = [np.array([p["similarity"] for p in r["matching"]["pairs"]]) for r in (one, split)]
    print(f"MiniLM x SmolLM2, {n} texts, parts of {part}; load average {os.getloadavg()[0]:.1f}")
    print(
        f"one piece {t1 - t0:.1f} s, parts {t2 - t1:.1f} s; keys that differ: {differ or 'none'}; "
        f"largest difference of a matched pair's similarity {np.abs(sims[0] - sims[1]).max():.3g}; "
        f"{one['n_query_words']} query words"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--texts", type=int, default=200)
    parser.add_argument("--part", type=int, default=20)
    parser.add_argument("--words", type=int, default=60)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--mode", choices=("one", "parts"))
    parser.add_argument("--models")
    parser.add_argument(
        "--real", type=int, help="MiniLM x SmolLM2 on this many shipped texts instead"
    )
    args = parser.parse_args()
    if args.real:
        real(args.real, args.part)
        return
    if args.mode:
        child(args)
        return
    sys.path.insert(0, str(ROOT / "tests"))
    from tiny_models import build_tiny_bert, build_tiny_gpt2

    with tempfile.TemporaryDirectory() as tmp:
        build_tiny_bert(
            Path(tmp) / "wide-bert", layers=12, heads=12, hidden=96, max_positions=args.max_tokens
        )
        build_tiny_gpt2(Path(tmp) / "tiny-gpt2", max_positions=args.max_tokens)
        env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(ROOT),
            "TOKENIZERS_PARALLELISM": "false",
        }
        rows = []
        for mode in ("one", "parts"):
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "tests.bench.bench_compare_memory",
                    "--mode",
                    mode,
                    "--models",
                    tmp,
                    "--texts",
                    str(args.texts),
                    "--part",
                    str(args.part),
                    "--words",
                    str(args.words),
                    "--max-tokens",
                    str(args.max_tokens),
                ],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(
        f"{args.texts} texts of {args.words} words, parts of {args.part}; load average {os.getloadavg()[0]:.1f}"
    )
    print("| mode | models loaded (MiB) | peak (MiB) | peak - loaded | seconds | result digest |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['mode']} | {r['loaded_mib']:.0f} | {r['peak_mib']:.0f} | {r['peak_mib'] - r['loaded_mib']:.0f} | "
            f"{r['seconds']:.1f} | {r['digest']} |"
        )
    one, parts = rows
    print(
        f"extra memory, parts / one piece: {(parts['peak_mib'] - parts['loaded_mib']) / max(one['peak_mib'] - one['loaded_mib'], 1e-9):.3f}; "
        f"same result: {one['digest'] == parts['digest']}"
    )


if __name__ == "__main__":
    main()
