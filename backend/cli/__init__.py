"""The ``headscope`` command.

Subcommands: ``analyze`` (one analysis of a text, JSON out), ``demo`` (the demo text, a summary on
stdout), ``serve`` (Redis + workers + API + dashboard), ``worker`` (one queue worker), ``pe`` (a
learned positional encoding, JSON out), ``corpus`` (heads across a corpus, JSON out), ``circuits`` (a circuit on a task set, JSON out), ``lst-train`` / ``lst-compare`` (Latin Square Task models).
Heavy imports (torch, transformers) happen inside the commands, so ``headscope --help``
is instant and the backend package never imports torch at import time.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from backend.cli.progress import StderrProgress


def cmd_demo(args: argparse.Namespace) -> int:
    """Max attention and one head's t-SNE on the demo text, summarised on stdout."""
    import numpy as np

    from workers.analyses.attention.spec import MAX_ATTENTION
    from workers.analyses.tsne.spec import HEAD_TSNE, HIDDEN_TSNE
    from workers.data import demo_text
    from workers.engine.pipeline import analyze
    from workers.models import load_model

    text = demo_text()
    bar = StderrProgress("demo")
    loaded = load_model(args.model)
    opts = {"layer": args.layer, "head": args.head}
    try:
        res = analyze(loaded, text, [MAX_ATTENTION, HEAD_TSNE, HIDDEN_TSNE], opts, progress=bar)
    finally:
        bar.close()
    from workers.core.notation import head_label, token_label

    texts = res.get("token_texts") or []
    # as every page shows tokens (workers/core/notation.py): "␣cat", never a raw piece like "Ġcat"
    shown = [
        token_label(t, texts[i] if i < len(texts) else None) for i, t in enumerate(res["tokens"])
    ]
    ma = np.asarray(res[MAX_ATTENTION]["max_attention"])  # [layer, head, token]
    print(
        f"model {res['model']} ({res['family']}): {res['n_layers']} layers x {res['n_heads']} heads"
    )
    print(f"text: {len(text)} characters, {len(shown)} tokens")
    print("most-attended token per layer (max over heads of max attention):")
    for layer in range(ma.shape[0]):
        top = np.argsort(-ma[layer].max(axis=0))[:5]
        print(
            f"  layer {layer}: "
            + ", ".join(f"{shown[t]}({ma[layer].max(axis=0)[t]:.2f})" for t in top)
        )
    ht, hs = res[HEAD_TSNE], res[HIDDEN_TSNE]
    print(
        f"attention-head t-SNE {head_label(ht['layers'][0], ht['heads'][0])}: KL {ht['kl'][0]:.3f} "
        f"({ht['timings']['tsne_s']:.1f} s, {ht['engine']} engine)"
    )
    print(f"standard t-SNE of hidden states at layer {hs['layers'][0]}: KL {hs['kl'][0]:.3f}")
    emb = np.asarray(ht["embedding"])
    centre = emb.mean(axis=0)
    near = np.argsort(((emb - centre) ** 2).sum(axis=1))[:8]
    print("tokens nearest the centre of the head's map: " + " ".join(shown[i] for i in near))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """Redis (bundled unless REDIS_URL), ``--workers`` workers and the API + dashboard."""
    from backend.serve import serve

    preload = () if args.no_preload else tuple(args.preload or ["minilm"])
    return serve(
        host=args.host,
        port=args.port,
        n_workers=args.workers,
        preload=preload,
        verbose=args.verbose,
    )


def cmd_migrate(args: argparse.Namespace) -> int:
    """Bring the database to the current schema; optionally import a file store."""
    from backend.config import get_settings
    from backend.store import Store, StoreUnavailable

    try:
        store = Store(get_settings(), migrate=False)
        before, after = store.migrate()
        print(
            f"headscope: {store.where}: schema {after}"
            + (" (already current)" if before == after else f" (was {before or 'empty'})")
        )
        if args.import_files:
            from workers.store.importer import import_file_store

            report = import_file_store(store, Path(args.import_files))
            for what in ("results", "shares", "checkpoints"):
                got = report[what]
                print(
                    f"headscope: {what}: {got['imported']} imported, {got['present']} already present"
                )
            for line in report["problems"]:
                print(f"headscope: not imported: {line}", file=sys.stderr)
            return 1 if report["problems"] else 0
    except (StoreUnavailable, ValueError, FileNotFoundError) as exc:
        print(f"headscope: error: {exc}", file=sys.stderr)
        return 2
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from workers.queue.worker import run_from_args

    return run_from_args(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="headscope", description="Look inside transformer models."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    from backend.cli.analyze import add_analyze_command

    add_analyze_command(sub)

    d = sub.add_parser("demo", help="analyse the demo text and print a summary")
    d.add_argument("--model", default="minilm")
    d.add_argument("--layer", type=int, default=1)
    d.add_argument("--head", type=int, default=2)
    d.set_defaults(func=cmd_demo)

    s = sub.add_parser("serve", help="start Redis, workers and the dashboard (one command)")
    s.add_argument(
        "--host", default="127.0.0.1", help="interface to listen on (default: loopback only)"
    )
    s.add_argument("--port", type=int, default=8050)
    s.add_argument(
        "--workers", type=int, default=1, help="worker processes (each keeps its models loaded)"
    )
    s.add_argument(
        "--preload",
        action="append",
        help="catalogue model each worker loads at start (default: minilm)",
    )
    s.add_argument("--no-preload", action="store_true", help="load models on first use instead")
    s.set_defaults(func=cmd_serve)

    m = sub.add_parser(
        "migrate", help="create or upgrade the database schema (HEADSCOPE_DATABASE_URL)"
    )
    m.add_argument(
        "--import-files",
        metavar="DIR",
        help="also copy a file store (an old data dir with results/, shares/, checkpoints/) in",
    )
    m.set_defaults(func=cmd_migrate)

    w = sub.add_parser("worker", help="run one queue worker (REDIS_URL names the Redis)")
    from workers.queue.worker import add_arguments

    add_arguments(w)
    w.set_defaults(func=cmd_worker)

    from backend.cli.pe import add_pe_commands

    add_pe_commands(sub)
    from backend.cli.lasf import add_lasf_commands

    add_lasf_commands(sub)
    from backend.cli.corpus import add_corpus_commands

    add_corpus_commands(sub)
    from backend.cli.compare import add_compare_commands

    add_compare_commands(sub)
    from backend.cli.atlas import add_atlas_command
    from backend.cli.circuits import add_circuits_commands

    add_atlas_command(sub)
    add_circuits_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr)
    from workers.core.errors import HeadscopeError
    from workers.models.allocator import keep_freed_memory

    keep_freed_memory()  # analyses run in this process: reuse freed tensors' memory (workers/models/allocator.py)

    try:
        return int(args.func(args) or 0)
    except HeadscopeError as exc:
        print(f"headscope: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("headscope: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
