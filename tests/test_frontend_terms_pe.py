"""Term-curve figures on the real decomposition; PE figures on PE reports."""

from __future__ import annotations

import json

import numpy as np
import pytest

from frontend.figures import positional as P
from frontend.figures import terms as T
from frontend.figures.tokens import readable_tokens

TEXT = "The quick brown fox jumps over the lazy dog near the river bank."


def _decomposition(loaded, text: str = TEXT, **options):
    from workers.engine.pipeline import analyze

    return json.loads(json.dumps(analyze(loaded, text, ["decomposition"], options)))


@pytest.fixture(scope="module")
def dec_minilm(minilm):
    return _decomposition(minilm)


def test_term_curves_are_mean_plus_minus_sd(dec_minilm):
    sec = dec_minilm["decomposition"]
    mean, sd = np.asarray(sec["mean"]), np.asarray(sec["sd"])  # [state, term]
    fig = T.term_curves_figure(dec_minilm)
    lines = [t for t in fig.data if t.showlegend is not False]
    assert [t.name for t in lines] == sec["terms"] == ["input", "attention", "feedforward", "bias"]
    for k, line in enumerate(lines):
        np.testing.assert_allclose(line.y, mean[:, k])
        assert list(line.x) == list(range(dec_minilm["n_layers"] + 1))
        upper, lower = fig.data[3 * k], fig.data[3 * k + 1]
        np.testing.assert_allclose(upper.y, mean[:, k] + sd[:, k])
        np.testing.assert_allclose(lower.y, mean[:, k] - sd[:, k])
        assert lower.fill == "tonexty"
    np.testing.assert_allclose(
        mean.sum(axis=1), 1.0, atol=1e-4
    )  # the curves' premise: terms sum to 1


def test_token_views_sum_to_one_and_follow_clicks(dec_minilm):
    n = dec_minilm["n_tokens"]
    strip = T.token_strip_figure(dec_minilm)
    z = np.asarray(strip.data[0].z)  # [term, token] at the last state
    assert z.shape == (4, n)
    np.testing.assert_allclose(z.sum(axis=0), 1.0, atol=1e-4)
    assert list(strip.layout.xaxis.ticktext) == readable_tokens(dec_minilm)
    assert "The" in strip.layout.xaxis.ticktext and "[CLS]" in strip.layout.xaxis.ticktext
    assert T.clicked_token({"points": [{"curveNumber": 0, "x": 5, "y": "input"}]}) == 5
    curves = T.token_curves_figure(dec_minilm, token=5)
    per = np.asarray(dec_minilm["decomposition"]["per_token"])[:, 5]  # [state, term]
    np.testing.assert_allclose(np.stack([t.y for t in curves.data], axis=1), per)
    assert f"token {readable_tokens(dec_minilm)[5]} (#5)" in curves.layout.title.text
    assert (
        "not in this result"
        in T.token_curves_figure(dec_minilm, token=n).layout.annotations[0].text
    )


def test_head_contributions_heatmap(dec_minilm):
    sec = dec_minilm["decomposition"]
    mean_fig = T.head_contributions_figure(dec_minilm, state=3)
    np.testing.assert_allclose(mean_fig.data[0].z, np.asarray(sec["head_importance_mean"])[3])
    assert np.asarray(mean_fig.data[0].z).shape == (dec_minilm["n_layers"], dec_minilm["n_heads"])
    tok_fig = T.head_contributions_figure(dec_minilm, token=2)
    per_head = np.asarray(sec["head_importance"])[:, :, 2]  # [layer, head]
    np.testing.assert_allclose(tok_fig.data[0].z, per_head)
    # the per-head parts add up to the token's attention importance at the head state
    att = np.asarray(sec["per_token"])[sec["head_state"], 2, sec["terms"].index("attention")]
    assert per_head.sum() == pytest.approx(att, abs=1e-4)


def test_model_comparison_spearman(dec_minilm, catalogue):
    from workers.models import load_model

    same = T.spearman_per_state(dec_minilm, dec_minilm)
    defined = ~np.isnan(same)
    assert defined[1:].all() and np.allclose(same[defined], 1.0)  # a model against itself
    assert np.isnan(same[0, 1])  # no attention term in the embedding output
    tiny = _decomposition(load_model("tiny-bert", device="cpu"))  # MiniLM's tokenizer, 2 layers
    rho = T.spearman_per_state(dec_minilm, tiny)
    assert rho.shape == (3, 4) and np.nanmax(np.abs(rho)) <= 1.0
    fig = T.model_compare_figure(dec_minilm, tiny)
    assert len(fig.data) == 4 and "minilm vs tiny-bert" in fig.layout.title.text
    gpt = _decomposition(load_model("tiny-gpt2", device="cpu"))
    with pytest.raises(ValueError, match="tokenise the text differently"):
        T.spearman_per_state(dec_minilm, gpt)
    assert (
        "tokenise the text differently"
        in T.model_compare_figure(dec_minilm, gpt).layout.annotations[0].text
    )


# ---------------------------------------------------------------------------- positional encodings


