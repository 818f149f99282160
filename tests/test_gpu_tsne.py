"""The fast engine's device path (issue 11): the Triton round kernel (through Triton's interpreter
on machines without a GPU, compiled on CUDA), the device-side schedule, heads of different lengths
in one launch, and agreement with the CPU engine. CUDA-only checks skip without a GPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_fast_tsne import random_p, reference_steps

from workers.analyses.tsne import TSNEOptions, chain, embed_affinities, engines
from workers.analyses.tsne import gpu_engine as gpu_tsne
from workers.analyses.tsne import host_engine as fast_tsne
from workers.analyses.tsne.affinities import head_affinities, kl_divergence
from workers.analyses.tsne.host_engine import fast_optimize
from workers.analyses.tsne.initialization import spectral_init
from workers.analyses.tsne.options import FastSchedule
from workers.analyses.tsne.schedule import PhasePlan

triton = pytest.importorskip("triton", reason="the gpu extra (Triton) is not installed")
from workers.analyses.tsne import gpu_kernels  # noqa: E402

CUDA = torch.cuda.is_available()
needs_kernel = pytest.mark.skipif(not (CUDA or gpu_kernels.interpreted()),
                                  reason="no CUDA and Triton's interpreter is off (TRITON_INTERPRET)")  # fmt: skip
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
DEVICE = "cuda" if CUDA else "cpu"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_backend_choice():
    assert fast_tsne.pick_backend("auto", torch.device("cpu")) == "numba"
    assert fast_tsne.pick_backend("auto", torch.device("cuda")) == "triton"
    assert fast_tsne.pick_backend("triton", torch.device("cpu")) == "triton"


@needs_kernel
@pytest.mark.parametrize("backend", ["triton", "torch"])
def test_device_rounds_follow_opentsne_update_rule(backend):
    """Both device rounds, heads of 24 and 19 points in one launch: openTSNE's rule to float32."""
    p24 = random_p(1, 24, seed=1)[0]
    p19 = random_p(1, 19, seed=2)[0]
    y24 = np.random.default_rng(3).normal(size=(24, 2))
    y19 = np.random.default_rng(4).normal(size=(19, 2))
    pp, lengths = gpu_tsne.pad([torch.as_tensor(p24), torch.as_tensor(p19)])
    y0 = torch.zeros(2, 24, 2, dtype=torch.float64)
    y0[0], y0[1, :19] = torch.as_tensor(y24), torch.as_tensor(y19)
    ent = gpu_tsne.entropy_device(pp)
    options = TSNEOptions(early_exaggeration_iter=6, n_iter=0, learning_rate=2.0)
    got, used = gpu_tsne.optimize_device(pp.to(DEVICE), y0.to(DEVICE), lengths.to(DEVICE), ent.to(DEVICE),
                                         options=options, schedule=FastSchedule(check_every=6), kind=backend)  # fmt: skip
    assert used.tolist() == [6, 6]
    got = got.cpu().numpy()
    for b, (p, y, n) in enumerate([(p24, y24, 24), (p19, y19, 19)]):
        want = reference_steps(p, y, steps=6, ex=12.0, mom=0.5, lr=2.0)
        np.testing.assert_allclose(got[b, :n], want, rtol=0, atol=1e-4 * np.abs(want).max())
        assert (got[b, n:] == 0).all()  # padding stays out


