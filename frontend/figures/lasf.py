"""Figures of the LasF page: pure functions, ``result`` JSON (with a ``lasf`` section) -> Figure.

Every token cell or point carries its token index first in ``customdata`` so that hovering one
marks it in every figure (``assets/highlight.js``); field cells carry the field index.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from frontend.figures.base import HEAT_SCALE, empty_figure, token_scatter
from frontend.figures.tokens import token_labels, token_ticks
from workers.analyses.lasf.spec import LASF


def _section(result: dict[str, Any]) -> dict[str, Any] | None:
    return (result or {}).get(LASF)


def _layout(fig: go.Figure, title: str, *, height: int, meta: dict[str, Any]) -> go.Figure:
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        height=height,
        plot_bgcolor="white",
        margin={"l": 70, "r": 20, "t": 60, "b": 80},
        meta=meta,
    )
    return fig


def phi_figure(
    result: dict[str, Any], *, field: int | None = None, normalised: bool = False
) -> go.Figure:
    """Phi (Eq. 6), fields x fields; the selected field's row is outlined. Click a cell: its row's field."""
    sec = _section(result)
    if not sec:
        return empty_figure("Press Analyze.")
    phi = np.asarray(sec["phi_norm" if normalised else "phi"], dtype=np.float64)
    n = phi.shape[0]
    custom = [[[i, j] for j in range(n)] for i in range(n)]
    fig = go.Figure(
        go.Heatmap(
            z=phi.tolist(),
            x=list(range(n)),
            y=list(range(n)),
            customdata=custom,
            colorscale="Viridis",
            hovertemplate="field %{y} ← field %{x}<br>Φ %{z:.4g}<extra></extra>",
            xgap=1,
            ygap=1,
            colorbar={
                "title": {"text": "Φ (row-normalised)" if normalised else "Φ"},
                "thickness": 12,
            },
        )
    )
    if field is not None and 0 <= field < n:
        fig.add_shape(
            type="rect",
            x0=-0.5,
            x1=n - 0.5,
            y0=field - 0.5,
            y1=field + 0.5,
            line={"color": "#d62728", "width": 2},
        )
    fig.update_xaxes(title_text="field m", dtick=1)
    fig.update_yaxes(title_text="field l", dtick=1, autorange="reversed")
    mode = sec.get("mode", "")
    note = " (a distance: in paper mode farther fields weigh more)" if mode == "paper" else ""
    return _layout(
        fig, f"Φ[l, m]{note} — click a row to open field l", height=380, meta={"highlight": "none"}
    )


def relation_figure(result: dict[str, Any], *, field: int | None = None) -> go.Figure:
    """Max relation, fields x tokens: the most any query i != j puts on token j. Click: field and token."""
    sec = _section(result)
    if not sec:
        return empty_figure("Press Analyze.")
    z = np.asarray(sec["max_relation"], dtype=np.float64)  # [field, token]
    kept = sec["kept"]
    labels = token_labels(result, kept)
    custom = [[[int(t), f] for t in kept] for f in range(z.shape[0])]
    fig = go.Figure(
        go.Heatmap(
            z=z.tolist(),
            x=list(range(len(kept))),
            y=list(range(z.shape[0])),
            customdata=custom,
            text=[labels] * z.shape[0],
            colorscale=HEAT_SCALE,
            xgap=1,
            ygap=1,
            hovertemplate="field %{y}, token %{customdata[0]}: %{text}<br>max relation %{z:.4g}<extra></extra>",
            colorbar={"title": {"text": "max"}, "thickness": 12},
        )
    )
    if field is not None and 0 <= field < z.shape[0]:
        fig.add_shape(
            type="rect",
            x0=-0.5,
            x1=len(kept) - 0.5,
            y0=field - 0.5,
            y1=field + 0.5,
            line={"color": "#d62728", "width": 2},
        )
    fig.update_xaxes(**token_ticks(labels))
    fig.update_yaxes(title_text="field", dtick=1, autorange="reversed")
    return _layout(
        fig,
        "Max relation per field (max over queries i ≠ j of the weights) — click a cell",
        height=140 + 22 * z.shape[0],
        meta={"highlight": "columns"},
    )


def field_matrix_figure(result: dict[str, Any], *, field: int) -> go.Figure:
    """The weights field ``field`` multiplies the signals S by, queries as rows, token labels."""
    sec = _section(result)
    if not sec:
        return empty_figure("Press Analyze.")
    if not 0 <= field < sec["n_fields"]:
        return empty_figure(f"There is no field {field}.")
    w = np.asarray(sec["weights"][field], dtype=np.float64)
    kept = sec["kept"]
    labels = token_labels(result, kept)
    custom = [[int(kept[j]) for j in range(len(kept))] for _ in range(len(kept))]
    what = "Ψ (L2 distance, paper mode)" if sec.get("mode") == "paper" else "softmax(-Ψ/√D_Q)"
    fig = go.Figure(
        go.Heatmap(
            z=w.tolist(),
            x=list(range(len(kept))),
            y=list(range(len(kept))),
            customdata=custom,
            text=[
                [f"{labels[i]} → {labels[j]}" for j in range(len(kept))] for i in range(len(kept))
            ],
            hovertemplate="query → key: %{text}<br>weight %{z:.4g}<extra></extra>",
            colorscale=HEAT_SCALE,
            colorbar={"title": {"text": "weight"}, "thickness": 12},
        )
    )
    ticks = token_ticks(labels)
    fig.update_layout(
        xaxis={**ticks, "title": {"text": "key j"}},
        yaxis={
            **{k: v for k, v in ticks.items() if k != "tickangle"},
            "title": {"text": "query i"},
            "autorange": "reversed",
        },
    )
    return _layout(
        fig,
        f"Field {field}: weights applied to S — {what}",
        height=max(360, min(900, 120 + 14 * len(kept))),
        meta={"highlight": "matrix"},
    )


def field_tsne_figure(result: dict[str, Any], *, field: int, rescale: bool = True) -> go.Figure:
    """The field's t-SNE map (P from its weights, or from Ψ by perplexity), quantile-equidistant axes."""
    sec = _section(result)
    if not sec:
        return empty_figure("Press Analyze.")
    ts = sec["field_tsne"]
    if not 0 <= field < len(ts["embedding"]):
        return empty_figure(f"There is no field {field}.")
    kept = sec["kept"]
    return token_scatter(
        np.asarray(ts["embedding"][field]),
        indices=kept,
        labels=token_labels(result, kept),
        rescale=rescale,
        title=f"Field {field} t-SNE (P: {ts['p_rule']}), KL {ts['kl'][field]:.3f}",
    )


