"""Benchmark: the causal views (issue 23) against a plain forward pass measured in the same run.

Run from the repository root::

    PYTHONPATH=. python -m tests.bench.bench_causal [--model smollm2] [--model-dir DIR] [--tokens 128]
        [--patch-tokens 16] [--repeats 3] [--threads 2]

``--model-dir`` registers a local Hugging Face directory (e.g. SmolLM2 converted from its GGUF) as the
model; without it ``--model`` names a catalogue entry. Targets on SmolLM2 with 2 cores: logit
attribution <= 1.5x the decomposition; ablating each of the 270 heads in turn at n = 128 <= 30 s;
patching every layer x position at n = 16 <= 10 s. Each figure is printed with its ratio to the
plain forward of the same text (eager attention, hidden states on), timed interleaved with the
cheap jobs so machine noise hits them alike.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from tests.bench.bench_decomposition import median_seconds


def _text_of(loaded, tokens: int):
    """The demo text's first ``tokens`` tokens (exactly: the encoding of a longer text, cut)."""
    from workers.data import demo_text
    from workers.models import encode
    from workers.models.adapters import Encoded

    text = " ".join([demo_text()] * 8)
    enc = encode(loaded, text, truncate=True)
    if enc.n < tokens:
        raise SystemExit(f"the demo text has fewer than {tokens} tokens for {loaded.name}")
    cut = Encoded(
        enc.input_ids[:tokens], enc.tokens[:tokens], enc.offsets[:tokens], enc.special[:tokens]
    )
    return text[: cut.offsets[-1][1]], cut


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2")
    parser.add_argument(
        "--model-dir", default=None, help="a local model directory to register as --model"
    )
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--patch-tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--glibc-defaults",
        action="store_true",
        help="leave glibc's heap settings (workers and the CLI keep freed memory: workers/models/allocator.py)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from workers.models.allocator import keep_freed_memory

    kept = False if args.glibc_defaults else keep_freed_memory()
    print(
        f"heap: {'freed blocks kept for reuse (workers/models/allocator.py)' if kept else 'glibc defaults'}"
    )

    from workers.analyses.causal.interventions import ablation, patching
    from workers.analyses.causal.views import logit_attribution, logit_lens, predictions
    from workers.analyses.decomposition import decompose_encoded
    from workers.models import Catalogue, ModelSpec, load_model
    from workers.models.adapters import model_inputs

    cat = None
    if args.model_dir:
        cat = Catalogue()
        cat.register(ModelSpec(args.model, "local", args.model_dir, "benchmark"))
    start = time.perf_counter()
    loaded = load_model(args.model, dtype=args.dtype, device=args.device, catalogue=cat)
    print(
        f"model {args.model} ({loaded.family}, {loaded.n_layers} layers x {loaded.n_heads} heads, "
        f"{loaded.dtype}) loaded in {time.perf_counter() - start:.1f} s; torch threads {torch.get_num_threads()}"
    )
    text, enc = _text_of(loaded, args.tokens)
    inputs = model_inputs(loaded, enc)

    def forward() -> None:
        with torch.inference_mode():
            loaded.model(**inputs, output_hidden_states=True)

    jobs = {
        "forward": forward,
        "decomposition": lambda: decompose_encoded(loaded, [enc], [text], keep_components=False),
        "logit-attribution": lambda: logit_attribution(loaded, enc),
        "predictions": lambda: predictions(loaded, enc, k=10),
        "logit-lens": lambda: logit_lens(loaded, enc),
    }
    med = median_seconds(jobs, repeats=args.repeats)
    fwd = med["forward"]
    print(f"n = {enc.n} tokens")
    for name, s in med.items():
        print(f"  {name:<18} {s * 1000:8.1f} ms  {s / fwd:6.2f}x forward")
    print(
        f"  logit-attribution / decomposition: {med['logit-attribution'] / med['decomposition']:.2f} (target <= 1.5)"
    )

    start = time.perf_counter()
    abl = ablation(loaded, enc, heads=None, mode="mean")
    s = time.perf_counter() - start
    heads = loaded.n_layers * loaded.n_heads
    print(
        f"  ablation, each of {heads} heads in turn: {s:.1f} s = {s / fwd:.0f}x forward (target <= 30 s); "
        f"largest |effect| {abs(abl['map']).max():.3f}"
    )

    ptext, penc = _text_of(loaded, args.patch_tokens)
    ids = list(penc.input_ids)
    # the first real token: the worst case, every position from it on differs (patching reuses the
    # corrupted run's keys and values only before the patched position)
    swap = next(i for i in range(len(ids)) if not penc.special[i])
    ids[swap] = (ids[swap] + 1) % loaded.unembed.vocab_size
    from workers.models.adapters import Encoded

    corrupted = Encoded(ids, penc.tokens, penc.offsets, penc.special)
    pf = median_seconds(
        {"forward": lambda: loaded.model(**model_inputs(loaded, penc))}, repeats=args.repeats
    )["forward"]
    start = time.perf_counter()
    pat = patching(loaded, penc, corrupted, target=[int(ids[-1]), int(ids[-2])])
    s = time.perf_counter() - start
    print(
        f"  patching at n = {penc.n}: {loaded.n_layers + 1} x {penc.n} residual + {heads} heads: {s:.1f} s "
        f"= {s / pf:.0f}x its forward ({pf * 1000:.0f} ms) (target <= 10 s); restored at the last stream "
        f"{pat['residual'][-1][-1]:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