def _grid_pe(sigma: float, seed: int) -> np.ndarray:
    """A 4x4-grid PE: row and column features plus noise, [16, 8]."""
    rng = np.random.default_rng(seed)
    r, c = np.divmod(np.arange(16), 4)
    base = np.c_[np.eye(4)[r], np.eye(4)[c]] * 3.0
    return base + sigma * rng.normal(size=base.shape)


def _report(name: str, E: np.ndarray, labels: list[str] | None) -> dict:
    """A PE report as the service returns it; uses the real core when it is there."""
    try:
        from workers.analyses.positional.encodings import pe_report
    except ImportError:
        d = np.linalg.norm(E[:, None] - E[None], axis=-1)
        centred = E - E.mean(axis=0)
        coords = centred @ np.linalg.svd(centred, full_matrices=False)[2][:2].T
        order = (
            sorted(range(len(E)), key=lambda i: (labels[i], i)) if labels else list(range(len(E)))
        )
        rep = {
            "shape": list(E.shape),
            "metric": "euclidean",
            "distance_matrix": d.tolist(),
            "coords_2d": coords.tolist(),
            "order": order,
            "labels": labels,
            "procrustes_distance": None,
            "procrustes_distance_normalised": None,
            "modularity": 0.1 if labels else None,
            "clustering": 0.2 if labels else None,
        }
    else:
        part = np.asarray([int(x) for x in labels]) if labels else None
        rep = pe_report(E, reference=None, partition=part)
    return {"name": name, "tensor": "pe", **json.loads(json.dumps(rep))}


@pytest.fixture(scope="module")
def pe_result():
    columns = [str(i % 4) for i in range(16)]
    return {
        "checkpoints": [
            _report("sigma-0.2", _grid_pe(0.2, 0), columns),
            _report("sigma-2.0", _grid_pe(2.0, 1), columns),
        ],
        "reference": {"kind": "none"},
    }


def test_pe_distance_heatmaps_reordered_by_partition(pe_result):
    fig = P.pe_distance_figure(pe_result, reorder=True)
    assert len(fig.data) == 2 and [a.text for a in fig.layout.annotations][:2] == [
        "sigma-0.2 [pe] (16x8)",
        "sigma-2.0 [pe] (16x8)",
    ]
    rep = pe_result["checkpoints"][0]
    order = rep["order"]
    assert [rep["labels"][i] for i in order] == sorted(rep["labels"])  # modules become blocks
    d = np.asarray(rep["distance_matrix"])
    np.testing.assert_allclose(fig.data[0].z, d[np.ix_(order, order)])
    z = np.asarray(fig.data[0].z)
    np.testing.assert_allclose(z, z.T)
    assert np.all(np.diag(z) == 0)
    assert list(fig.layout.xaxis.ticktext) == [str(i) for i in order]
    plain = P.pe_distance_figure(pe_result, reorder=False)
    np.testing.assert_allclose(plain.data[0].z, d)


def test_pe_map_colours_and_rescaling(pe_result):
    fig = P.pe_map_figure(pe_result, colour_by="row", grid=(4, 4), rescale=True)
    assert len(fig.data) == 2
    assert list(fig.data[0].marker.color) == [i // 4 for i in range(16)]
    assert min(fig.data[0].x) == pytest.approx(0) and max(fig.data[0].x) == pytest.approx(1)
    coords = np.asarray(pe_result["checkpoints"][0]["coords_2d"])
    np.testing.assert_allclose(
        np.asarray([c[1:3] for c in fig.data[0].customdata], dtype=float), coords
    )
    cols = P.pe_map_figure(pe_result, colour_by="column", grid=(4, 4), rescale=False)
    assert list(cols.data[0].marker.color) == [i % 4 for i in range(16)]
    np.testing.assert_allclose(cols.data[0].x, coords[:, 0])
    part = P.pe_map_figure(pe_result, colour_by="partition")
    assert len(set(part.data[0].marker.color)) == 4  # one colour per module
    wrong_grid = P.pe_map_figure(pe_result, colour_by="row", grid=(3, 3))
    assert list(wrong_grid.data[0].marker.color) == list(range(16))  # falls back to position


def test_pe_metrics_and_sweep(pe_result):
    rows = P.pe_metrics_rows(pe_result)
    assert [r["checkpoint"] for r in rows] == ["sigma-0.2 [pe] (16x8)", "sigma-2.0 [pe] (16x8)"]
    assert rows[0]["Procrustes |EΩ − R|_F"] == "—"  # no reference: not defined, shown as a dash
    q = pe_result["checkpoints"][0]["modularity"]
    assert rows[0]["modularity Q"] == f"{q:.4g}"
    sweep = P.pe_sweep_figure(pe_result)
    titles = [a.text for a in sweep.layout.annotations]
    assert titles == ["modularity Q", "clustering C"]
    assert list(sweep.data[0].x) == ["1. sigma-0.2", "2. sigma-2.0"]
    one = {"checkpoints": pe_result["checkpoints"][:1]}
    assert "two or more" in P.pe_sweep_figure(one).layout.annotations[0].text