@needs_kernel
@pytest.mark.parametrize("layout", ["fused", "wide"])
def test_kernel_round_equals_torch_round_and_reports_kl(layout):
    """One round of 10 iterations, mixed lengths and per-head steps (one head idle): each kernel
    layout and the torch round agree on positions, updates, gains, and the KL they report is the
    exact KL of the positions."""
    from workers.analyses.tsne import gpu_kernels

    ps = [torch.as_tensor(random_p(1, n, seed=n)[0]) for n in (40, 33, 17)]
    pp, lengths = gpu_tsne.pad(ps)
    y0 = torch.as_tensor(np.random.default_rng(5).normal(size=(3, 40, 2)) * 0.5)
    states = {}
    for kind in (layout, "torch"):
        st = gpu_tsne.DeviceState(
            pp.to(DEVICE), y0.to(DEVICE), lengths.to(DEVICE), gpu_tsne.entropy_device(pp).to(DEVICE)
        )
        steps = torch.tensor([10, 7, 0], dtype=torch.int32, device=DEVICE)
        ex = torch.tensor([12.0, 1.0, 1.0], device=DEVICE)
        mom = torch.tensor([0.5, 0.8, 0.8], device=DEVICE)
        lr = lengths.to(DEVICE, torch.float32) / ex
        st.kl.fill_(-1.0)
        if kind == "torch":
            gpu_tsne.torch_round(st, steps, ex, mom, lr, 5.0, check_every=10)
        else:
            gpu_kernels.launch(st, steps, ex, mom, lr, 5.0, check_every=10, which=kind)
        states[kind] = st
    a, b = states[layout], states["torch"]
    for name in ("y", "u", "g"):
        x, y = getattr(a, name).cpu(), getattr(b, name).cpu()
        assert (x - y).abs().max() <= 1e-4 * y.abs().max(), name
    y_exact = a.y.transpose(1, 2).double().cpu()
    for h in (0, 1):
        n = int(lengths[h])
        exact = kl_divergence(ps[h].numpy(), y_exact[h, :n].numpy())
        assert a.kl[h].item() == pytest.approx(exact, rel=1e-5)
        assert b.kl[h].item() == pytest.approx(exact, rel=1e-5)
    assert a.kl[2].item() == -1.0 and b.kl[2].item() == -1.0  # an idle head is left alone
    np.testing.assert_array_equal(
        a.y[2, :, :17].cpu().numpy(), y0[2, :17].T.numpy().astype(np.float32)
    )
    assert (a.y[2, :, 17:] == 0).all()


