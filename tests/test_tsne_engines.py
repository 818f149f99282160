"""A t-SNE engine that cannot fail blind (issue 20), on CPU: the start's self-check runs the real
rounds (Triton through its interpreter, the torch round on a CPU device) against the CPU engine, and
injected faults (``tsne_chain.Fault``) -- a compile that fails, a launch that raises, a device that
reports a sticky error -- leave each analysis correct, with the engine that ran recorded."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workers.analyses.tsne import TSNEOptions, TSNEResult, embed_affinities, embed_layer, engines
from workers.analyses.tsne import chain as tsne_chain
from workers.analyses.tsne import gpu_engine as gpu_tsne
from workers.analyses.tsne.affinities import head_affinities, kl_divergence
from workers.analyses.tsne.chain import DeviceLost, EngineState, Fault
from workers.core.errors import HeadscopeError

pytestmark = pytest.mark.usefixtures("one_torch_thread")
CPU = torch.device("cpu")
ALL = ("triton-fused", "triton-wide", "torch")
TEXT = "The quick brown fox jumps over the lazy dog while the cat watches from the old stone wall."


@pytest.fixture(autouse=True)
def fresh_engines():
    """Every test starts from the process defaults and leaves them so."""
    before = tsne_chain.install(None)
    yield
    tsne_chain.install(before)


def chain(*names: str, fault: str | None = None) -> EngineState:
    """Install ``names`` (then cpu) as this process' engines on the CPU device, with a fault."""
    state = EngineState(CPU, [*names, "cpu"], fault=Fault.parse(fault))
    tsne_chain.install(state)
    return state


def attention(heads: int, n: int, *, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(heads, n, n)) * 3
    a = np.exp(logits - logits.max(-1, keepdims=True))
    return a / a.sum(-1, keepdims=True)


# ---------------------------------------------------------------------------- the self-check


def test_self_check_runs_every_round_and_passes_them():
    pytest.importorskip("triton")
    from workers.analyses.tsne import gpu_kernels

    if not gpu_kernels.interpreted():
        pytest.skip("Triton's interpreter is off (TRITON_INTERPRET)")
    report = engines.self_check(CPU, ALL)
    assert report.passed == list(ALL) and report.failed == {} and report.lost is None
    assert tsne_chain.describe(report.state()) == "triton"
    assert report.line().startswith("t-SNE engine on cpu: triton (self-check ")


def test_self_check_rejects_a_round_that_computes_wrong(monkeypatch):
    """A round whose steps are wrong (here: half the learning rate) or not finite fails the check."""
    real = gpu_tsne.torch_round
    monkeypatch.setattr(
        gpu_tsne,
        "torch_round",
        lambda st, steps, ex, mom, lr, *a, **k: real(st, steps, ex, mom, lr * 0.02, *a, **k),
    )
    report = engines.self_check(CPU, ("torch",))
    assert report.passed == [] and "over 1.02x" in report.failed["torch"], report

    def nan_round(st, *a, **k):
        real(st, *a, **k)
        st.y[0, 0, 0] = float("nan")

    monkeypatch.setattr(gpu_tsne, "torch_round", nan_round)
    report = engines.self_check(CPU, ("torch",))
    assert report.failed == {"torch": "non-finite positions"}
    assert tsne_chain.describe(report.state()) == "cpu: torch failed: non-finite positions"


def test_compile_fault_fails_the_check_and_health_says_why():
    report = engines.self_check(CPU, ALL, fault=Fault.parse("compile"))
    assert report.passed == ["torch"]
    assert report.failed == {
        "triton-fused": "no C compiler (injected)",
        "triton-wide": "no C compiler (injected)",
    }
    assert tsne_chain.describe(report.state()) == "torch: triton failed: no C compiler (injected)"
    report = engines.self_check(CPU, ("torch",), fault=Fault.parse("compile@torch"))
    assert tsne_chain.describe(report.state()) == "cpu: torch failed: no C compiler (injected)"


def test_launch_and_fatal_faults_spare_the_check():
    """They model a job's failure (a size the check does not run, a kernel bug it does not hit)."""
    for fault in ("launch@torch", "fatal@torch"):
        assert engines.self_check(CPU, ("torch",), fault=Fault.parse(fault)).passed == ["torch"]
    assert tsne_chain.lost() is None


