"""``headscope atlas``: the head atlas of a model (docs/atlas.md), JSON out. The atlas analysis of
``headscope analyze`` with its own flags only and no text (an atlas reads a corpus and repeated
random tokens). ``--corpus cp-...`` reads an uploaded corpus from the store this installation is
configured with (``HEADSCOPE_DATABASE_URL``, the one ``headscope serve`` uses)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


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


def cmd_atlas(args: argparse.Namespace) -> int:
    from backend.cli.analyze import cmd_analyze
    from workers.analyses.atlas.spec import ATLAS, ATLAS_TEXT

    args.analysis, args.text, args.text_file = ATLAS, ATLAS_TEXT, None
    corpus = getattr(args, "corpus", "builtin-english")
    if not corpus.startswith("builtin-"):
        args.corpora = stored_corpora(corpus)
    return cmd_analyze(args)


def add_atlas_command(sub: Any) -> None:
    from backend.cli.analyze import add_options
    from workers.analyses.atlas.spec import ATLAS

    a = sub.add_parser(
        ATLAS,
        help="label every head of a model (previous-token, induction, ...) and write JSON",
        description="The head atlas (docs/atlas.md): every head labelled by what it does, with a "
        "95 % interval and, on decoders with a language-model head, ablation evidence.",
    )
    a.add_argument("--model", default="minilm", help="catalogue name (default: minilm)")
    a.add_argument("--out", help="output JSON path (default: stdout)")
    a.add_argument("--device", default=None, help="cpu, cuda, cuda:1 (default: cuda if available)")
    a.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    add_options(a, only=ATLAS)
    a.set_defaults(func=cmd_atlas)
