"""``headscope analyze``: one analysis of a text, JSON out; its choices and flags read off the registry.

Every ``--analysis`` choice is a registered analysis (``workers.core.registry``) and every option
flag is a field of the request's options (``workers.core.options`` and the specs), with the same
defaults and limits the API checks: a flag given is validated by the API's contract before any
model loads, a flag not given takes the contract's default.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import textwrap
import time
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from backend.cli.progress import StderrProgress


def _choices(annotation: Any) -> list[Any] | None:
    """The values of a ``Literal`` (or ``Literal | None``) annotation; None otherwise."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return list(args)
    literals = [a for a in args if typing.get_origin(a) is typing.Literal]
    if literals and all(a is type(None) or a in literals for a in args):
        return [v for lit in literals for v in typing.get_args(lit)]
    return None


def _scalar(annotation: Any) -> Any:
    """The plain type of a field (``int | None`` -> int)."""
    if annotation in (int, float, str):
        return annotation
    for a in typing.get_args(annotation):
        if a in (int, float, str):
            return a
    return str


def _parser(parse: Any) -> Any:
    """argparse reports a ``ValueError`` as "invalid value"; ours carry their own words."""

    def run(value: str) -> Any:
        try:
            return parse(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    run.__name__ = getattr(parse, "__name__", "value")
    return run


def _cli(info: Any) -> Any:
    from workers.core.options import Cli

    return next((m for m in info.metadata if isinstance(m, Cli)), Cli())


def option_fields(only: str | None = None) -> dict[str, tuple[Any, list[str]]]:
    """Every option a CLI analysis reads (``only``: that analysis'): ``name -> (field, kinds reading
    it)``, in job order."""
    from workers.core import registry

    out: dict[str, tuple[Any, list[str]]] = {}
    for spec in registry.specs():
        if not spec.cli or (only is not None and spec.kind != only):
            continue
        for name, info in spec.options.model_fields.items():
            out.setdefault(name, (info, []))[1].append(spec.kind)
    return out


def add_options(parser: argparse.ArgumentParser, only: str | None = None) -> None:
    """One flag per option (``--n-iter`` for ``n_iter``): options every analysis reads first, then
    the others grouped under the analyses that read them (``only``: that analysis' flags alone)."""
    from workers.core import registry

    kinds = [s.kind for s in registry.specs() if s.cli and only in (None, s.kind)]
    groups: dict[tuple[str, ...], Any] = {}
    for name, (info, readers) in option_fields(only).items():
        cli = _cli(info)
        if cli.hidden:
            continue
        if len(readers) == len(kinds):
            group: Any = parser
        else:
            key = tuple(readers)
            if key not in groups:
                groups[key] = parser.add_argument_group(f"options of {', '.join(key)}")
            group = groups[key]
        flag = "--" + name.replace("_", "-")
        default = info.get_default()
        shown = "" if default in (None, False) else f" (default: {default})"
        # the CLI's own words first (the notation of --target), else the API schema's description
        help_text = (cli.help or info.description or name.replace("_", " ")) + shown
        kw: dict[str, Any] = {
            "dest": name,
            "default": argparse.SUPPRESS,
            "help": help_text.replace("%", "%%"),
        }
        if info.annotation is bool:
            group.add_argument(flag, action="store_true", **kw)
            continue
        choices = _choices(info.annotation)
        if cli.parse is not None:
            kw["type"] = _parser(cli.parse)
        elif choices is not None:
            kw["choices"] = choices
        else:
            kw["type"] = _scalar(info.annotation)
        if cli.nargs:
            kw["nargs"] = cli.nargs
        if cli.metavar:
            kw["metavar"] = cli.metavar
        group.add_argument(flag, **kw)


def given_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options the command line gave (``--target A`` is one token, ``--target A B`` a pair)."""
    out: dict[str, Any] = {}
    for name, (info, _) in option_fields().items():
        if name in vars(args):
            value = getattr(args, name)
            if _cli(info).one and isinstance(value, list) and len(value) == 1:
                value = value[0]
            out[name] = value
    return out


def checked_options(args: argparse.Namespace, text: str) -> dict[str, Any]:
    """The given options, checked as the API checks them: the contract (limits, then what the
    analysis needs), then what the model's catalogue entry and tokenizer can tell
    (``backend.checks``); a problem is a ``HeadscopeError`` in the API's words, naming the flag."""
    from workers.core import registry
    from workers.core.contracts import LASF_MODELS, AnalysisOptions, check_needs
    from workers.core.errors import HeadscopeError, readable

    opts = given_options(args)
    try:
        checked = AnalysisOptions.model_validate(opts)
    except ValueError as exc:
        raise HeadscopeError(f"bad option: {readable(exc)}") from None
    spec = registry.get(args.analysis)
    model = LASF_MODELS[0] if "lasf_model" in spec.needs else args.model  # a file, for the CLI
    try:
        check_needs(model, [args.analysis], checked)
    except ValueError as exc:
        message = str(exc)
        for name in AnalysisOptions.model_fields:
            message = message.replace(f"options.{name}", "--" + name.replace("_", "-"))
        raise HeadscopeError(message) from None
    if "lasf_model" not in spec.needs:  # a LasF layer may be a file here: its base checks it
        from backend.checks import check_text_request

        check_text_request(
            model=args.model, name=args.model, text=text, kinds=[args.analysis], options=checked
        )
    return opts


def stored_corpora(corpus: str) -> Callable[[str, int], list[str]]:
    """The engine's ``corpora`` over the configured store, once ``corpus`` is known to be there
    (refused with a reason before the model loads otherwise)."""
    from backend.config import get_settings
    from backend.store import Store, StoreUnavailable
    from workers.core.errors import HeadscopeError
    from workers.queue.jobs_corpus import first_texts

    try:
        store = Store(get_settings(), migrate=False)
    except StoreUnavailable as exc:
        raise HeadscopeError(
            f"corpus {corpus} is read from the store, which is unavailable: {exc}"
        ) from None
    if store.corpus_length(corpus) is None:
        raise HeadscopeError(
            f"no corpus with id {corpus!r} in the store at {store.where}; upload it first "
            "(the /corpus page or POST /api/corpora)"
        )
    return lambda ref, n: first_texts(ref, n, store=store)


def read_text(args: argparse.Namespace) -> str:
    from workers.core.errors import BadFileError

    if args.text is not None:
        return args.text  # type: ignore[no-any-return]
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


def flatten(result: dict[str, Any], kind: str) -> dict[str, Any]:
    """The CLI's JSON: the common keys plus the one analysis' section at top level."""
    from workers.core import registry

    section = result[kind]
    kinds = set(registry.kinds())
    common = {k: v for k, v in result.items() if k not in kinds}
    timings = {**common.pop("timings", {}), **section.get("timings", {})}
    return {**common, "analysis": kind, **section, "timings": timings}


def cmd_analyze(args: argparse.Namespace) -> int:
    from workers.core import registry
    from workers.core.errors import EmptyTextError
    from workers.engine.pipeline import analyze
    from workers.models import load_model

    text = read_text(args)
    if not text.strip():
        raise EmptyTextError()
    spec = registry.get(args.analysis)
    lasf_kind = "lasf_model" in spec.needs
    if args.model is None:
        from workers.core.contracts import LASF_MODELS

        args.model = LASF_MODELS[0] if lasf_kind else "minilm"
    options = checked_options(args, text)  # bad options: refused before the model loads
    corpus = str(options.get("corpus", ""))
    if corpus.startswith("cp-"):  # an uploaded corpus (the atlas' probe): from the configured store
        args.corpora = stored_corpora(corpus)  # not there: refused before the model loads
    bar = StderrProgress(args.analysis, enabled=not args.quiet)
    start = time.perf_counter()
    lasf = None
    if lasf_kind:
        from backend.cli.lasf import cli_lasf_model

        lasf = cli_lasf_model(args.model)
    dtype = options.get("dtype", "float32")
    loaded = load_model(
        lasf.config["base_model"] if lasf else args.model, dtype=dtype, device=args.device
    )
    load_s = time.perf_counter() - start
    try:
        result = analyze(
            loaded,
            text,
            [args.analysis],
            options,
            progress=bar,
            lasf=lasf,
            corpora=getattr(args, "corpora", None),  # --corpus cp-...
        )
    finally:
        bar.close()
    out = flatten(result, args.analysis)
    out["timings"]["load_s"] = load_s
    blob = json.dumps(out, indent=None, separators=(",", ":"))
    from workers.core.report import report_lines

    # what it found, in a few lines: on stdout beside a JSON file, on stderr when stdout is the JSON
    report = "\n".join(report_lines(args.analysis, result[args.analysis], out)) + "\n"
    if args.out in (None, "-"):
        sys.stdout.write(blob + "\n")
        if not args.quiet:
            sys.stderr.write(report)
    else:
        Path(args.out).write_text(blob)
        print(f"wrote {args.out} ({len(blob) / 1024:.0f} KiB)", file=sys.stderr)
        sys.stdout.write(report)
    return 0


def analyses_help(specs: list[Any], *, width: int | None = None) -> str:
    """One entry per analysis, its name in a column and its summary wrapped beside it (to the
    terminal's width, as argparse wraps the flags)."""
    if width is None:
        width = min(max(shutil.get_terminal_size().columns - 2, 70), 120)
    column = max(len(s.kind) for s in specs) + 4
    return "\n".join(
        textwrap.fill(
            s.summary,
            width=width,
            initial_indent=f"  {s.kind}".ljust(column),
            subsequent_indent=" " * column,
        )
        for s in specs
    )


def _analysis_kind(kinds: list[str]) -> Any:
    def analysis(value: str) -> str:
        if value not in kinds:
            raise argparse.ArgumentTypeError(
                f"unknown analysis {value!r}; the analyses are listed by headscope analyze --help"
            )
        return value

    return analysis


def add_analyze_command(sub: Any) -> None:
    from workers.core import registry

    specs = [s for s in registry.specs() if s.cli]
    about = analyses_help(specs)
    a = sub.add_parser(
        "analyze",
        help="run one analysis of a text and write JSON",
        description="Run one analysis of a text, write its JSON (docs/results.md) and print a few "
        "lines of what it found.\n\nanalyses:\n" + about,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    a.add_argument(
        "--model",
        default=None,
        help="catalogue name (default: minilm; lasf: lasf-minilm (default), lasf-minilm-paper or a LasF checkpoint file)",
    )
    src = a.add_mutually_exclusive_group()
    src.add_argument("--text-file", help="UTF-8 text file ('-' = stdin); default: the demo text")
    src.add_argument("--text", help="the text itself")
    a.add_argument(
        "--analysis", required=True, type=_analysis_kind([s.kind for s in specs]),
        metavar="ANALYSIS", help="one of the analyses listed above",
    )  # fmt: skip
    a.add_argument(
        "--out",
        help="output JSON path (default: stdout); a few lines of what the analysis found go to "
        "stdout beside a file, to stderr when stdout is the JSON",
    )
    a.add_argument("--device", default=None, help="cpu, cuda, cuda:1 (default: cuda if available)")
    a.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    add_options(a)
    a.set_defaults(func=cmd_analyze)
