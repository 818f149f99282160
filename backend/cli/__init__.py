"""The ``headscope`` command.

Subcommands: ``analyze`` (one analysis of a text, JSON out), ``demo`` (the demo text, a summary on
stdout), ``serve`` (Redis + workers + API + dashboard), ``worker`` (one queue worker), ``pe`` (a
learned positional encoding, JSON out), ``corpus`` (heads across a corpus, JSON out), ``lst-train`` / ``lst-compare`` (Latin Square Task models).
Heavy imports (torch, transformers) happen inside the commands, so ``headscope --help``
is instant and the backend package never imports torch at import time.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from backend.cli.progress import StderrProgress

ANALYSES = [
    "max-attention",
    "head-tsne",
    "hidden-tsne",
    "word-tsne",
    "robustness",
    "decomposition",
    "lasf",
    "continue",
    "predictions",
    "logit-lens",
    "logit-attribution",
    "ablation",
    "patching",
    "attribution-patching",
    "edge-attribution",
]


def _layer_arg(value: str) -> int | str:
    if value == "all":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'all', got {value!r}") from None


def _read_text(args: argparse.Namespace) -> str:
    from workers.core.errors import BadFileError

    if args.text is not None:
        return args.text
    if args.text_file is None:
        from workers.data import demo_text

        return demo_text()
    path = Path(args.text_file)
    try:
        data = sys.stdin.read() if args.text_file == "-" else path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadFileError(f"text file not found: {path}") from None
    except UnicodeDecodeError:
        raise BadFileError(f"text file is not UTF-8 text: {path}") from None
    except OSError as exc:
        raise BadFileError(f"cannot read text file {path}: {exc.strerror}") from None
    return data


def _options(args: argparse.Namespace) -> dict[str, Any]:
    opts = {
        "truncate": args.truncate,
        "drop_special": args.drop_special,
        "layer": args.layer,
        "head": args.head,
        "engine": args.engine,
        "seed": args.seed,
        "restarts": args.restarts,
        "init": args.init,
        "perplexity": args.perplexity,
        "pooling": args.pooling,
        "fraction": args.fraction,
        "repeats": args.repeats,
        "dtype": args.dtype,
    }
    opts.update(_causal_options(args))
    if args.n_iter is not None:
        opts["n_iter"] = args.n_iter
    if args.early_exaggeration_iter is not None:
        opts["early_exaggeration_iter"] = args.early_exaggeration_iter
    from workers.core.contracts import AnalysisOptions
    from workers.core.errors import HeadscopeError

    try:  # every option within the API's limits (README "Limits": one set for the CLI and the API)
        AnalysisOptions.model_validate(opts)
    except ValueError as exc:
        from backend.errors import readable

        raise HeadscopeError(f"bad option: {readable(exc)}") from None
    return opts


def _token_arg(value: str) -> int | str:
    """A target token: an id (digits) or the token's text."""
    return int(value) if value.isdigit() else value


def _heads_arg(value: str) -> str | list[list[int]]:
    """``each`` or heads as ``L.H,L.H`` (e.g. ``3.1,5.0``)."""
    if value == "each":
        return value
    try:
        return [[int(x) for x in part.split(".")] for part in value.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected 'each' or heads as LAYER.HEAD,LAYER.HEAD; got {value!r}"
        ) from None


def _causal_options(args: argparse.Namespace) -> dict[str, Any]:
    """The causal views' options (docs/causal.md), validated by the same contract as the API's."""
    from workers.core.errors import HeadscopeError

    opts: dict[str, Any] = {"k": args.k, "ablation": args.ablation, "continue_tokens": args.continue_tokens,
                            "temperature": args.temperature, "ablate": args.ablate}  # fmt: skip
    if args.target is not None:
        opts["target"] = args.target[0] if len(args.target) == 1 else list(args.target)
    if args.position is not None:
        opts["position"] = args.position
    if args.corrupted is not None:
        opts["corrupted"] = args.corrupted
    if args.analysis == "patching" and args.corrupted is None:
        raise HeadscopeError("patching needs --corrupted TEXT (the same token length as --text)")
    if args.analysis == "attribution-patching" and args.corrupted is None:
        raise HeadscopeError(
            "attribution-patching needs --corrupted TEXT (the same token length as --text)"
        )
    if args.threshold is not None:
        opts["threshold"] = args.threshold
    if args.real:
        opts["real"] = True
    # edge-attribution / attribution-patching (docs/circuits.md)
    if args.analysis == "edge-attribution" and args.corrupted is None:
        raise HeadscopeError(
            "edge-attribution needs --corrupted TEXT (the same token length as --text)"
        )
    if args.qk_fix:
        opts["qk_fix"] = True
    for name in ("top_edges", "ig_steps", "curve_sizes"):
        if getattr(args, name) is not None:
            opts[name] = getattr(args, name)
    if args.all_edges:
        opts["all_edges"] = True
    return opts  # validated with the others (_options)


