"""``headscope atlas``: the head atlas of a model (docs/atlas.md), JSON out. The atlas analysis of
``headscope analyze`` with its own flags only and no text (an atlas reads a corpus and repeated
random tokens). ``--corpus cp-...`` reads an uploaded corpus from the store this installation is
configured with (``HEADSCOPE_DATABASE_URL``, the one ``headscope serve`` uses;
``backend.cli.analyze.stored_corpora``)."""

from __future__ import annotations

import argparse
from typing import Any


def cmd_atlas(args: argparse.Namespace) -> int:
    from backend.cli.analyze import cmd_analyze
    from workers.analyses.atlas.spec import ATLAS, ATLAS_TEXT

    args.analysis, args.text, args.text_file = ATLAS, ATLAS_TEXT, None
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
