"""``python -m workers.models.convert``: convert the built-in GGUF models into the model cache now
(a setup step, ``make models``); otherwise the first worker that loads one converts it. Above both
the catalogue (which names the models) and ``gguf`` (which converts)."""

from __future__ import annotations

import logging
import time

from workers.core.errors import HeadscopeError
from workers.models.catalogue import BUILTIN
from workers.models.gguf import GGUFPackage, converted_dir


def main(argv: list[str] | None = None) -> int:
    """``python -m workers.models.convert [NAME ...]``: convert built-in GGUF models now (setup step)."""
    import argparse

    parser = argparse.ArgumentParser(
        description="Convert the built-in GGUF models into the model cache."
    )
    gguf_names = [n for n, s in BUILTIN.items() if s.source == "gguf"]
    parser.add_argument(
        "names", nargs="*", default=gguf_names, help=f"default: {' '.join(gguf_names)}"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name in args.names:
        spec = BUILTIN.get(name)
        if spec is None or spec.source != "gguf":
            parser.error(
                f"{name} is not a built-in GGUF model; choose from {', '.join(gguf_names)}"
            )
        try:
            start = time.perf_counter()
            where = converted_dir(name, GGUFPackage.parse(spec.location))
        except HeadscopeError as exc:
            print(f"error: {exc}")
            return 1
        print(f"{name}: {where} ({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
