"""``headscope corpus``: statistics of every head over a corpus file or a shipped corpus, JSON out
(keys: docs/results.md, "corpus"); with ``--joint L,H`` one head's joint query–key map as well."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any


def read_corpus(args: argparse.Namespace) -> tuple[str, list[str]]:
    """(corpus id, texts) of ``--file`` (checked as an upload is) or ``--corpus``, in one list."""
    corpus_id, source = open_corpus_arg(args)
    if isinstance(source, list):  # a shipped corpus
        return corpus_id, source
    try:
        return corpus_id, [t for b in source.batches(batch=4096) for t in b]
    finally:
        getattr(source, "discard", lambda: None)()


def open_corpus_arg(args: argparse.Namespace) -> tuple[str, Any]:
    """(corpus id, a ``TextSource``) of ``--file`` (checked as an upload is and spooled, so a corpus
    of a million texts is read a chunk at a time; ``discard()`` removes the spool) or ``--corpus``.
    A directory is a Hugging Face ``datasets`` directory saved with ``save_to_disk``."""
    from workers.core.errors import HeadscopeError
    from workers.inputs.corpora import format_of, shipped_corpus, stage_corpus

    if args.file is not None:
        path = Path(args.file)
        fmt = "datasets" if path.is_dir() else format_of(path.name)
        if fmt is None:
            raise HeadscopeError(
                f"{path.name}: unsupported file type; use .txt, .jsonl, .csv, .parquet, a "
                "datasets directory (save_to_disk) or one packed as .zip or .tar.gz"
            )
        if not path.exists():
            raise HeadscopeError(f"{path}: no such file")
        staged = stage_corpus(path, fmt=fmt, name=path.name, field=args.field)
        return staged.id, staged
    found = shipped_corpus(args.corpus)
    if found is None:
        raise HeadscopeError(
            f"unknown shipped corpus {args.corpus!r}; use builtin-english or builtin-lasf-heldout"
        )
    return args.corpus, found.texts


def write_result(path: str, result: dict[str, Any]) -> Path:
    """Write ``result`` as JSON to ``path`` through a temporary file: a failed or interrupted run
    leaves no half-written file."""
    from workers.core.jsonable import dumps

    out = Path(path)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_text(dumps(result))
    os.replace(tmp, out)
    return out


def joint_head(value: str) -> tuple[int, int]:
    """``--joint L,H`` -> (L, H); a ValueError naming the expected form otherwise."""
    try:
        layer, head = (int(x) for x in value.split(","))
    except ValueError:
        raise ValueError(f"--joint: expected LAYER,HEAD (e.g. 2,5), got {value!r}") from None
    return layer, head


def check_head_in_model(model: str, layer: int, head: int) -> None:
    """A HeadscopeError (the API's words) when (layer, head) is not a head of ``model``: from its
    config.json, before any text is run (a shape not yet known: checked when the model loads)."""
    from workers.core.errors import HeadscopeError
    from workers.models.catalogue import get_catalogue

    facts = get_catalogue().get(model).summary()
    n_layers, n_heads = facts.get("n_layers"), facts.get("n_heads")
    if n_layers and layer >= n_layers:
        raise HeadscopeError(
            f"--joint: layer {layer} is out of range: {model} has layers 0-{n_layers - 1}"
        )
    if n_heads and head >= n_heads:
        raise HeadscopeError(
            f"--joint: head {head} is out of range: {model} has heads 0-{n_heads - 1}"
        )


def cmd_corpus(args: argparse.Namespace) -> int:
    from workers.core.errors import HeadscopeError

    if (args.file is None) == (args.corpus is None):
        raise HeadscopeError("give exactly one of --file and --corpus")
    corpus_id, texts = open_corpus_arg(args)
    try:
        return _run_corpus(args, corpus_id, texts)
    finally:
        getattr(texts, "discard", lambda: None)()


def _run_corpus(args: argparse.Namespace, corpus_id: str, texts: Any) -> int:
    from backend.cli.progress import StderrProgress
    from workers.core.contracts import CorpusOptions, CorpusRequest, JointMapRequest
    from workers.core.errors import HeadscopeError, readable
    from workers.queue.jobs_corpus import compute_corpus, compute_joint

    opts: dict[str, Any] = {
        "max_tokens": args.max_tokens,
        "keep_special": args.keep_special,
        "dtype": args.dtype,
    }
    if args.statistics:
        opts["statistics"] = [s.strip() for s in args.statistics.split(",") if s.strip()]
    jreq = None
    try:
        req = CorpusRequest(model=args.model, corpus=corpus_id, options=CorpusOptions(**opts))
        if args.joint:  # checked before the run
            layer, head = joint_head(args.joint)
            jreq = JointMapRequest(
                model=args.model,
                corpus=corpus_id,
                layer=layer,
                head=head,
                max_tokens=args.max_tokens,
                keep_special=args.keep_special,
                method=args.method,
            )
    except ValueError as exc:
        raise HeadscopeError(readable(exc)) from None
    if jreq is not None:  # and against the model's shape, before the run
        check_head_in_model(args.model, jreq.layer, jreq.head)
    progress = StderrProgress("corpus", enabled=not args.quiet)
    result = compute_corpus(req, texts=texts, progress=progress, on_partial=lambda _: None)
    progress.close()
    if jreq is not None:
        jp = StderrProgress("joint map", enabled=not args.quiet)
        result["joint"] = compute_joint(jreq, texts=texts, progress=jp)
        jp.close()
    out = write_result(args.out, result)
    if not args.quiet:
        print(
            json.dumps(
                {
                    "out": str(out),
                    "n_texts": result["n_texts"],
                    "n_tokens": result["n_tokens"],
                    "truncated": result["truncated"],
                    "seconds": result["seconds"],
                }
            ),
            file=sys.stderr,
        )
    return 0


def add_corpus_commands(sub: Any) -> None:
    c = sub.add_parser("corpus", help="statistics of every head over a corpus (JSON out)")
    c.add_argument("--model", default="minilm", help="catalogue name (default: minilm)")
    c.add_argument(
        "--file",
        help="a .txt (one text per line), .jsonl, .csv or .parquet file, or a datasets "
        "directory saved with save_to_disk (or packed as .zip / .tar.gz)",
    )
    c.add_argument(
        "--corpus", help="a shipped corpus instead: builtin-english or builtin-lasf-heldout"
    )
    c.add_argument(
        "--field",
        help="the .jsonl field or the .csv, .parquet or datasets column holding the texts "
        "(default: text)",
    )
    c.add_argument(
        "--max-tokens", type=int, default=128, help="per text; longer texts are cut (counted)"
    )
    c.add_argument(
        "--keep-special", action="store_true", help="keep [CLS]/[SEP]/<s> as queries and keys"
    )
    c.add_argument("--statistics", help="comma-separated subset (default: all)")
    c.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    c.add_argument("--joint", metavar="L,H", help="also the joint query-key map of head (L, H)")
    c.add_argument(
        "--method", choices=["pca", "tsne"], default="pca", help="embedding of the joint map"
    )
    c.add_argument("--out", required=True, help="the result JSON")
    c.add_argument("--quiet", action="store_true")
    c.set_defaults(func=cmd_corpus)