def test_fault_and_engine_settings_are_checked():
    assert Fault.parse("launch@torch") == Fault("launch", "torch") and Fault.parse("") is None
    with pytest.raises(ValueError, match="HEADSCOPE_TSNE_FAULT"):
        Fault.parse("melt")
    assert (
        engines.parse_candidates(None, CPU) == ()
        and engines.parse_candidates(None, torch.device("cuda")) == ALL
    )
    assert engines.parse_candidates("torch, cpu", CPU) == ("torch",)
    with pytest.raises(ValueError, match="HEADSCOPE_TSNE_ENGINES"):
        engines.parse_candidates("cuda-magic", CPU)


def test_sticky_errors_are_fatal_others_are_not():
    assert tsne_chain.is_fatal(
        RuntimeError("CUDA error: an illegal memory access was encountered"), CPU
    )
    assert not tsne_chain.is_fatal(RuntimeError("out of resources: shared memory"), CPU)


# ---------------------------------------------------------------------------- falling back per job


def reference_layer(a: np.ndarray, options: TSNEOptions) -> TSNEResult:
    """The layer on the torch round alone (no fault): what a fallback to torch must give, bit for bit."""
    chain("torch")
    ref = engines.embed_layer_on_device(
        torch.as_tensor(a, dtype=torch.float32), keep=None, options=options
    )
    tsne_chain.install(None)
    return ref


@pytest.mark.parametrize("fault", ["launch", "compile"])
def test_a_failing_triton_round_gives_way_to_torch(fault):
    """A job whose Triton round raises (the self-check did not see it) is embedded by the torch round:
    the same maps as the torch round alone, the engine and the reason recorded."""
    a = attention(3, 24, seed=1)
    options = TSNEOptions(device="cpu", early_exaggeration_iter=60, n_iter=150)
    ref = reference_layer(a, options)
    chain("triton-fused", "triton-wide", "torch", fault=fault)
    got = engines.embed_layer_on_device(
        torch.as_tensor(a, dtype=torch.float32), keep=None, options=options
    )
    why = (
        "no C compiler (injected)"
        if fault == "compile"
        else "triton launch failed: out of resources"
    )
    assert got.extra["backend"] == "torch" and got.extra["fallback"][0].startswith(
        f"triton failed: {why}"
    )
    np.testing.assert_array_equal(got.embedding, ref.embedding)
    np.testing.assert_array_equal(got.kl, ref.kl)
    np.testing.assert_allclose(
        got.kl, kl_divergence(head_affinities(a), got.embedding), rtol=1e-6
    )  # float32 maps


def test_every_device_round_failing_ends_on_the_cpu_engine():
    a = attention(2, 20, seed=2)
    options = TSNEOptions(device="cpu")
    chain("torch", fault="launch@torch")
    got = engines.embed_layer_on_device(
        torch.as_tensor(a, dtype=torch.float32), keep=None, options=options
    )
    assert got.extra["backend"] == "cpu" and got.extra["fallback"] == [
        "torch failed: torch launch failed: out of resources (injected by HEADSCOPE_TSNE_FAULT)"
    ]
    tsne_chain.install(None)
    a32 = a.astype(np.float32).astype(np.float64)  # the maps the device path had
    host = embed_layer(a32, keep=None, options=options)  # the CPU engine's own path
    np.testing.assert_allclose(got.embedding, host.embedding, rtol=0, atol=1e-9)