@pytest.mark.slow
def test_kernel_compiles_for_the_h100():
    """The kernel the interpreter runs here also compiles to an sm_90 cubin (Triton's own compiler and
    ptxas, no GPU needed), for each tile size the engine picks, with a real barrier between passes."""
    import os
    import subprocess
    import sys

    code = (
        "from workers.analyses.tsne.gpu_kernels import compile_for\n"
        "for block in (16, 32, 64):\n"
        "    for name, k in compile_for(90, block).items():\n"
        "        ptx = k.asm['ptx']\n"
        "        assert len(k.asm['cubin']) > 0 and ('bar.sync' in ptx or name.startswith('wide_f')), name\n"
        "        print(block, name, len(k.asm['cubin']), ptx.count('bar.sync'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                         cwd=str(__import__("conftest").ROOT))  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(out.stdout.strip().split("\n")) == 12, out.stdout


def test_layout_choice(setting):
    assert (
        gpu_kernels.layout(1, 512, torch.device("cpu")) == "wide"
    )  # one head on demand: spread it
    assert (
        gpu_kernels.layout(512, 2048, torch.device("cpu")) == "fused"
    )  # enough heads for every SM
    setting("HEADSCOPE_TSNE_LAYOUT", "fused")
    assert gpu_kernels.layout(1, 512, torch.device("cpu")) == "fused"
    setting("HEADSCOPE_TSNE_LAYOUT", "sideways")
    with pytest.raises(ValueError, match="HEADSCOPE_TSNE_LAYOUT"):
        gpu_kernels.layout(1, 512, torch.device("cpu"))


@pytest.mark.parametrize(
    "knobs",
    [{}, {"partial_window": True, "main_tol": 2e-2, "settle_tol": 1e-3, "min_settle": 0}],
    ids=["full-window", "partial-window-settle-tol"],
)
def test_device_plan_is_the_host_plan(knobs):
    """Fed the same KL estimates, the device schedule makes every decision the host one does
    (also with the optional rules: partial windows, the main phase's and the settle phase's tolerances)."""
    rng = np.random.default_rng(0)
    options = TSNEOptions(early_exaggeration_iter=120, n_iter=300)
    schedule = FastSchedule(
        check_every=25, window=75, min_early=50, min_main=50, settle_iter=60, **knobs
    )
    batch, n = 6, 30
    host = PhasePlan.make(batch, n, options=options, schedule=schedule)
    st = gpu_tsne.DeviceState(torch.zeros(batch, n, n), torch.zeros(batch, n, 2),
                              torch.full((batch,), n), torch.zeros(batch))  # fmt: skip
    dev = gpu_tsne.DevicePlan.make(st, options=options, schedule=schedule)
    level = np.linspace(1.0, 3.0, batch)
    for _ in range(dev.rounds_bound() + 2):
        steps = dev.steps().numpy()
        want = np.zeros(batch, dtype=np.int64)
        act = host.active
        want[act] = host.steps(schedule.check_every)[act]
        np.testing.assert_array_equal(steps, want)
        ex, mom, lr = (t.numpy() for t in dev.knobs())
        hex_, hmom, hlr = host.per_head()
        np.testing.assert_allclose(ex[act], hex_[act], rtol=1e-6)
        np.testing.assert_allclose(lr[act], hlr[act], rtol=1e-6)
        # some heads plateau (stop early), others keep improving
        level = level * np.where(np.arange(batch) % 2 == 0, 0.999, 0.9) + rng.normal(0, 1e-4, batch)
        kl = torch.as_tensor(level)
        dev.advance(torch.as_tensor(steps, dtype=torch.int32), kl, st.y)
        for k in np.unique(want[act]):
            group = act[want[act] == k]
            host.advance(group, int(k), level[group])
        np.testing.assert_array_equal(dev.phase.numpy(), host.phase)
        np.testing.assert_array_equal(dev.used.numpy(), host.used)
    assert (host.phase == 3).all()
    assert len(set(host.used.tolist())) > 1  # the plateaued heads stopped sooner


@pytest.mark.parametrize("kind", ["torch", pytest.param("triton", marks=needs_kernel)])
def test_device_engine_matches_the_cpu_engine(kind, setting):
    """The whole schedule on the device: same start, KL as good as the CPU engine's, per head
    (the interpreted kernel is slow: a smaller case with shorter phases, the fused layout, for it;
    both layouts' rounds are compared above)."""
    if kind == "triton" and not CUDA:
        setting("HEADSCOPE_TSNE_LAYOUT", "fused")
        p, options = (
            random_p(2, 32, seed=12, sharp=3.0),
            dict(early_exaggeration_iter=60, n_iter=150),
        )
    else:
        p, options = random_p(4, 80, seed=12, sharp=3.0), {}
    y0 = spectral_init(p, seed=0)
    cpu, cpu_used = fast_optimize(
        p, y0, options=TSNEOptions(device="cpu", **options), backend="numba"
    )
    dev, dev_used = fast_optimize(
        p, y0, options=TSNEOptions(device=DEVICE, **options), backend=kind
    )
    k_cpu, k_dev = kl_divergence(p, cpu), kl_divergence(p, dev)
    assert (k_dev <= 1.02 * k_cpu).all(), (k_dev, k_cpu)
    assert (k_dev < kl_divergence(p, y0)).all()
    # the same stopping rule (test_device_plan_is_the_host_plan); float32 sums in another order move
    # the KL trajectory a little, so a head may leave a phase a check earlier or later
    assert abs(int(dev_used.sum()) - int(cpu_used.sum())) <= 0.25 * cpu_used.sum(), (
        dev_used,
        cpu_used,
    )


def test_mixed_lengths_share_a_launch():
    """Texts of different lengths in one batch: each head's map is as good as the one it gets
    alone, its reported KL is its exact KL over its own points, and padding never moves."""
    ps = [random_p(1, n, seed=n, sharp=3.0)[0] for n in (30, 23, 40)]
    pt, lengths = gpu_tsne.pad([torch.as_tensor(q) for q in ps])
    options = TSNEOptions(
        device="cpu", init="random", seed=1, early_exaggeration_iter=100, n_iter=300
    )
    emb, kls = gpu_tsne.embed_device(pt, lengths, options=options, kind="torch")
    for b, q in enumerate(ps):
        n = q.shape[0]
        _, kl_alone = gpu_tsne.embed_device(torch.as_tensor(q)[None], options=options, kind="torch")
        assert kls[0, b].item() <= 1.02 * kl_alone[0, 0].item()
        assert kls[0, b].item() == pytest.approx(kl_divergence(q, emb[0, b, :n].numpy()), rel=1e-10)
        assert (emb[0, b, n:] == 0).all()


def test_layer_on_device_is_the_host_layer():
    """The streamed pipeline's device path for one layer (P built from the maps where they are, the
    spectral start by Lanczos there) gives maps as good as the host path, and the exact KL."""
    from workers.analyses.tsne import embed_layer

    rng = np.random.default_rng(7)
    logits = rng.normal(size=(3, 40, 40)) * 3
    a = np.exp(logits - logits.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    keep = np.ones(40, dtype=bool)
    keep[[0, 39]] = False  # special tokens left out
    options = TSNEOptions(device="cpu")
    host = embed_layer(a, keep=keep, options=options)

    before = chain.install(
        chain.EngineState(
            torch.device(DEVICE), [*chain.default_chain(torch.device(DEVICE), ("torch",))]
        )
    )
    try:  # the torch round (the chain a CPU process has by default is the CPU engine alone)
        dev = engines.embed_layer_on_device(
            torch.as_tensor(a, dtype=torch.float32, device=DEVICE), keep=keep, options=options
        )
    finally:
        chain.install(before)
    assert dev.extra["backend"] == "torch"
    assert dev.embedding.shape == host.embedding.shape == (3, 38, 2)
    p = head_affinities(a, keep=keep)
    np.testing.assert_allclose(dev.kl, kl_divergence(p, dev.embedding), rtol=1e-6)
    assert (dev.kl <= 1.02 * host.kl).all(), (dev.kl, host.kl)


def test_triton_on_cpu_without_the_interpreter_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(gpu_kernels, "interpreted", lambda: False)
    p = random_p(1, 10, seed=3)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        fast_optimize(p, spectral_init(p), options=TSNEOptions(device="cpu", n_iter=5, early_exaggeration_iter=5),
                      backend="triton")  # fmt: skip


@needs_cuda
def test_cuda_engine_end_to_end():
    """On a GPU: P stays on the device, the Triton path with CUDA graphs agrees with the CPU engine."""
    p = random_p(16, 128, seed=11)
    cpu = embed_affinities(p, options=TSNEOptions(engine="fast", device="cpu"))
    gpu = embed_affinities(p, options=TSNEOptions(engine="fast", device="cuda"))
    assert gpu.kl.mean() <= 1.02 * cpu.kl.mean()
    assert (gpu.kl <= 1.3 * cpu.kl).all()
    np.testing.assert_allclose(gpu.kl, kl_divergence(p, gpu.embedding), rtol=1e-9)


@needs_cuda
def test_cuda_p_built_on_the_device():
    a = torch.softmax(torch.randn(3, 40, 40, device="cuda") * 3, dim=-1)
    got = gpu_tsne.head_affinities_device(a).cpu().numpy()
    np.testing.assert_allclose(got, head_affinities(a.cpu().numpy()), rtol=1e-6, atol=1e-12)


@needs_cuda
def test_cuda_streamed_layer_never_builds_p_on_the_host(monkeypatch):
    """A GPU worker's head t-SNE: the layer's maps stay on the device (the host path would fail)."""
    from workers.analyses.tsne import streaming

    monkeypatch.setattr(
        streaming, "embed_layer", lambda *a, **k: pytest.fail("P was built on the host")
    )
    a = torch.softmax(torch.randn(1, 4, 50, 50, device="cuda") * 3, dim=-1)
    consumer = streaming.LayerHeadTSNE(1, 4, options=TSNEOptions(engine="fast"))
    consumer(0, a)
    emb, kl, _, _ = consumer.gather()
    assert emb.shape == (1, 4, 50, 2) and np.isfinite(kl).all()
    p = head_affinities(a[0].double().cpu().numpy())
    np.testing.assert_allclose(kl[0], kl_divergence(p, emb[0]), rtol=1e-6)
