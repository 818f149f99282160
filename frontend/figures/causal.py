"""Figures of the causal page (docs/causal.md): pure functions, result JSON -> plotly Figure.

They read the sections ``predictions``, ``logit-lens``, ``logit-attribution``, ``ablation`` and
``patching`` of one result, plus ``generated`` (tokens the ``continue`` view appended: labelled with
a ``▸`` and shaded in every figure).

    >>> surprisal_figure(result, position=5)   # the text as a strip coloured by surprisal in bits
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from frontend.figures.base import empty_figure
from frontend.figures.tokens import display_text, token_ticks
from frontend.kit.atlas_labels import Labels, label_grid
from workers.analyses.causal.spec import (
    ABLATION,
    LOGIT_ATTRIBUTION,
    LOGIT_LENS,
    PATCHING,
    PREDICTIONS,
)
from workers.core.notation import token_label

GENERATED_MARK = "▸"
HEAD_HOVER = "L%{y}H%{x}%{customdata}: %{z:.4f}<extra>click: open in the text explorer</extra>"
DIVERGING = "RdBu"  # negative red, positive blue (reversed below: positive = helps the target)


def labels(
    result: dict[str, Any], *, tokens: list[str] | None = None, texts: list[str] | None = None
) -> list[str]:
    """A label per token: its text as it reads (``token_texts``), else the tokenizer's token; a
    generated token gets ``▸`` in front."""
    tokens = tokens if tokens is not None else list(result.get("tokens") or [])
    texts = texts if texts is not None else list(result.get("token_texts") or [])
    gen = list(result.get("generated") or [])
    out = []
    for i, tok in enumerate(tokens):
        shown = token_label(tok, texts[i] if i < len(texts) else None)
        out.append((GENERATED_MARK if i < len(gen) and gen[i] else "") + shown)
    return out


def _generated_shapes(result: dict[str, Any], *, yref: str = "paper") -> list[dict[str, Any]]:
    gen = list(result.get("generated") or [])
    if not any(gen):
        return []
    first = gen.index(True)
    return [
        {
            "type": "rect",
            "xref": "x",
            "yref": yref,
            "x0": first - 0.5,
            "x1": len(gen) - 0.5,
            "y0": 0,
            "y1": 1,
            "fillcolor": "rgba(255, 200, 0, 0.12)",
            "line": {"width": 0},
            "layer": "below",
        }
    ]


TITLE_LINE = 80  # characters a title line holds at 14 px in the page's narrowest figure


def wrap_title(title: str, width: int = TITLE_LINE) -> str:
    """``title`` in lines of at most ``width`` characters where it can be (Plotly does not wrap
    titles: a long one runs off the figure), broken after a colon or a comma or before a
    parenthesis, else at the last space."""
    lines, rest = [], title
    while len(rest) > width:
        depth, cuts = 0, []  # not inside parentheses: "(clean 4.8, corrupted -9.1)" stays whole
        for i in range(1, width + 1):
            if rest[i] == "(" and rest[i - 1] == " " and depth == 0:
                cuts.append(i)
            depth += (rest[i - 1] == "(") - (rest[i - 1] == ")")
            if rest[i - 1] in ":," and rest[i] == " " and depth == 0:
                cuts.append(i)
        cut = max(cuts, default=0)
        if cut <= width // 3:  # none, or too early: the last space
            cut = max(cut, rest.rfind(" ", 0, width + 1))
        if cut <= 0:
            break
        lines.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    return "<br>".join([*lines, rest])


def _target(sec: dict[str, Any], p: int, single: str) -> str:
    """What a section scores at position p: ``l[␣Paris] − l[␣Rome]`` for a pair, else ``single``
    filled with the token (``"log p({})"`` -> ``log p(␣Paris)``); tokens as every page shows them."""
    a = display_text(sec["target_tokens"][p])
    if sec.get("target_b") is not None:
        b = sec.get("target_b_tokens")
        return f"l[{a}] − l[{display_text(b[p])}]" if b else "l[a] − l[b]"
    return single.format(a)


def titled_layout(fig: go.Figure, title: str, *, height: int) -> go.Figure:
    """``fig`` framed as the causal and circuits figures are: its title wrapped (``wrap_title``),
    the title's lines added to ``height`` (px of a one-line title), white background."""
    text = wrap_title(title)
    top = 40 + 20 * (text.count("<br>") + 1)
    fig.update_layout(
        title={"text": text, "font": {"size": 14}},
        height=height + top - 60,
        plot_bgcolor="white",
        margin={"l": 70, "r": 20, "t": top, "b": 80},
    )
    return fig


