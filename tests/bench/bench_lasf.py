"""Benchmark: the LasF layer against the MiniLM layer it replaces, and the ``lasf`` analysis.

Run from the repository root::

    PYTHONPATH=. python -m tests.bench.bench_lasf [--repeats 7] [--threads 2] [--full-metrics]

Prints, per text length n (128, 512): median seconds per forward of MiniLM's 6th layer and of the
shipped LasF layer (interleaved rounds, so machine noise hits both alike) and their ratio; the
parameter counts; the time of the whole ``lasf`` analysis (forward, fields, t-SNE of 12 fields,
specialisation test) on a 128-token text. ``--full-metrics`` recomputes the shipped checkpoint's
held-out test metrics on its whole test split and prints them beside the stored ones.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from tests.bench.bench_decomposition import median_seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--full-metrics", action="store_true")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    from workers.analyses.lasf.checkpoint import shipped_path
    from workers.analyses.lasf.fields import load_lasf
    from workers.analyses.lasf.module import n_parameters
    from workers.data import demo_text
    from workers.engine.pipeline import analyze
    from workers.models import encode, load_model

    loaded = load_model("minilm", device="cpu")
    lasf = load_lasf(shipped_path("lasf-minilm"), name="lasf-minilm")
    layer = loaded.model.encoder.layer[5].eval()
    print(
        f"parameters: MiniLM layer 6 {sum(p.numel() for p in layer.parameters()):,}; "
        f"LasF {n_parameters(lasf.module):,} ({lasf.config['mode']}, residual {lasf.config['residual']})"
    )
    print(f"torch threads: {torch.get_num_threads()}")
    for n in (128, 512):
        x = torch.randn(1, n, 384)
        with torch.no_grad():
            jobs = {"minilm-layer": lambda x=x: layer(x)[0], "lasf": lambda x=x: lasf.module(x)}
            t = median_seconds(jobs, repeats=args.repeats)
        print(
            f"n={n}: MiniLM layer {t['minilm-layer'] * 1e3:.2f} ms, LasF {t['lasf'] * 1e3:.2f} ms, "
            f"ratio LasF/layer {t['lasf'] / t['minilm-layer']:.2f}"
        )
    text = " ".join([demo_text()] * 4)
    enc = encode(loaded, text, truncate=True)
    text = loaded.tokenizer.decode(enc.input_ids[1:127])
    start = time.perf_counter()
    res = analyze(loaded, text, ["lasf"], {}, lasf=lasf)
    total = time.perf_counter() - start
    sec = res["lasf"]
    print(
        f"lasf analysis, {res['n_tokens']} tokens: {total:.2f} s (t-SNE {sec['timings']['tsne_s']:.2f} s, "
        f"specialisation {sec['specialisation']['seconds']:.2f} s, first call)"
    )
    start = time.perf_counter()
    analyze(loaded, text, ["lasf"], {}, lasf=lasf)
    print(f"lasf analysis again (specialisation cached): {time.perf_counter() - start:.2f} s")
    if args.full_metrics:
        from workers.analyses.lasf.distil import TEST_SENTENCES_FILE
        from workers.analyses.lasf.train import EVAL_BATCH, evaluate, extract_batches

        path = shipped_path("lasf-minilm")
        sentences = json.loads((path / TEST_SENTENCES_FILE).read_text())
        batches = extract_batches(
            loaded,
            sentences,
            layer=5,
            batch_size=EVAL_BATCH,
            max_tokens=lasf.config["train"]["max_tokens"],
            sort=False,
        )
        got = evaluate(lasf.module, batches)
        print(f"held-out test, recomputed: {json.dumps({k: round(v, 4) for k, v in got.items()})}")
        print(f"held-out test, stored:     {json.dumps(lasf.config['metrics']['test']['lasf'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
