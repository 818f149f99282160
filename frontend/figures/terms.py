"""Figures of the term-importance page (docs/decomposition.md): pure functions, result JSON -> plotly Figure.

They read the ``decomposition`` section: ``terms`` (labels), ``per_token`` [state][token][term],
``mean`` / ``sd`` [state][term], ``kept`` (tokens in the means), ``head_importance_mean``
[state][layer][head], ``head_importance`` [layer][head][token] at ``head_state``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from frontend.figures.base import empty_figure
from frontend.figures.tokens import token_labels, token_ticks
from workers.analyses.decomposition.rank_stats import spearman_per_state as rank_spearman
from workers.analyses.decomposition.spec import DECOMPOSITION

TERM_COLOURS = {
    "input": "#1f77b4",
    "attention": "#d62728",
    "feedforward": "#2ca02c",
    "bias": "#7f7f7f",
}
FALLBACK_COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#7f7f7f", "#9467bd", "#8c564b"]


def _colour(term: str, i: int) -> str:
    return TERM_COLOURS.get(term, FALLBACK_COLOURS[i % len(FALLBACK_COLOURS)])


def _rgba(hex_colour: str, alpha: float) -> str:
    h = hex_colour.lstrip("#")
    r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


def _terms(section: dict[str, Any], n: int) -> list[str]:
    terms = list(section.get("terms") or [])
    return terms if len(terms) == n else [f"term {i}" for i in range(n)]


def error_note(section: dict[str, Any]) -> str:
    """The reconstruction error as a subtitle: absolute, and relative to the state's norm (a
    decoder's states reach the thousands). ``""`` for results without it."""
    if not section.get("max_abs_error"):
        return ""
    note = f"max |i+h+f+c − X| = {max(section['max_abs_error']):.1e}"
    if section.get("max_rel_error"):
        note += f", relative to |X|: {max(section['max_rel_error']):.1e}"
    return f"<br><sup>{note} ({section.get('dtype', '')})</sup>"


def term_curves_figure(result: dict[str, Any], *, title: str | None = None) -> go.Figure:
    """Mean ± sd over tokens of each term's importance at every state, one line per term."""
    section = result.get(DECOMPOSITION)
    if not section:
        return empty_figure("No decomposition result yet.")
    mean = np.asarray(section["mean"], dtype=np.float64)  # [state, term]
    sd = np.asarray(section["sd"], dtype=np.float64)  # [state, term]
    states = list(range(mean.shape[0]))
    terms = _terms(section, mean.shape[1])
    fig = go.Figure()
    for k, term in enumerate(terms):
        colour = _colour(term, k)
        upper, lower = (mean[:, k] + sd[:, k]).tolist(), (mean[:, k] - sd[:, k]).tolist()
        fig.add_trace(
            go.Scatter(
                x=states,
                y=upper,
                mode="lines",
                line={"width": 0},
                showlegend=False,
                hoverinfo="skip",
                legendgroup=term,
                name=f"{term} + sd",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=states,
                y=lower,
                mode="lines",
                line={"width": 0},
                fill="tonexty",
                fillcolor=_rgba(colour, 0.15),
                showlegend=False,
                hoverinfo="skip",
                legendgroup=term,
                name=f"{term} - sd",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=states,
                y=mean[:, k].tolist(),
                mode="lines+markers",
                name=term,
                legendgroup=term,
                line={"color": colour, "width": 2},
                customdata=sd[:, k].tolist(),
                hovertemplate=f"{term}<br>state %{{x}}: %{{y:.3f}} ± %{{customdata:.3f}}<extra></extra>",
            )
        )
    model = result.get("model", "")
    fig.update_layout(
        title={
            "text": (
                title or f"Term importance μ(e, t) per state — {model} (mean ± sd over tokens)"
            )
            + error_note(section),
            "font": {"size": 14},
        },
        xaxis={
            "title": {"text": "state (0 = embedding output, l = output of layer l - 1)"},
            "tickmode": "array",
            "tickvals": states,
        },
        yaxis={"title": {"text": "importance μ(e, t) = eᵀt / |e|²"}},
        height=420,
        margin={"l": 60, "r": 20, "t": 60, "b": 60},
        plot_bgcolor="white",
        hovermode="x unified",
    )
    fig.update_xaxes(gridcolor="#eee")
    fig.update_yaxes(gridcolor="#eee", zeroline=True, zerolinecolor="#bbb")
    return fig