def test_a_fatal_error_stops_the_device_and_the_retry_skips_the_engine():
    a = attention(2, 20, seed=3)
    options = TSNEOptions(device="cpu", early_exaggeration_iter=60, n_iter=150)
    ref = reference_layer(a, options)
    chain("triton-wide", "torch", fault="fatal")
    with pytest.raises(DeviceLost) as lost:
        engines.embed_layer_on_device(
            torch.as_tensor(a, dtype=torch.float32), keep=None, options=options
        )
    assert lost.value.engine == "triton-wide" and "illegal memory access" in lost.value.why
    assert "illegal memory access" in tsne_chain.lost() and tsne_chain.chain_for(CPU) == ["cpu"]
    assert "device lost: triton-wide: CUDA error" in tsne_chain.describe()
    # a fresh worker (same engines, same fault) retries the job without the engine that lost the device
    chain("triton-wide", "torch", fault="fatal")
    with tsne_chain.avoiding(["triton-wide"], notes=("triton-wide failed: CUDA error",)):
        got = engines.embed_layer_on_device(
            torch.as_tensor(a, dtype=torch.float32), keep=None, options=options
        )
    assert got.extra["backend"] == "torch" and got.extra["fallback"] == [
        "triton-wide failed: CUDA error"
    ]
    np.testing.assert_array_equal(got.embedding, ref.embedding)
    assert tsne_chain.lost() is None


# ---------------------------------------------------------------------------- the device path's inputs


def test_pca_start_on_the_device_path():
    """``init="pca"`` gets the data points on the device path too (it used to drop them)."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(30, 5))
    d2 = ((x[:, None] - x[None]) ** 2).sum(-1)
    p = np.exp(-d2)
    np.fill_diagonal(p, 0)
    p /= p.sum()
    options = TSNEOptions(device="cpu", init="pca", early_exaggeration_iter=60, n_iter=200)
    host = embed_affinities(p, options=options, x=x)
    chain("torch")
    dev = embed_affinities(p, options=options, x=x)
    assert dev.extra["backend"] == "torch" and host.extra["backend"] == "cpu"
    assert dev.kl[0] <= 1.02 * host.kl[0]
    with pytest.raises(HeadscopeError, match="pca initialisation needs the data points"):
        embed_affinities(p, options=options)


def test_device_path_refuses_what_the_cpu_path_refuses():
    chain("torch")
    options = TSNEOptions(device="cpu")
    eye = torch.eye(6)[None].repeat(2, 1, 1)  # every token attends only to itself
    with pytest.raises(HeadscopeError, match="all its weight on the diagonal") as dev:
        engines.embed_layer_on_device(eye, keep=None, options=options)
    with pytest.raises(HeadscopeError) as host:
        head_affinities(eye.numpy())
    assert str(dev.value) == str(host.value)
    with pytest.raises(HeadscopeError, match="at least 3 points"):
        engines.embed_layer_on_device(torch.full((1, 2, 2), 0.5), keep=None, options=options)
    with pytest.raises(HeadscopeError, match="at least 3 tokens"):
        engines.embed_layer_on_device(
            torch.full((1, 5, 5), 0.2), keep=np.array([1, 1, 0, 0, 0], bool), options=options
        )
    with pytest.raises(HeadscopeError, match="P is all zero"):
        gpu_tsne.embed_device(torch.zeros(1, 5, 5), options=options, kind="torch")


# ---------------------------------------------------------------------------- a whole request


def test_a_request_stays_correct_when_the_device_round_fails(catalogue):
    """The streamed pipeline: the t-SNE fails inside the forward hook; max attention of the same
    request is untouched and the head t-SNE is the torch round's, with the engine recorded."""
    from workers.engine.pipeline import analyze
    from workers.models import load_model

    model = load_model("tiny-bert", device="cpu")
    opts = {"n_iter": 150, "early_exaggeration_iter": 60}
    chain("torch")
    ref = analyze(model, TEXT, ["max-attention", "head-tsne"], opts)
    chain("triton-fused", "triton-wide", "torch", fault="launch")
    got = analyze(model, TEXT, ["max-attention", "head-tsne"], opts)
    assert {**got["max-attention"], "timings": None} == {**ref["max-attention"], "timings": None}
    assert got["head-tsne"]["backend"] == "torch" and ref["head-tsne"]["backend"] == "torch"
    assert got["head-tsne"]["fallback"][0].startswith("triton failed: triton launch failed")
    assert got["head-tsne"]["embedding"] == ref["head-tsne"]["embedding"]
    tsne_chain.install(None)
    host = analyze(model, TEXT, ["head-tsne"], opts)["head-tsne"]
    assert host["backend"] == "cpu" and host["fallback"] == []