def contribution_figure(result: dict[str, Any], *, field: int | None = None) -> go.Figure:
    """Each field's share of the output norm per token (fields x tokens)."""
    sec = _section(result)
    if not sec:
        return empty_figure("Press Analyze.")
    z = np.asarray(sec["contribution"], dtype=np.float64)
    kept = sec["kept"]
    labels = token_labels(result, kept)
    custom = [[[int(t), f] for t in kept] for f in range(z.shape[0])]
    fig = go.Figure(
        go.Heatmap(
            z=z.tolist(),
            x=list(range(len(kept))),
            y=list(range(z.shape[0])),
            customdata=custom,
            text=[labels] * z.shape[0],
            colorscale="Oranges",
            zmin=0,
            xgap=1,
            ygap=1,
            hovertemplate="field %{y}, token %{text}<br>share %{z:.3f}<extra></extra>",
            colorbar={"title": {"text": "share"}, "thickness": 12},
        )
    )
    fig.update_xaxes(**token_ticks(labels))
    fig.update_yaxes(title_text="field", dtick=1, autorange="reversed")
    return _layout(
        fig,
        "Contribution: ‖O[l, i] L_Y‖ / Σ_m ‖O[m, i] L_Y‖",
        height=140 + 22 * z.shape[0],
        meta={"highlight": "columns"},
    )