def _position_line(position: int | None) -> list[dict[str, Any]]:
    if position is None:
        return []
    return [
        {
            "type": "line",
            "xref": "x",
            "yref": "paper",
            "x0": position,
            "x1": position,
            "y0": 0,
            "y1": 1,
            "line": {"color": "#d62728", "width": 1.5, "dash": "dot"},
        }
    ]


SURPRISAL_HEIGHT = 270


def surprisal_figure(result: dict[str, Any], *, position: int | None = None) -> go.Figure:
    """The text as one strip: token t+1 coloured by its surprisal ``-log2 p`` under the prediction at
    t (the first token has none). A click picks a position (the prediction made there)."""
    sec = result.get(PREDICTIONS)
    if not sec:
        return empty_figure("No predictions yet.", height=160)
    s = np.asarray(sec["surprisal_bits"], dtype=np.float64)  # [n-1]: token t+1 given 0..t
    n = len(s) + 1
    z = np.concatenate([[np.nan], s])[None]  # [1, n]: the token itself carries its surprisal
    lab = labels(result)
    ranks = [None, *sec["next_rank"]]
    custom = [[lab[i], ranks[i] if ranks[i] is not None else "-"] for i in range(n)]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(n)),
            y=["surprisal"],
            colorscale="YlOrRd",
            zmin=0,
            zmax=float(np.nanmax(s)) if len(s) else 1.0,
            customdata=[custom],
            colorbar={"title": {"text": "bits"}, "thickness": 12, "nticks": 4},
            hovertemplate="%{customdata[0]} (position %{x}): %{z:.2f} bits, rank %{customdata[1]}<extra></extra>",
        )
    )
    fig.update_layout(
        xaxis=token_ticks(lab),
        yaxis={"visible": False},
        shapes=_generated_shapes(result) + _position_line(position),
    )
    return titled_layout(
        fig,
        "Surprisal of each token given the ones before it (bits; click a token: the "
        "prediction made there)",
        height=SURPRISAL_HEIGHT,  # the colour bar needs the room (at 190 px its ticks overlapped)
    )


def top_k_rows(result: dict[str, Any], *, position: int) -> list[dict[str, Any]]:
    """Rows of the top-k table at ``position``: rank, token, probability, and whether it is the
    text's own next token."""
    sec = result.get(PREDICTIONS)
    if not sec or not 0 <= position < len(sec["top_tokens"]):
        return []
    ranks = sec.get("next_rank") or []
    nxt = (
        int(ranks[position]) if position < len(ranks) else None
    )  # the text's own next token's rank
    top_ids = sec.get("top_ids") or []
    rows = []
    for r, (tok, p) in enumerate(
        zip(sec["top_tokens"][position], sec["top_probs"][position], strict=True)
    ):
        rows.append(
            {
                "rank": r + 1,
                "token": display_text(tok, markup=False),
                "probability": f"{p:.4f}",
                "id": top_ids[position][r] if top_ids else None,
                "next": nxt == r + 1,
            }
        )
    return rows


LIGHT_FROM = 0.45  # Viridis is light (green to yellow) from here up: text on it is dark


def lens_text_colours(values: np.ndarray) -> list[str]:
    """The logit lens' printed tokens: dark on Viridis' light cells (p >= ``LIGHT_FROM``), white on
    its dark ones, so each stays readable (white on yellow was not)."""
    return ["#111" if v >= LIGHT_FROM else "#fff" for v in np.nan_to_num(values, nan=0.0)]