def flatten(result: dict[str, Any], kind: str) -> dict[str, Any]:
    """The CLI's JSON: the common keys plus the one analysis' section at top level."""
    section = result[kind]
    common = {k: v for k, v in result.items() if k not in ANALYSES}
    timings = {**common.pop("timings", {}), **section.get("timings", {})}
    return {**common, "analysis": kind, **section, "timings": timings}


def cmd_analyze(args: argparse.Namespace) -> int:
    from workers.core.errors import EmptyTextError
    from workers.engine.pipeline import analyze
    from workers.models import load_model

    text = _read_text(args)
    if not text.strip():
        raise EmptyTextError()
    if args.model is None:
        args.model = "lasf-minilm" if args.analysis == "lasf" else "minilm"
    options = _options(args)  # bad options: refused before the model loads
    if args.analysis == "word-tsne":
        from workers.analyses.tsne.words import check_word_list

        check_word_list(text)  # 4 to MAX_WORDS items, before the model loads
    bar = StderrProgress(args.analysis, enabled=not args.quiet)
    start = time.perf_counter()
    lasf = None
    if args.analysis == "lasf":
        from backend.cli.lasf import cli_lasf_model

        lasf = cli_lasf_model(args.model)
    loaded = load_model(
        lasf.config["base_model"] if lasf else args.model, dtype=args.dtype, device=args.device
    )
    load_s = time.perf_counter() - start
    try:
        result = analyze(loaded, text, [args.analysis], options, progress=bar, lasf=lasf)
    finally:
        bar.close()
    out = flatten(result, args.analysis)
    out["timings"]["load_s"] = load_s
    blob = json.dumps(out, indent=None, separators=(",", ":"))
    if args.out in (None, "-"):
        sys.stdout.write(blob + "\n")
    else:
        Path(args.out).write_text(blob)
        print(f"wrote {args.out} ({len(blob) / 1024:.0f} KiB)", file=sys.stderr)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Max attention and one head's t-SNE on the demo text, summarised on stdout."""
    import numpy as np

    from workers.data import demo_text
    from workers.engine.pipeline import analyze
    from workers.models import load_model

    text = demo_text()
    bar = StderrProgress("demo")
    loaded = load_model(args.model)
    opts = {"layer": args.layer, "head": args.head}
    try:
        res = analyze(
            loaded, text, ["max-attention", "head-tsne", "hidden-tsne"], opts, progress=bar
        )
    finally:
        bar.close()
    from frontend.figures.text import readable_tokens

    tokens = readable_tokens(
        res, markup=False
    )  # the text's own spans, never raw pieces like "Ġcat"
    ma = np.asarray(res["max-attention"]["max_attention"])  # [layer, head, token]
    print(
        f"model {res['model']} ({res['family']}): {res['n_layers']} layers x {res['n_heads']} heads"
    )
    print(f"text: {len(text)} characters, {len(tokens)} tokens")
    print("most-attended token per layer (max over heads of max attention):")
    for layer in range(ma.shape[0]):
        top = np.argsort(-ma[layer].max(axis=0))[:5]
        print(
            f"  layer {layer}: "
            + ", ".join(f"{tokens[t]}({ma[layer].max(axis=0)[t]:.2f})" for t in top)
        )
    ht, hs = res["head-tsne"], res["hidden-tsne"]
    print(
        f"attention-head t-SNE layer {ht['layers'][0]} head {ht['heads'][0]}: KL {ht['kl'][0]:.3f} "
        f"({ht['timings']['tsne_s']:.1f} s, {ht['engine']} engine)"
    )
    print(f"standard t-SNE of hidden states at layer {hs['layers'][0]}: KL {hs['kl'][0]:.3f}")
    emb = np.asarray(ht["embedding"])
    centre = emb.mean(axis=0)
    near = np.argsort(((emb - centre) ** 2).sum(axis=1))[:8]
    print("tokens nearest the centre of the head's map: " + " ".join(tokens[i] for i in near))
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


