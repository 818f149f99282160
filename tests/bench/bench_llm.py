"""Benchmark: a Llama-3.2-1B-shaped model (random weights, built from LlamaConfig, nothing downloaded)
on texts of n = 512, 1024, 2048 tokens: seconds and peak resident memory of

- ``forward``: the plain streamed forward pass (hidden states kept, attention maps dropped),
- ``max-attention``: the pipeline's max/mean attention (reduced layer by layer),
- ``decomposition``: the exact term decomposition in float32 (importances, per-head included),
- ``head-tsne-all``: t-SNE of every head (512 of them), fast engine, layer by layer,

each as a ratio to the forward pass of the same run. The model is built once (~5 GB in float32).
Peak memory: the process' resident set sampled every 10 ms during each view (``peak_rss``), and the
increase over the resident set before it (``delta``). The memory estimate the pipeline checks before
starting is printed beside it.

Run from the repository root::

    PYTHONPATH=. python -m tests.bench.bench_llm [--n 512 1024 2048] [--views ...] [--device cpu]

t-SNE of 512 heads at n = 2048 runs for a long time on a small CPU: ``--views`` picks the views,
``--tsne-iter`` shortens the schedule (reported).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

LLAMA_1B = dict(
    vocab_size=128_256,
    hidden_size=2048,
    intermediate_size=8192,
    num_hidden_layers=16,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=64,
    max_position_embeddings=131_072,
    rms_norm_eps=1e-5,
    rope_theta=500_000.0,
    tie_word_embeddings=True,
    bos_token_id=1,
    eos_token_id=2,
)
VIEWS = ("forward", "max-attention", "decomposition", "head-tsne-all")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


class PeakRSS:
    """Samples the resident set every ``every_s`` seconds inside a ``with`` block."""

    def __init__(self, every_s: float = 0.01):
        self.every_s, self.peak, self.start = every_s, 0, 0
        self._stop = threading.Event()

    def __enter__(self) -> PeakRSS:
        gc.collect()
        self.start = self.peak = rss_bytes()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.peak = max(self.peak, rss_bytes())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())


def build(device: str):
    """The 1B-shaped LlamaModel (random, float32, eager) wrapped as a LoadedModel."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaModel, PreTrainedTokenizerFast

    from workers.data import demo_text
    from workers.models.catalogue import ModelSpec
    from workers.models.families import family_of
    from workers.models.loader import LoadedModel

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        [demo_text()],
        trainer=trainers.BpeTrainer(
            vocab_size=2000,
            special_tokens=["<pad>", "<s>", "</s>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    bpe.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    cfg = LlamaConfig(**LLAMA_1B)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    start = time.perf_counter()
    with torch.device(device):
        model = LlamaModel(cfg).eval()
    built_s = time.perf_counter() - start
    spec = ModelSpec("llama-1b-shaped", "local", "(random)", "Llama-3.2-1B shape, random weights")
    loaded = LoadedModel(
        name=spec.name,
        spec=spec,
        model=model,
        tokenizer=tok,
        family="llama",
        device=torch.device(device),
        dtype=torch.float32,
        config=cfg.to_dict(),
        n_layers=16,
        n_heads=32,
        max_length=131_072,
        arch=family_of("llama"),
        n_kv_heads=8,
    )
    return loaded, built_s


def long_text(loaded: Any, n: int) -> str:
    """A text of at least ``n`` tokens; the runs cut it to ``n`` with ``truncate``."""
    from workers.data import demo_text

    text = demo_text()
    while len(loaded.tokenizer(text)["input_ids"]) < n:
        text = text + " " + demo_text()
    return text


def measure(fn: Callable[[], object]) -> dict[str, float]:
    """Seconds, peak resident set, its increase; on CUDA also the peak of allocated GPU memory."""
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    with PeakRSS() as mem:
        start = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        secs = time.perf_counter() - start
    out = {"s": secs, "peak_rss_gib": mem.peak / 2**30, "delta_gib": (mem.peak - mem.start) / 2**30}
    if cuda:
        out["cuda_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument("--views", nargs="+", default=list(VIEWS), choices=VIEWS)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--tsne-iter",
        type=int,
        nargs=2,
        default=[250, 750],
        metavar=("EARLY", "MAIN"),
        help="t-SNE iteration caps (early exaggeration, main); openTSNE's 250 750 by default",
    )
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)

    from workers.engine.memory import ModelFacts, estimate_text_request
    from workers.engine.pipeline import analyze
    from workers.models.adapters import encode, forward_streamed

    loaded, built_s = build(args.device)
    print(
        f"built the 1B-shaped Llama ({loaded.n_params / 1e9:.2f} B parameters) in {built_s:.0f} s; "
        f"resident {rss_bytes() / 2**30:.1f} GiB; torch threads {torch.get_num_threads()}",
        flush=True,
    )
    facts = ModelFacts.of(loaded)
    tsne = {
        "early_exaggeration_iter": args.tsne_iter[0],
        "n_iter": args.tsne_iter[1],
        "engine": "fast",
    }
    jobs: dict[str, tuple[list[str], dict[str, Any]]] = {
        "max-attention": (["max-attention"], {}),
        "decomposition": (["decomposition"], {"dtype": "float32"}),
        "head-tsne-all": (["head-tsne"], tsne),
    }
    rows = []
    forward_s: dict[int, float] = {}
    views = [v for v in VIEWS if v in args.views]
    for view in views:  # every n of a view before the next view: the slow t-SNE comes last
        for n in args.n:
            loaded.max_length = n  # the text is cut to exactly n tokens (BOS included)
            text = long_text(loaded, n)
            enc = encode(loaded, text, truncate=True)
            assert enc.n == n, (enc.n, n)
            if view == "forward":
                r = measure(lambda enc=enc: forward_streamed(loaded, enc, lambda layer, w: None))
                est = estimate_text_request(facts, n, [], {})
                forward_s[n] = r["s"]
            else:
                kinds, opts = jobs[view]
                opts = {**opts, "truncate": True}
                r = measure(
                    lambda kinds=kinds, opts=opts, text=text: analyze(loaded, text, kinds, opts)
                )
                est = estimate_text_request(facts, n, kinds, {**opts, "dtype": "float32"})
            r["estimate_gib"] = est.total / 2**30
            ref = forward_s.get(n)
            ratio = f"{r['s'] / ref:7.1f}x" if ref else "    n/a"
            print(
                f"n={n:5d} {view:14s} {r['s']:9.2f} s {ratio}  peak RSS {r['peak_rss_gib']:5.2f} GiB "
                f"(+{r['delta_gib']:5.2f})  estimate {r['estimate_gib']:5.2f} GiB",
                flush=True,
            )
            rows.append(
                {"n": n, "view": view, **r, "ratio_to_forward": (r["s"] / ref) if ref else None}
            )
            gc.collect()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"device": args.device, "tsne_iter": args.tsne_iter, "rows": rows}, f, indent=1
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