def token_strip_figure(result: dict[str, Any], *, state: int | None = None) -> go.Figure:
    """Terms x tokens importance at one state (default: the last); click a token for its curves."""
    section = result.get(DECOMPOSITION)
    if not section:
        return empty_figure("No decomposition result yet.", height=200)
    per = np.asarray(section["per_token"], dtype=np.float64)  # [state, token, term]
    s = per.shape[0] - 1 if state is None else int(np.clip(state, 0, per.shape[0] - 1))
    n_tok = per.shape[1]
    labels = token_labels(result, list(range(n_tok)))
    terms = _terms(section, per.shape[2])
    custom = [[t for t in range(n_tok)] for _ in terms]
    fig = go.Figure(
        go.Heatmap(
            z=per[s].T.tolist(),
            x=list(range(n_tok)),
            y=terms,
            customdata=custom,
            text=[labels] * len(terms),
            colorscale="RdBu",
            zmid=0.0,
            hovertemplate="%{text} (#%{customdata})<br>%{y}: %{z:.3f}<extra></extra>",
            colorbar={"title": {"text": "μ"}, "thickness": 12},
            xgap=1,
            ygap=1,
        )
    )
    fig.update_layout(
        title={
            "text": f"Importance per token at state {s} — click a token for its curves",
            "font": {"size": 14},
        },
        xaxis=token_ticks(labels),
        height=260,
        margin={"l": 90, "r": 20, "t": 50, "b": 80},
        meta={"highlight": "columns"},
    )
    return fig


def clicked_token(click_data: dict[str, Any] | None) -> int | None:
    """Token index of a click on ``token_strip_figure`` (its x is the token index)."""
    try:
        point = click_data["points"][0]  # type: ignore[index]
        c = point.get("customdata")
        if c is None:
            return int(point["x"])
        return int(c[0] if isinstance(c, list) else c)
    except (TypeError, KeyError, IndexError, ValueError):
        return None


def token_curves_figure(result: dict[str, Any], *, token: int) -> go.Figure:
    """One token's importance per state, one line per term."""
    section = result.get(DECOMPOSITION)
    if not section:
        return empty_figure("No decomposition result yet.")
    per = np.asarray(section["per_token"], dtype=np.float64)  # [state, token, term]
    if not 0 <= token < per.shape[1]:
        return empty_figure(f"Token {token} is not in this result.")
    states = list(range(per.shape[0]))
    terms = _terms(section, per.shape[2])
    label = token_labels(result, [token])[0]
    fig = go.Figure()
    for k, term in enumerate(terms):
        fig.add_trace(
            go.Scatter(
                x=states,
                y=per[:, token, k].tolist(),
                mode="lines+markers",
                name=term,
                line={"color": _colour(term, k)},
                hovertemplate=f"{term}: %{{y:.3f}}<extra></extra>",
            )
        )
    fig.update_layout(
        title={
            "text": f"Term importance of token {label} (#{token}) per state",
            "font": {"size": 14},
        },
        xaxis={"title": {"text": "state"}, "tickmode": "array", "tickvals": states},
        yaxis={"title": {"text": "μ(e, t)"}},
        height=380,
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
        plot_bgcolor="white",
        hovermode="x unified",
    )
    fig.update_yaxes(gridcolor="#eee", zeroline=True, zerolinecolor="#bbb")
    return fig