ANALYSES.append(
    "information-flow"
)  # docs/circuits.md (kept apart from the list: the circuits branches both extend it)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="headscope", description="Look inside transformer models."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    a = sub.add_parser("analyze", help="run one analysis on a text and write JSON")
    a.add_argument(
        "--model",
        default=None,
        help="catalogue name (default: minilm; lasf: lasf-minilm (default), lasf-minilm-paper or a LasF checkpoint file)",
    )
    src = a.add_mutually_exclusive_group()
    src.add_argument("--text-file", help="UTF-8 text file ('-' = stdin); default: the demo text")
    src.add_argument("--text", help="the text itself")
    a.add_argument("--analysis", required=True, choices=ANALYSES)
    a.add_argument("--out", help="output JSON path (default: stdout)")
    a.add_argument(
        "--layer",
        type=_layer_arg,
        default="all",
        help="layer index or 'all' (decomposition: the state of the per-head view, default the last)",
    )
    a.add_argument("--head", type=_layer_arg, default="all", help="head index or 'all'")
    a.add_argument("--engine", choices=["batched", "opentsne", "fast"], default=None)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--restarts", type=int, default=1, help="best-of-k t-SNE restarts")
    a.add_argument("--init", choices=["spectral", "random", "pca"], default="spectral")
    a.add_argument(
        "--n-iter", type=int, default=None, help="t-SNE iterations after early exaggeration (750)"
    )
    a.add_argument("--early-exaggeration-iter", type=int, default=None, help="(250)")
    a.add_argument("--perplexity", type=float, default=20.0, help="standard t-SNE perplexity")
    a.add_argument("--pooling", choices=["auto", "first", "last", "mean"], default="auto")
    a.add_argument(
        "--fraction", type=float, default=0.05, help="robustness: share of tokens replaced"
    )
    a.add_argument("--repeats", type=int, default=10, help="robustness: runs per condition")
    a.add_argument("--drop-special", action="store_true", help="leave special tokens out")
    a.add_argument("--truncate", action="store_true", help="cut over-long texts instead of failing")
    a.add_argument(
        "--dtype",
        choices=["float32", "float64"],
        default="float32",
        help="model precision; decomposition: float64 reconstructs X[l] to < 1e-9 (docs/decomposition.md)",
    )
    a.add_argument("--device", default=None, help="cpu, cuda, cuda:1 (default: cuda if available)")
    c = a.add_argument_group("causal views (decoders with a language-model head; docs/causal.md)")
    c.add_argument("--k", type=int, default=10, help="predictions: top-k next tokens per position")
    c.add_argument(
        "--target",
        nargs="+",
        type=_token_arg,
        metavar="TOKEN",
        help="one token (text or id), or two: the logit difference a - b (patching: the pair)",
    )
    c.add_argument(
        "--position",
        type=int,
        default=None,
        help="position of the layers x heads maps (default: last)",
    )
    c.add_argument(
        "--ablate",
        type=_heads_arg,
        default="each",
        help="'each' head in turn, or LAYER.HEAD,... together",
    )
    c.add_argument(
        "--ablation", choices=["zero", "mean"], default="mean", help="replace a head's output by"
    )
    c.add_argument(
        "--corrupted",
        default=None,
        metavar="TEXT",
        help="patching: the corrupted text (same token length)",
    )
    c.add_argument("--continue-tokens", type=int, default=16, help="continue: tokens to generate")
    c.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="continue: 0 = greedy, else sampled with --seed",
    )
    c.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="information-flow: keep edges of importance >= this, in (0, 1) (default 0.04); "
        "--position: the position the graph starts from",
    )
    c.add_argument(
        "--real",
        action="store_true",
        help="attribution-patching: also the real head patching, correlated",
    )
    c.add_argument(
        "--qk-fix",
        action="store_true",
        help="attribution-patching: AtP*'s query-key fix (queries and keys)",
    )
    c.add_argument(
        "--top-edges",
        type=int,
        default=None,
        metavar="N",
        help="edge-attribution: edges of the circuit (200)",
    )
    c.add_argument(
        "--ig-steps",
        type=int,
        default=None,
        metavar="K",
        help="edge-attribution: EAP-IG steps (5; 1 = EAP)",
    )
    c.add_argument(
        "--curve-sizes",
        type=int,
        nargs="+",
        default=None,
        metavar="N",
        help="edge-attribution: edge counts of the faithfulness curve (default: 12 from 0.1%% to 20%%)",
    )
    c.add_argument(
        "--all-edges", action="store_true", help="edge-attribution: list every edge's score"
    )
    a.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    a.set_defaults(func=cmd_analyze)

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
