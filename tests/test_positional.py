"""Positional-encoding analysis (docs/positional.md): references, Procrustes, distances, Q, C, agreement."""

from __future__ import annotations

import bct
import networkx as nx
import numpy as np
import pytest
from scipy.spatial import procrustes as scipy_procrustes
from scipy.spatial.distance import jensenshannon, pdist, squareform
from scipy.stats import ortho_group

from workers.analyses.positional import encodings as P
from workers.core.errors import HeadscopeError


def test_1d_fixed_is_vaswani_with_positions_from_one() -> None:
    R = P.make_reference("1d-fixed", n=16, d=160)
    assert R.shape == (16, 160)
    pos, i = 5, 7  # row 4 holds position 5
    assert R[4, 2 * i] == pytest.approx(np.sin(pos / 10000 ** (2 * i / 160)))
    assert R[4, 2 * i + 1] == pytest.approx(np.cos(pos / 10000 ** (2 * i / 160)))
    assert P.make_reference("1d-fixed", n=3, d=5).shape == (3, 5)  # odd d: last column is a sine


def test_2d_fixed_halves_encode_row_and_column() -> None:
    R = P.make_reference("2d-fixed", n=12, d=8, grid=(3, 4))
    one = P.make_reference("1d-fixed", n=4, d=4)  # rows of the d/2 formula for positions 1..4
    for t in range(12):
        r, c = divmod(t, 4)
        np.testing.assert_allclose(R[t, :4], one[r])
        np.testing.assert_allclose(R[t, 4:], one[c])
    # cells in the same row share the first half exactly; same column, the second half
    assert np.array_equal(R[0, :4], R[3, :4]) and np.array_equal(R[1, 4:], R[9, 4:])
    with pytest.raises(HeadscopeError, match="3 x 3 grid has 9 cells but the PE has 12"):
        P.make_reference("2d-fixed", n=12, d=8, grid=(3, 3))
    with pytest.raises(HeadscopeError, match="even number of dims"):
        P.make_reference("2d-fixed", n=16, d=7)
    R_rand = P.make_reference("random", n=400, d=50, sigma=0.5, seed=3)
    assert R_rand.std() == pytest.approx(0.5, rel=0.05)
    assert np.array_equal(R_rand, P.make_reference("random", n=400, d=50, sigma=0.5, seed=3))


def test_procrustes_recovers_a_rotation_and_matches_scipy() -> None:
    rng = np.random.default_rng(0)
    R = P.make_reference("2d-fixed", n=16, d=32, grid=(4, 4))
    Q = ortho_group.rvs(32, random_state=1)
    aligned, dist = P.procrustes(R @ Q, R)  # wide: more dims than positions
    assert dist < 1e-9
    np.testing.assert_allclose(aligned, R, atol=1e-9)
    tall = rng.normal(size=(40, 8))  # tall: the d x d route
    Q8 = ortho_group.rvs(8, random_state=2)
    np.testing.assert_allclose(P.procrustes(tall @ Q8, tall)[0], tall, atol=1e-9)
    # both routes agree with the textbook Ω = U Vᵀ from the SVD of EᵀR
    E1, R1 = rng.normal(size=(10, 30)), rng.normal(size=(10, 30))
    u, _, vt = np.linalg.svd(E1.T @ R1)
    np.testing.assert_allclose(P.procrustes(E1, R1)[0], E1 @ u @ vt, atol=1e-9)
    E = rng.normal(size=(16, 32))
    _, raw = P.procrustes(E, R)
    # no other orthogonal map does better than the optimum
    assert all(
        raw <= np.linalg.norm(E @ ortho_group.rvs(32, random_state=s) - R) for s in range(20)
    )
    # normalised distance vs scipy's disparity (which also fits a scale): d² = 2 − 2·sqrt(1 − disparity)
    _, _, disparity = scipy_procrustes(R, E)
    assert P.procrustes_normalised(E, R) == pytest.approx(
        np.sqrt(2 - 2 * np.sqrt(1 - disparity)), rel=1e-9
    )
    # invariant to shifting and scaling E; zero for a rotated, scaled, shifted copy
    assert P.procrustes_normalised(3 * E + 1, R) == pytest.approx(P.procrustes_normalised(E, R))
    assert P.procrustes_normalised(5 * R @ Q + 2, R) < 1e-9
    # different widths: the narrower matrix gets zero columns
    _, d_pad = P.procrustes(R[:, :20], R)
    assert d_pad == pytest.approx(P.procrustes(np.pad(R[:, :20], ((0, 0), (0, 12))), R)[1])
    with pytest.raises(HeadscopeError, match="16 positions but the reference has 9"):
        P.procrustes(E, R[:9])