def lens_figure(result: dict[str, Any], *, position: int | None = None) -> go.Figure:
    """The logit-lens grid: states x positions, the top token printed, the colour the probability
    of the text's own next token read at that state."""
    sec = result.get(LOGIT_LENS)
    if not sec:
        return empty_figure("No logit lens yet.")
    prob = np.asarray(sec["next_prob"], dtype=np.float64)  # [state, n-1]
    n_states = prob.shape[0]
    n = prob.shape[1] + 1
    tops = [[display_text(t[:8]) for t in row] for row in sec["top_tokens"]]
    probs = np.asarray(sec["top_probs"], dtype=np.float64)  # [state, n]
    z = np.concatenate(
        [prob, probs[:, -1:]], axis=1
    )  # the last position has no next token: its top token's
    custom = [[[tops[s][t], float(probs[s][t])] for t in range(n)] for s in range(n_states)]
    lab = labels(result)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(n)),
            y=list(range(n_states)),
            colorscale="Viridis",
            zmin=0,
            zmax=1,
            customdata=custom,
            colorbar={"title": {"text": "p(next)"}, "thickness": 12},
            hovertemplate="state %{y}, position %{x}: top %{customdata[0]} (%{customdata[1]:.3f}); "
            "p(next token) %{z:.3f}<extra></extra>",
        )
    )
    if (
        n * n_states <= 1200
    ):  # the top tokens printed, dark on Viridis' light cells, white on its dark
        ss, tt = np.meshgrid(np.arange(n_states), np.arange(n), indexing="ij")
        fig.add_trace(
            go.Scatter(
                x=tt.ravel().tolist(),
                y=ss.ravel().tolist(),
                mode="text",
                text=[tops[s][t] for s, t in zip(ss.ravel(), tt.ravel(), strict=True)],
                textfont={"size": 9, "color": lens_text_colours(z.ravel())},
                hoverinfo="skip",
                showlegend=False,
            )
        )
    fig.update_layout(
        xaxis=token_ticks(lab),
        yaxis={"title": {"text": "state (0 = embedding)"}, "dtick": 1},
        shapes=_generated_shapes(result) + _position_line(position),
    )
    return titled_layout(
        fig,
        "Logit lens: each layer's stream read through the final norm and the unembedding "
        "(printed: the top token; colour: the probability of the text's next token, "
        "or of the top token at the last position, which has no next token)",
        height=max(320, 22 * n_states + 140),
    )


def _heads_heatmap(
    values: np.ndarray,
    *,
    title: str,
    name: str,
    height: int = 380,
    zmid: float = 0.0,
    head_labels: Labels | None = None,
) -> go.Figure:
    """A layers x heads map (layer 0 at the bottom); a click on a cell names the head; the hover names
    its atlas label when ``head_labels`` has one (``kit.atlas_labels``)."""
    L, H = values.shape
    lim = float(np.nanmax(np.abs(values))) if values.size else 1.0
    fig = go.Figure(
        go.Heatmap(
            z=values,
            x=list(range(H)),
            y=list(range(L)),
            colorscale=DIVERGING,
            reversescale=False,
            zmid=zmid,
            zmin=-lim or -1,
            zmax=lim or 1,
            colorbar={"title": {"text": name}, "thickness": 12},
            customdata=label_grid(head_labels, L, H),
            hovertemplate=HEAD_HOVER,
        )
    )
    fig.update_layout(
        xaxis={"title": {"text": "head"}, "dtick": 1},
        yaxis={"title": {"text": "layer"}, "dtick": 1},
    )
    return titled_layout(fig, title, height=max(height, 18 * L + 120))


