"""Benchmark: Gemma 3 270M (18 layers x 4 heads, 262,144-token vocabulary) at n = 256 tokens, ratios of one run.

Run from the repository root::

    PYTHONPATH=. .venv/bin/python -m tests.bench.bench_gemma3 [--tokens 256] [--repeats 3] [--threads 1] [--skip-tsne]

Reported (medians of ``--repeats``, in this process, after one untimed warm-up of each), as wall-clock
seconds and as this process's CPU seconds (``time.process_time``: on a machine shared with other
work, and with one thread, the CPU seconds are the work itself; the wall clock also counts waiting):

- references: a plain eager forward of the base model (no attention kept, no hooks, **no logits**)
  and the language model's forward as ``Gemma3ForCausalLM`` runs it by default (the base forward and
  the logits of **every** position, ``[n, 262144]``), and with the logits of the last position only
  (as generation does);
- the max-attention analysis (streamed forward, every layer's maps reduced on the way) and its
  ratio to the reference (target <= 1.2x);
- the logit lens (every state X[0..18] through the final norm and the 262k-row unembedding: top
  token, the next token's rank and probability) per 8 states, as a ratio to the base forward (target
  <= 2x) and to the forward with every position's logits; beside it, the bare float32 product
  ``[n, 640] x [640, 262144]`` of one state, the arithmetic the lens cannot skip, times 19; and the
  lens of one position (its 19 states as residual vectors ``X[l]_t``, what a click on a position
  reads) per 8 states, beside the cost of one float64 copy of ``W_U`` that the lens never makes;
- the attention-head t-SNE of all 72 heads (the gallery): the t-SNE seconds and the whole analysis;
- resident memory (VmRSS) with Gemma 3 loaded, and the peak (VmHWM, reset before each step through
  ``/proc/self/clear_refs``) of the lens, the predictions and the gallery, as a worker would see them.

A shared machine's numbers are noisy: compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import statistics
import time

from tests.bench.bench_smollm2 import ROOT, _rss_mb
from tests.bench.bench_tsne import _reset_peak


def _timed2(fn, repeats: int) -> tuple[float, float, list[float]]:
    """Median wall-clock and CPU seconds of ``repeats`` calls (after the caller's warm-up)."""
    wall, cpu = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), statistics.median(cpu), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--skip-tsne", action="store_true", help="leave out the gallery's t-SNE")
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    from workers.analyses.causal.views import final_norm, logit_lens, predictions, stream
    from workers.analyses.tsne.engines import warm_up as warm_kernels
    from workers.engine.pipeline import analyze
    from workers.engine.pipeline import warm_up as warm_model
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
    states = gemma.n_layers + 1
    unembed = gemma.unembed
    assert unembed is not None
    print(
        f"Gemma 3 270M, n = {enc.n} tokens, torch threads {torch.get_num_threads()}, load {load_s:.1f} s"
    )
    warm_kernels()
    warm_model(gemma)
    if (
        args.threads
    ):  # numba's OpenMP layer (the t-SNE kernels' warm-up) resets the shared OpenMP pool
        torch.set_num_threads(args.threads)
    inputs = model_inputs(gemma, enc)

    def plain() -> None:
        with torch.inference_mode():
            gemma.model(**inputs)

    def lm_every() -> None:
        with torch.inference_mode():
            unembed.logits(gemma.model(**inputs).last_hidden_state[0])

    def lm_last() -> None:
        with torch.inference_mode():
            unembed.logits(gemma.model(**inputs).last_hidden_state[0, -1:])

    run = stream(gemma, enc)
    with torch.inference_mode():
        one = final_norm(gemma)(run.states[-1]).contiguous()  # [n, 640]

    def gemm() -> None:
        with torch.inference_mode():
            one @ unembed.weight.T

    rows = {}
    for name, fn in [
        ("plain forward (no logits)", plain),
        ("forward + logits, every position", lm_every),
        ("forward + logits, last position", lm_last),
        ("one state's [n x 262144] product", gemm),
    ]:
        fn()
        rows[name] = _timed2(fn, args.repeats)
    fwd_w, fwd_c, _ = rows["plain forward (no logits)"]
    every_w, every_c, _ = rows["forward + logits, every position"]
    for name, (w, c, all_w) in rows.items():
        print(
            f"{name:34s} {w:.3f} s wall {[round(t, 3) for t in all_w]}, {c:.3f} s CPU  "
            f"({w / fwd_w:.2f}x / {c / fwd_c:.2f}x the plain forward)"
        )
    gw, gc, _ = rows["one state's [n x 262144] product"]
    print(
        f"  the lens's products alone, per 8 states: {gw * 8 / fwd_w:.2f}x wall, {gc * 8 / fwd_c:.2f}x CPU"
    )

    analyze(gemma, text, ["max-attention"])
    ma_w, ma_c, ma_all = _timed2(lambda: analyze(gemma, text, ["max-attention"]), args.repeats)
    print(
        f"max-attention analysis             {ma_w:.3f} s wall {[round(t, 3) for t in ma_all]}, {ma_c:.3f} s CPU; "
        f"ratio {ma_w / fwd_w:.2f}x wall, {ma_c / fwd_c:.2f}x CPU (target <= 1.2x)"
    )

    _reset_peak()
    base, _ = _rss_mb()
    logit_lens(gemma, enc, run=run)
    _, lens_peak = _rss_mb()
    lw, lc, l_all = _timed2(lambda: logit_lens(gemma, enc, run=run), args.repeats)
    pw, pc = lw * 8 / states, lc * 8 / states
    print(
        f"logit lens, {states} states            {lw:.3f} s wall {[round(t, 3) for t in l_all]}, {lc:.3f} s CPU; "
        f"per 8 states {pw:.3f} s wall, {pc:.3f} s CPU"
    )
    print(
        f"  per 8 states: {pw / fwd_w:.2f}x wall, {pc / fwd_c:.2f}x CPU the plain forward (target <= 2x); "
        f"{pw / every_w:.2f}x wall, {pc / every_c:.2f}x CPU the forward with every position's logits"
    )
    print(
        f"  peak resident memory during the lens: {lens_peak:.0f} MB ({lens_peak - base:+.0f} MB over {base:.0f} MB)"
    )
    # a state read as one residual vector (one position of X[l]): the lens of the last position, its 19 states
    last = [enc.n - 1]
    logit_lens(gemma, enc, run=run, positions=last)
    vw, vc, v_all = _timed2(lambda: logit_lens(gemma, enc, run=run, positions=last), args.repeats)
    print(
        f"logit lens of one position, {states} states (residual vectors) {vw:.3f} s wall {[round(t, 3) for t in v_all]}, "
        f"{vc:.3f} s CPU; per 8 states {vw * 8 / states / fwd_w:.2f}x wall, {vc * 8 / states / fwd_c:.2f}x CPU "
        f"the plain forward (target <= 2x)"
    )

    def copy64() -> None:
        unembed.weight.double()

    copy64()
    cw, cc, _ = _timed2(copy64, args.repeats)
    print(
        f"  for scale: one float64 copy of W_U [262144 x 640] (which the lens never makes) {cw:.3f} s wall, "
        f"{cw / fwd_w:.2f}x the plain forward"
    )
    _reset_peak()
    base, _ = _rss_mb()
    predictions(gemma, enc, k=10, run=run)
    _, pred_peak = _rss_mb()
    print(
        f"  peak resident memory during predictions (k = 10): {pred_peak:.0f} MB ({pred_peak - base:+.0f} MB)"
    )

    if not args.skip_tsne:
        tsne, total = [], []
        _reset_peak()
        for k in range(args.repeats):
            s = time.perf_counter()
            res = analyze(gemma, text, ["head-tsne"], {"layer": "all", "head": "all", "seed": k})
            total.append(time.perf_counter() - s)
            tsne.append(float(res["head-tsne"]["timings"].get("tsne_s", float("nan"))))
        _, gal_peak = _rss_mb()
        print(
            f"all {res['n_layers'] * res['n_heads']} heads' t-SNE (the gallery): t-SNE {statistics.median(tsne):.2f} s "
            f"{[round(t, 2) for t in tsne]}; whole analysis {statistics.median(total):.2f} s; peak {gal_peak:.0f} MB"
        )
    rss, hwm = _rss_mb()
    print(
        f"resident memory: after loading {rss_loaded:.0f} MB; after the runs {rss:.0f} MB; "
        f"the embedding alone {gemma.model.embed_tokens.weight.numel() / 1e6:.0f} M parameters"
    )


if __name__ == "__main__":
    main()
