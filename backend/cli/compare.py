"""``headscope compare``: two models on one text or a corpus (docs/compare.md), JSON out (keys:
docs/results.md, "compare"), progress on stderr."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def cmd_compare(args: argparse.Namespace) -> int:
    from backend.cli.corpus import read_corpus, write_result
    from backend.cli.progress import StderrProgress
    from workers.core.contracts import CompareRequest
    from workers.core.errors import HeadscopeError, readable
    from workers.queue.jobs_compare import compute_compare

    given = [x for x in (args.text, args.file, args.corpus) if x is not None]
    if len(given) != 1:
        raise HeadscopeError("give exactly one of --text, --file and --corpus")
    if args.text is not None:
        corpus_id, texts = None, [args.text]
    else:
        corpus_id, texts = read_corpus(args)
    try:
        req = CompareRequest(
            model_a=args.model_a,
            model_b=args.model_b,
            text=args.text,
            corpus=corpus_id,
            max_tokens=args.max_tokens,
        )
    except ValueError as exc:
        raise HeadscopeError(readable(exc)) from None
    progress = StderrProgress("compare", enabled=not args.quiet)
    result = compute_compare(req, texts=texts, progress=progress)
    progress.close()
    out = write_result(args.out, result)
    if not args.quiet:
        top = sorted(result["matching"]["pairs"], key=lambda p: -p["similarity"])[:5]
        print(
            json.dumps(
                {
                    "out": str(out),
                    "n_texts": result["n_texts"],
                    "seconds": result["seconds"],
                    "one_at_a_time": result["one_at_a_time"],
                    "best_pairs": top,
                }
            ),
            file=sys.stderr,
        )
    return 0


def add_compare_commands(sub: Any) -> None:
    c = sub.add_parser(
        "compare", help="two models on the same text or corpus: heads matched (JSON out)"
    )
    c.add_argument("--model-a", default="minilm", help="catalogue name (default: minilm)")
    c.add_argument("--model-b", default="smollm2", help="catalogue name (default: smollm2)")
    c.add_argument("--text", help="one text")
    c.add_argument("--file", help="a corpus file: .txt (one text per line), .jsonl or .csv")
    c.add_argument("--corpus", help="a shipped corpus: builtin-english or builtin-lasf-heldout")
    c.add_argument(
        "--field", help="the .jsonl field or .csv column holding the texts (default: text)"
    )
    c.add_argument(
        "--max-tokens", type=int, default=128, help="per text and model; longer texts are cut"
    )
    c.add_argument("--out", required=True, help="the result JSON")
    c.add_argument("--quiet", action="store_true")
    c.set_defaults(func=cmd_compare)