def attribution_figure(
    result: dict[str, Any], *, position: int | None = None, head_labels: Labels | None = None
) -> go.Figure:
    """Direct logit attribution at ``position``: heads (layers x heads) and the feed-forward of each
    layer, as a heatmap and a bar column side by side (``head_labels``: named in the hover)."""
    from plotly.subplots import make_subplots

    sec = result.get(LOGIT_ATTRIBUTION)
    if not sec:
        return empty_figure("No logit attribution yet.")
    heads = np.asarray(sec["heads"], dtype=np.float64)  # [L, H, n]
    L, H, n = heads.shape
    p = n - 1 if position is None or not 0 <= position < n else position
    ff = np.asarray(sec["feedforward"], dtype=np.float64)[:, p]
    grid = heads[:, :, p]
    lim = float(max(np.abs(grid).max(), np.abs(ff).max(), 1e-12))
    tgt = _target(sec, p, "Logit of {}")
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.78, 0.22],
        shared_yaxes=True,
        horizontal_spacing=0.03,
        subplot_titles=("heads", "feed-forward"),
    )
    fig.add_trace(
        go.Heatmap(
            z=grid,
            x=list(range(H)),
            y=list(range(L)),
            colorscale=DIVERGING,
            zmid=0,
            zmin=-lim,
            zmax=lim,
            colorbar={"title": {"text": "logit"}, "thickness": 12, "x": 1.02},
            customdata=label_grid(head_labels, L, H),
            hovertemplate=HEAD_HOVER,
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Bar(
            x=ff,
            y=list(range(L)),
            orientation="h",
            marker={"color": ["#2166ac" if v >= 0 else "#b2182b" for v in ff]},
            hovertemplate="layer %{y} feed-forward: %{x:.4f}<extra></extra>",
            showlegend=False,
        ),
        row=1,
        col=2,
    )
    fig.update_xaxes(title_text="head", dtick=1, row=1, col=1)
    fig.update_yaxes(title_text="layer", dtick=1, row=1, col=1)
    title = (
        f"{tgt} at position {p}: {sec['logit'][p]:.3f} = input {sec['input'][p]:.3f} + heads "
        f"{grid.sum():.3f} + feed-forward {ff.sum():.3f} + bias {sec['bias'][p]:.3f} (final norm's scale frozen)"
    )
    return titled_layout(fig, title, height=max(380, 18 * L + 120))


def ablation_figure(result: dict[str, Any], *, head_labels: Labels | None = None) -> go.Figure:
    """Every head ablated in turn: the change of the target's log-probability at the map's position
    (``head_labels``: named in the hover)."""
    sec = result.get(ABLATION)
    if not sec or sec.get("map") is None:
        return empty_figure("No ablation map yet (the page ablates each head in turn).")
    p = sec["position"]
    what = _target(sec, p, "log p({})")
    return _heads_heatmap(
        np.asarray(sec["map"], dtype=np.float64),
        name="Δ",
        title=f"{sec['mode'].capitalize()} ablation of each head: change of {what} at position {p}",
        head_labels=head_labels,
    )


def patching_residual_figure(result: dict[str, Any]) -> go.Figure:
    """Residual-stream patching: states x positions, the restored fraction of the logit difference."""
    sec = result.get(PATCHING)
    if not sec:
        return empty_figure("No patching yet: give a corrupted text of the same token length.")
    res = np.asarray(sec["residual"], dtype=np.float64)  # [L+1, n]
    lab = [
        f"{a}/{b}" if a != b else a
        for a, b in zip(
            labels(result),
            labels(result, tokens=sec["corrupted_tokens"], texts=sec.get("corrupted_token_texts")),
            strict=False,
        )
    ]
    fig = go.Figure(
        go.Heatmap(
            z=res,
            x=list(range(res.shape[1])),
            y=list(range(res.shape[0])),
            colorscale=DIVERGING,
            zmid=0,
            zmin=-1,
            zmax=1,
            colorbar={"title": {"text": "restored"}, "thickness": 12},
            hovertemplate="X[%{y}] at position %{x} from the clean run: %{z:.3f} restored<extra></extra>",
        )
    )
    fig.update_layout(
        xaxis=token_ticks(lab),
        yaxis={"title": {"text": "state X[l]"}, "dtick": 1},
        shapes=_generated_shapes(result),
    )
    return titled_layout(
        fig,
        f"Residual stream patched from clean into corrupted: restored fraction of "
        f"l[{display_text(sec['a_token'])}] − l[{display_text(sec['b_token'])}] at the last position "
        f"(clean {sec['metric_clean']:.3f}, corrupted {sec['metric_corrupted']:.3f})",
        height=max(320, 18 * res.shape[0] + 160),
    )


def patching_heads_figure(
    result: dict[str, Any], *, head_labels: Labels | None = None
) -> go.Figure:
    """Head-output patching: layers x heads, each head's z at every position taken from the clean run."""
    sec = result.get(PATCHING)
    if not sec:
        return empty_figure("No patching yet: give a corrupted text of the same token length.")
    return _heads_heatmap(
        np.asarray(sec["heads"], dtype=np.float64),
        name="restored",
        title="Each head's output patched from clean into corrupted: restored fraction",
        head_labels=head_labels,
    )


def pair_rows(result: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """The clean and corrupted texts side by side: (clean token, corrupted token, differ)."""
    sec = result.get(PATCHING)
    if not sec:
        return []
    clean = labels(result)
    bad = labels(result, tokens=sec["corrupted_tokens"], texts=sec.get("corrupted_token_texts"))
    return [(a, b, a != b) for a, b in zip(clean, bad, strict=False)]


def clicked_cell(click: dict[str, Any] | None) -> tuple[int, int] | None:
    """(y, x) of a click on a heatmap: (layer, head) on a heads map, (state, position) on a grid."""
    try:
        point = click["points"][0]  # type: ignore[index]
        return int(point["y"]), int(point["x"])
    except (TypeError, KeyError, IndexError, ValueError):
        return None


def clicked_position(click: dict[str, Any] | None) -> int | None:
    cell = clicked_cell(click)
    return None if cell is None else cell[1]