def test_distance_matrix_properties() -> None:
    E = np.random.default_rng(2).normal(size=(20, 6))
    for metric, ref in (("euclidean", "euclidean"), ("cosine", "cosine")):
        D = P.distance_matrix(E, metric=metric)
        assert np.array_equal(D, D.T) and np.all(np.diag(D) == 0)
        np.testing.assert_allclose(D, squareform(pdist(E, ref)), atol=1e-9)
        Q = ortho_group.rvs(6, random_state=0)
        np.testing.assert_allclose(
            P.distance_matrix(E @ Q, metric=metric), D, atol=1e-9
        )  # rotation invariant
    W = P.affinity(P.distance_matrix(E))
    assert W.max() <= 1 and W.min() == pytest.approx(0) and np.all(np.diag(W) == 0)
    with pytest.raises(HeadscopeError, match="unknown metric"):
        P.distance_matrix(E, metric="manhattan")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_modularity_equals_bctpy_and_networkx(seed: int) -> None:
    rng = np.random.default_rng(seed)
    E = rng.normal(size=(24, 10))
    labels = rng.integers(0, 4, size=24)
    W = P.affinity(P.distance_matrix(E))
    q = P.modularity(W, labels)
    assert q == pytest.approx(bct.modularity_und(W, kci=labels + 1)[1], abs=1e-12)
    G = nx.from_numpy_array(W)
    communities = [set(np.flatnonzero(labels == c).tolist()) for c in np.unique(labels)]
    assert q == pytest.approx(nx.community.modularity(G, communities, weight="weight"), abs=1e-12)