def head_contributions_figure(
    result: dict[str, Any], *, state: int | None = None, token: int | None = None
) -> go.Figure:
    """Per-(layer, head) importance of the attention parts in the embedding at one state.

    Without ``token``: the mean over the kept tokens at ``state`` (default the last). With
    ``token``: that token's values at the section's ``head_state``.
    """
    section = result.get(DECOMPOSITION)
    if not section or "head_importance_mean" not in section:
        return empty_figure("No per-head contributions in this result.")
    means = np.asarray(section["head_importance_mean"], dtype=np.float64)  # [state, layer, head]
    if token is not None and "head_importance" in section:
        per = np.asarray(section["head_importance"], dtype=np.float64)  # [layer, head, token]
        if not 0 <= token < per.shape[2]:
            return empty_figure(f"Token {token} is not in this result.")
        z = per[:, :, token]
        s = int(section.get("head_state", means.shape[0] - 1))
        label = token_labels(result, [token])[0]
        what = f"token {label} (#{token}) at state {s}"
    else:
        s = means.shape[0] - 1 if state is None else int(np.clip(state, 0, means.shape[0] - 1))
        z = means[s]
        what = f"mean over tokens at state {s}"
    n_layers, n_heads = z.shape
    fig = go.Figure(
        go.Heatmap(
            z=z.tolist(),
            x=list(range(n_heads)),
            y=list(range(n_layers)),
            colorscale="RdBu",
            zmid=0.0,
            hovertemplate="L%{y}H%{x}: μ %{z:.4f}<extra></extra>",
            colorbar={"title": {"text": "μ"}, "thickness": 12},
            xgap=1,
            ygap=1,
        )
    )
    fig.update_layout(
        title={"text": f"Attention term split by (layer, head) — {what}", "font": {"size": 14}},
        xaxis={"title": {"text": "head"}, "dtick": 1},
        yaxis={"title": {"text": "layer"}, "dtick": 1, "autorange": "reversed"},
        height=max(260, 80 + 28 * n_layers),
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
    )
    return fig


def spearman_per_state(a: dict[str, Any], b: dict[str, Any]) -> np.ndarray:
    """[state, term]: Spearman's ρ over the kept tokens between two decomposition results.

    Both must come from the same text with the same tokens; states beyond the shallower model's
    depth are left out; NaN where a term is constant over the tokens (e.g. attention at state 0).
    """
    if (a.get("tokens") or None) != (b.get("tokens") or None):
        raise ValueError(
            f"the models {a.get('model')!r} and {b.get('model')!r} tokenise the text differently "
            f"({len(a.get('tokens') or [])} vs {len(b.get('tokens') or [])} tokens); "
            "Spearman's ρ needs the same tokens"
        )
    sa, sb = a[DECOMPOSITION], b[DECOMPOSITION]
    return rank_spearman(
        sa["per_token"], sb["per_token"], keep=sa.get("kept") or None
    )  # [state, token, term]


def model_compare_figure(a: dict[str, Any], b: dict[str, Any]) -> go.Figure:
    """Spearman's ρ per state between two models' importances on the same text (paper Fig. 3d–f)."""
    if not a.get(DECOMPOSITION) or not b.get(DECOMPOSITION):
        return empty_figure("Analyse the text with a second model to compare.")
    try:
        rho = spearman_per_state(a, b)
    except ValueError as exc:
        return empty_figure(str(exc))
    terms = _terms(a[DECOMPOSITION], rho.shape[1])
    states = list(range(rho.shape[0]))
    fig = go.Figure()
    for k, term in enumerate(terms):
        y = [None if np.isnan(v) else float(v) for v in rho[:, k]]
        fig.add_trace(
            go.Scatter(
                x=states,
                y=y,
                mode="lines+markers",
                name=term,
                line={"color": _colour(term, k)},
                connectgaps=False,
                hovertemplate=f"{term}: ρ %{{y:.3f}}<extra></extra>",
            )
        )
    fig.update_layout(
        title={
            "text": f"Spearman's ρ per state: {a.get('model')} vs {b.get('model')}",
            "font": {"size": 14},
        },
        xaxis={"title": {"text": "state"}, "tickmode": "array", "tickvals": states},
        yaxis={"title": {"text": "ρ"}, "range": [-1.05, 1.05]},
        height=380,
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
        plot_bgcolor="white",
        hovermode="x unified",
    )
    fig.update_yaxes(gridcolor="#eee", zeroline=True, zerolinecolor="#bbb")
    return fig
