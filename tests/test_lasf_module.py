"""The LasF module: paper mode equals Eq. 2-12 written loop by loop; masking, Phi and permutations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from workers.analyses.lasf.module import LasF


def _tiny(mode: str = "paper", kernel: str = "identity", seed: int = 0, **kw) -> LasF:
    torch.manual_seed(seed)
    return LasF(3, 5, 4, 6, 7, mode=mode, kernel=kernel, **kw).double()


def _loops(m: LasF, x: np.ndarray) -> dict[str, np.ndarray]:
    """Eq. 2-12 for one unpadded text, one scalar at a time, float64."""
    Lp, LS, LY = (t.detach().numpy() for t in (m.L, m.L_S, m.L_Y))
    n, dx = x.shape
    ns, _, dq = Lp.shape
    ds = LS.shape[2]
    D = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            D[i, j] = (
                1.0
                if m.kernel == "identity"
                else math.exp(-0.5 * (i - j) ** 2) / math.sqrt(2 * math.pi)
            )
    Q = np.zeros((ns, n, dq))
    S = np.zeros((ns, n, ds))
    for f in range(ns):
        for i in range(n):  # (D^T X L)[i] = sum_j D[j, i] X[j] L
            for j in range(n):
                if m.kernel == "identity" and i != j:
                    continue
                for a in range(dx):
                    for q in range(dq):
                        Q[f, i, q] += D[j, i] * x[j, a] * Lp[f, a, q]
                    for s in range(ds):
                        S[f, i, s] += D[j, i] * x[j, a] * LS[f, a, s]
    psi = np.zeros((ns, n, n))
    for f in range(ns):
        for i in range(n):
            for j in range(n):
                psi[f, i, j] = math.sqrt(sum((Q[f, i, q] - Q[f, j, q]) ** 2 for q in range(dq)))
    qm = np.array([[sum(Q[f, i, q] for i in range(n)) / n for q in range(dq)] for f in range(ns)])
    phi = np.zeros((ns, ns))
    for a in range(ns):
        for b in range(ns):
            for p in (1, 2, 3):
                phi[a, b] += sum(abs(qm[a, q] - qm[b, q]) ** p for q in range(dq)) ** (1 / p)
    O = np.zeros((ns, n, ds))  # noqa: E741
    for f in range(ns):
        for i in range(n):
            for s in range(ds):
                z = 0.0
                for g in range(ns):
                    for j in range(n):
                        z += phi[f, g] * psi[g, i, j] * S[g, j, s]
                O[f, i, s] = 1 / (1 + math.exp(-z))  # Eq. 11: one sigmoid
    y = np.zeros((n, LY.shape[1]))
    for i in range(n):
        for o in range(LY.shape[1]):
            y[i, o] = sum(O[f, i, s] * LY[s, o] for f in range(ns) for s in range(ds))
    return {"Q": Q, "S": S, "psi": psi, "q_mean": qm, "phi": phi, "O": O, "y": y}


@pytest.mark.parametrize("kernel", ["identity", "gaussian"])
def test_paper_mode_equals_loops(kernel):
    m = _tiny(kernel=kernel)
    x = np.random.default_rng(1).normal(size=(6, 5))
    got = m.internals(torch.from_numpy(x))
    want = _loops(m, x)
    for key, ref in want.items():
        np.testing.assert_allclose(
            got[key][0].detach().numpy(), ref, atol=1e-10, rtol=0, err_msg=key
        )
    assert torch.equal(got["weights"], got["psi"])  # paper mode multiplies S by Psi itself


def test_eq11_is_not_eq8_9():
    """Eq. 11 (one sigmoid) is implemented; Eq. 8-9 (two sigmoids) gives a different Y_hat."""
    m = _tiny()
    x = torch.from_numpy(np.random.default_rng(2).normal(size=(1, 6, 5)))
    it = m.internals(x)
    h = torch.sigmoid(torch.einsum("bmij,bmjs->bmis", it["psi"], it["S"]))  # Eq. 8
    o_89 = torch.sigmoid(torch.einsum("blm,bmis->blis", it["phi"], h))  # Eq. 9
    o_11 = torch.sigmoid(
        torch.einsum(
            "blm,bmis->blis", it["phi"], torch.einsum("bmij,bmjs->bmis", it["psi"], it["S"])
        )
    )
    assert torch.allclose(it["O"], o_11, atol=1e-12)
    assert (it["O"] - o_89).abs().max() > 1e-3


@pytest.mark.parametrize("mode", ["paper", "stable"])
def test_phi_matters(mode):
    m = _tiny(mode=mode)
    x = torch.from_numpy(np.random.default_rng(3).normal(size=(2, 6, 5)))
    y = m(x)
    y_id = m.internals(x, phi_override=torch.eye(3, dtype=torch.float64))["y"]
    assert (y - y_id).abs().max() > 1e-3


@pytest.mark.parametrize(
    "mode,kernel", [("paper", "identity"), ("paper", "gaussian"), ("stable", "gaussian")]
)
def test_alone_equals_padded_batch(mode, kernel):
    m = _tiny(mode=mode, kernel=kernel).float()
    rng = np.random.default_rng(4)
    short = torch.from_numpy(rng.normal(size=(4, 5))).float()
    other = torch.from_numpy(rng.normal(size=(7, 5))).float()
    batch = torch.zeros(2, 7, 5)
    batch[0, :4], batch[1] = short, other
    batch[0, 4:] = 99.0  # garbage in the padding must not leak
    mask = torch.zeros(2, 7, dtype=torch.bool)
    mask[0, :4], mask[1] = True, True
    alone = m.internals(short)
    padded = m.internals(batch, mask)
    for key in ("y", "psi", "phi"):
        a = alone[key][0]
        p = padded[key][0]
        if key == "y":
            p = p[:4]
        elif key == "psi":
            p = p[:, :4, :4]
        torch.testing.assert_close(p, a, atol=1e-6, rtol=0, msg=key)
    assert padded["y"][0, 4:].abs().max() == 0


def test_identity_kernel_permutation_permutes_psi():
    m = _tiny()
    x = torch.from_numpy(np.random.default_rng(5).normal(size=(6, 5)))
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    psi = m.internals(x)["psi"][0]
    psi_p = m.internals(x[perm])["psi"][0]
    torch.testing.assert_close(psi_p, psi[:, perm][:, :, perm], atol=1e-12, rtol=0)


def test_stable_weights_are_row_stochastic_and_causal():
    m = _tiny(mode="stable", causal=True)
    x = torch.from_numpy(np.random.default_rng(6).normal(size=(1, 6, 5)))
    w = m.internals(x)["weights"][0]
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 6, dtype=torch.float64))
    assert torch.triu(w, diagonal=1).abs().max() == 0


def test_parameters_named_as_in_the_paper():
    m = LasF(12, 384, 15, 128, 384)
    shapes = {k: tuple(v.shape) for k, v in m.named_parameters()}
    assert shapes == {"L": (12, 384, 15), "L_S": (12, 384, 128), "L_Y": (128, 384)}
    assert 0.65e6 < sum(np.prod(s) for s in shapes.values()) < 0.75e6