def test_grid_pe_is_modular_by_rows_and_clustering_by_hand() -> None:
    # rows far apart, positions in a row close: a clearly modular PE
    grid = (4, 4)
    rows = P.grid_partition("rows", grid)
    assert rows.tolist() == [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4
    assert P.grid_partition("columns", grid).tolist() == [0, 1, 2, 3] * 4
    E = np.eye(4)[rows] * 10 + np.random.default_rng(0).normal(scale=0.1, size=(16, 4))
    W = P.affinity(P.distance_matrix(E))
    assert P.modularity(W, rows) > 0.3 > P.modularity(W, P.grid_partition("columns", grid))
    C, per = P.clustering(W, rows)
    m = rows == 0
    w_in = W[np.ix_(m, m)].sum() / 12
    w_out = W[np.ix_(m, ~m)].mean()
    assert per["0"] == pytest.approx((w_in - w_out) / w_in)
    assert C == pytest.approx(np.mean(list(per.values()))) and C > 0.9
    single, per_single = P.clustering(W, np.zeros(16, dtype=int))  # one module: no outside
    assert single is None and per_single == {"0": None}


def test_partition_csv_parsing_and_errors() -> None:
    text = "position,label\n" + "\n".join(f"{i},{'ab'[i % 2]}" for i in range(6))
    assert P.parse_partition_csv(text, 6).tolist() == ["a", "b", "a", "b", "a", "b"]
    assert P.parse_partition_csv("\ufeffPosition, Label\r\n1,x\r\n0,y\r\n", 2).tolist() == [
        "y",
        "x",
    ]
    cases = {
        "0,a\n1,b\n": "header 'position,label'",
        "": "header 'position,label'",
        "position,label\n0,a\n": "has 1 positions but the PE has 2; missing: 1",
        "position,label\n0,a\nx,b\n": "line 3: position 'x' is not an integer",
        "position,label\n0,a\n0,b\n": "position 0 appears twice",
        "position,label\n0,a\n2,b\n": "outside 0..1",
        "position,label\n0,a\n1\n": "expected 2 columns",
        "position,label\n0,a\n1,  \n": "empty label",
    }
    for bad, message in cases.items():
        with pytest.raises(HeadscopeError, match=message):
            P.parse_partition_csv(bad, 2)


def test_pe_report_of_2d_fixed_against_itself_and_a_rotation() -> None:
    R = P.make_reference("2d-fixed", n=16, d=160, grid=(4, 4))
    E = R @ ortho_group.rvs(160, random_state=0)
    rows = P.grid_partition("rows", (4, 4))
    rep = P.pe_report(E, reference=R, partition=rows)
    assert rep["shape"] == [16, 160]
    assert rep["procrustes_distance"] < 1e-8 and rep["procrustes_distance_normalised"] < 1e-8
    assert rep["distance_correlation"] == pytest.approx(1.0)
    np.testing.assert_allclose(rep["coords_2d_aligned"], rep["reference_coords_2d"], atol=1e-5)
    D = np.array(rep["distance_matrix"])
    assert D.shape == (16, 16) and np.array_equal(D, D.T)
    assert rep["modularity"] == pytest.approx(P.modularity(P.affinity(P.distance_matrix(R)), rows))
    assert rep["order"] == list(range(16)) and rep["labels"][4] == "1"
    cols = P.pe_report(E, reference=None, partition=P.grid_partition("columns", (4, 4)))
    assert cols["order"][:4] == [0, 4, 8, 12] and cols["procrustes_distance"] is None
    bare = P.pe_report(E, reference=None, partition=None)
    assert bare["modularity"] is None and len(bare["coords_2d"]) == 16


def test_sweep_rows_follow_their_reports() -> None:
    R = P.make_reference("2d-fixed", n=16, d=16, grid=(4, 4))
    rng = np.random.default_rng(0)
    items = [(f"noise-{s}", R + rng.normal(scale=s, size=R.shape)) for s in (0.01, 0.5, 3.0)]
    out = P.pe_sweep(items, reference=R, partition=P.grid_partition("rows", (4, 4)))
    dists = [row["procrustes_distance"] for row in out["summary"]]
    assert dists == sorted(dists)  # more noise, farther from the reference
    assert [r["name"] for r in out["checkpoints"]] == ["noise-0.01", "noise-0.5", "noise-3.0"]


def test_attention_agreement_matches_scipy() -> None:
    rng = np.random.default_rng(0)
    A = rng.dirichlet(np.ones(7), size=(3, 7))  # [map, query, key]
    B = rng.dirichlet(np.ones(7), size=(3, 7))
    out = P.attention_agreement(A, B)
    ref = np.mean(
        [jensenshannon(A[m, q], B[m, q], base=2) ** 2 for m in range(3) for q in range(7)]
    )
    assert out["jsd"] == pytest.approx(ref, rel=1e-9)
    flat_cos = A.ravel() @ B.ravel() / np.linalg.norm(A) / np.linalg.norm(B)
    assert out["cosine"] == pytest.approx(flat_cos) and len(out["cosine_per_map"]) == 3
    same = P.attention_agreement(A, A)
    assert same["cosine"] == pytest.approx(1.0) and same["jsd"] == pytest.approx(0.0, abs=1e-12)
    onehot = np.eye(7)[None]
    assert P.attention_agreement(onehot, np.roll(onehot, 1, axis=-1))["jsd"] == pytest.approx(1.0)
    with pytest.raises(HeadscopeError, match="same shape"):
        P.attention_agreement(A, B[:2])


@pytest.mark.parametrize("shape", [(30, 5), (6, 40)])
def test_pca_2d_matches_svd(shape: tuple[int, int]) -> None:
    X = np.random.default_rng(1).normal(size=shape) * np.linspace(3, 1, shape[1])
    coords = P.pca_2d(X)
    _, _, vt = np.linalg.svd(X - X.mean(axis=0), full_matrices=False)
    ref = (X - X.mean(axis=0)) @ vt[:2].T
    np.testing.assert_allclose(np.abs(coords), np.abs(ref), atol=1e-9)  # same axes up to sign
