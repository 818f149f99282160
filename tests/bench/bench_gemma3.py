"""Benchmark: Gemma 3 270M (18 layers x 4 heads, 262,144-token vocabulary) at n = 256 tokens, ratios of one run.

Run from the repository root::

    PYTHONPATH=. .venv/bin/python -m tests.bench.bench_gemma3 [--tokens 256] [--repeats 3]

Reported (medians of ``--repeats``, in this process, after one untimed warm-up of each):

- a plain eager forward of the base model (no attention kept, no hooks) — the reference;
- the max-attention analysis (streamed forward, every layer's maps reduced on the way) and its
  ratio to the reference (target <= 1.2x);
- the attention-head t-SNE of all 72 heads (the gallery): the t-SNE seconds and the whole analysis;
- the logit lens (every state X[0..18] through the final norm and the 262k-row unembedding, top token
  and the next token's rank and probability) per 8 states, as a ratio to the reference (target <= 2x);
- resident memory (VmRSS, VmHWM) with Gemma 3 loaded, as a worker preloading it.

A shared machine's numbers are noisy: compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import statistics
import time

from tests.bench.bench_smollm2 import ROOT, _rss_mb, _timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import torch

    from workers.analysis.causal import logit_lens, stream
    from workers.analysis.pipeline import analyze
    from workers.analysis.pipeline import warm_up as warm_model
    from workers.analysis.tsne.engines import warm_up as warm_kernels
    from workers.models import load_model
    from workers.models.adapters import encode, model_inputs

    start = time.perf_counter()
    gemma = load_model("gemma3-270m", device="cpu")
    load_s = time.perf_counter() - start
    rss_loaded, _ = _rss_mb()
    tok = gemma.tokenizer
    source = (ROOT / "tests" / "bench" / "bench_text.txt").read_text()
    ids = tok(source, add_special_tokens=False)["input_ids"]
    while len(ids) < args.tokens:
        ids = ids + ids
    text = tok.decode(ids[: args.tokens - 1])  # <bos> makes it n
    enc = encode(gemma, text)
    print(f"Gemma 3 270M, n = {enc.n} tokens, torch threads {torch.get_num_threads()}, load {load_s:.1f} s")
    warm_kernels()
    warm_model(gemma)
    inputs = model_inputs(gemma, enc)

    def plain() -> None:
        with torch.inference_mode():
            gemma.model(**inputs)

    plain()
    fwd, fwd_all = _timed(plain, args.repeats)
    analyze(gemma, text, ["max-attention"])
    ma, ma_all = _timed(lambda: analyze(gemma, text, ["max-attention"]), args.repeats)
    print(f"plain eager forward      {fwd:.3f} s  {[round(t, 3) for t in fwd_all]}")
    print(f"max-attention analysis   {ma:.3f} s  {[round(t, 3) for t in ma_all]}  ratio {ma / fwd:.2f}x (target <= 1.2x)")

    run = stream(gemma, enc)
    logit_lens(gemma, enc, run=run)
    lens, lens_all = _timed(lambda: logit_lens(gemma, enc, run=run), args.repeats)
    states = gemma.n_layers + 1
    per8 = lens * 8 / states
    print(f"logit lens, {states} states  {lens:.3f} s  {[round(t, 3) for t in lens_all]}; per 8 states {per8:.3f} s, "
          f"ratio {per8 / fwd:.2f}x the forward (target <= 2x)")

    tsne, total = [], []
    for k in range(args.repeats):
        s = time.perf_counter()
        res = analyze(gemma, text, ["head-tsne"], {"layer": "all", "head": "all", "seed": k})
        total.append(time.perf_counter() - s)
        tsne.append(float(res["head-tsne"]["timings"].get("tsne_s", float("nan"))))
    print(f"all {res['n_layers'] * res['n_heads']} heads' t-SNE (the gallery): t-SNE {statistics.median(tsne):.2f} s "
          f"{[round(t, 2) for t in tsne]}; whole analysis {statistics.median(total):.2f} s")
    rss, hwm = _rss_mb()
    print(f"resident memory: after loading {rss_loaded:.0f} MB; after the runs {rss:.0f} MB (peak {hwm:.0f} MB); "
          f"the embedding alone {gemma.model.embed_tokens.weight.numel() / 1e6:.0f} M parameters")


if __name__ == "__main__":
    main()