def ablation_figure(result: dict[str, Any], *, field: int | None = None) -> go.Figure:
    """R^2 lost (against MiniLM's own last layer) when one field's output is zeroed."""
    sec = _section(result)
    if not sec:
        return empty_figure("Press Analyze.")
    drop = np.asarray(sec["ablation"], dtype=np.float64)
    colours = ["#d62728" if f == field else "#1f77b4" for f in range(len(drop))]
    fig = go.Figure(
        go.Bar(
            x=list(range(len(drop))),
            y=drop.tolist(),
            marker_color=colours,
            customdata=[[f] for f in range(len(drop))],
            hovertemplate="field %{x}: R² drop %{y:.4f}<extra></extra>",
        )
    )
    fig.update_xaxes(title_text="field", dtick=1)
    fig.update_yaxes(title_text="R² drop")
    return _layout(
        fig,
        f"Ablation: R² {sec['r2']:.3f} on this text, minus R² without field l",
        height=300,
        meta={"highlight": "none"},
    )


def field_vs_head_figure(result: dict[str, Any]) -> go.Figure:
    """Spearman's ρ between each field's weights and each head of the replaced layer."""
    sec = _section(result)
    if not sec:
        return empty_figure("Press Analyze.")
    z = np.asarray(sec["field_vs_head"], dtype=np.float64)
    fig = go.Figure(
        go.Heatmap(
            z=z.tolist(),
            x=list(range(z.shape[1])),
            y=list(range(z.shape[0])),
            colorscale="RdBu",
            zmid=0,
            zmin=-1,
            zmax=1,
            xgap=1,
            ygap=1,
            hovertemplate="field %{y} vs L"
            + str(sec["replaced_layer"])
            + "H%{x}: ρ %{z:.3f}<extra></extra>",
            colorbar={"title": {"text": "ρ"}, "thickness": 12},
        )
    )
    fig.update_xaxes(title_text=f"head of MiniLM layer {sec['replaced_layer']}", dtick=1)
    fig.update_yaxes(title_text="field", dtick=1, autorange="reversed")
    return _layout(
        fig,
        "Field vs head: Spearman's ρ of the weights (off-diagonal entries)",
        height=380,
        meta={"highlight": "none"},
    )


def specialisation_rows(
    result: dict[str, Any],
) -> tuple[list[str], list[list[str]], dict[str, int]]:
    """(header, rows, counts) of the specialisation table: per field, effect and p per relation."""
    spec = (_section(result) or {}).get("specialisation")
    if not spec:
        return [], [], {}
    rels = spec["relations"]
    header = ["field", *[f"{r} (effect / p)" for r in rels]]
    rows = []
    for f, (eff, p, ok) in enumerate(zip(spec["effect"], spec["p"], spec["passes"], strict=True)):
        rows.append(
            [
                str(f),
                *[
                    f"{e:+.3g} / {q:.4f}{' ✔' if k else ''}"
                    for e, q, k in zip(eff, p, ok, strict=True)
                ],
            ]
        )
    return header, rows, spec["count"]


def clicked_cell(click: dict[str, Any] | None) -> tuple[int | None, int | None]:
    """(field, token) of a click on the relation or contribution map; (field, None) on Phi."""
    try:
        cd = click["points"][0]["customdata"]
    except (TypeError, KeyError, IndexError):
        return None, None
    if isinstance(cd, list) and len(cd) == 2:
        return int(cd[1]), int(cd[0])
    return None, None


def all_figures(result: dict[str, Any], field: int | None) -> list[go.Figure]:
    """Every figure of the page for one field, None before a field is opened (the page and the
    standalone-HTML export)."""
    f = 0 if field is None else field  # the matrix and map need one: the page shows neither then
    return [
        phi_figure(result, field=field),  # no field open: no row outlined ("click a row")
        relation_figure(result, field=field),
        field_matrix_figure(result, field=f),
        field_tsne_figure(result, field=f),
        contribution_figure(result, field=field),
        ablation_figure(result, field=field),
        field_vs_head_figure(result),
    ]
