"""Figures of the text explorer and the word lists: pure functions, result JSON -> plotly Figure.

No Dash and no HTTP here, so tests (and notebooks) call them on a result dict directly. Every
point or cell carries its token index in ``customdata`` (first element), and ``layout.meta``
says how the dashboard highlights a hovered token (``assets/highlight.js``):
``{"highlight": "columns" | "points" | "matrix"}``.

Term curves live in ``figures_terms.py``, positional encodings in ``figures_pe.py``.
"""

from __future__ import annotations

import html
import json
from functools import lru_cache
from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from frontend.figures.rescale import quantile_rescale
from frontend.kit.heads import head_attention, head_sections

POSITION_SCALE = "Viridis"
HEAT_SCALE = "Blues"
MAX_TICK_LABELS = 80  # beyond this many tokens, label every k-th tick (hover still names each)


# ---------------------------------------------------------------------------- helpers


def _markup(shown: str, markup: bool) -> str:
    # ``<`` and ``>`` as entities, so plotly shows Llama's ``<s>`` instead of its strike-through tag
    return (shown.replace("<", "&lt;").replace(">", "&gt;") if markup else shown) or "∅"


def display_token(token: str, *, markup: bool = True) -> str:
    """A raw token as shown on axes: GPT-2's byte markers made readable; with ``markup``, ``<`` and
    ``>`` as HTML entities."""
    return _markup(token.replace("Ġ", "␣").replace("Ċ", "⏎").replace("ĉ", "⇥"), markup)


def display_text(text: str, *, markup: bool = True) -> str:
    """A token's span of the text as shown on axes: line breaks and tabs marked, outer spaces
    dropped (a token of spaces only: ``␣``). ``" present"`` -> ``"present"``."""
    shown = text.replace("\r", "").replace("\n", "⏎").replace("\t", "⇥")
    return _markup(shown.strip(" ") or "␣" * len(shown), markup)


def readable_tokens(result: dict[str, Any], *, markup: bool = True) -> list[str]:
    """Every token of a result as readable text: its span of the text (``token_texts``; a chat
    template's tokens have theirs too, ``<|im_start|>``), else the tokenizer's own string (``[CLS]``,
    ``<s>``: added tokens span no text; results without spans). Raw byte-level pieces
    (``Ġpresent``, ``âĢĻ``) never show.

    ``{"tokens": ["[CLS]", "Ġcat"], "token_texts": ["", " cat"]}`` -> ``["[CLS]", "cat"]``. ``markup``: ``<`` and ``>`` as HTML entities (plotly labels); off
    for plain text (the CLI).
    """
    tokens = result.get("tokens") or []
    texts = result.get("token_texts") or []
    out = []
    for i, tok in enumerate(tokens):
        text = texts[i] if i < len(texts) else ""
        if text:
            out.append(display_text(text, markup=markup))
        else:
            out.append(display_token(tok, markup=markup))
    return out


def token_labels(result: dict[str, Any], indices: list[int]) -> list[str]:
    """Labels for the tokens at ``indices`` (``#i`` when the result has no tokens yet)."""
    labels = readable_tokens(result)
    return [labels[i] if i < len(labels) else f"#{i}" for i in indices]


def empty_figure(message: str, *, height: int = 320) -> go.Figure:
    """A blank figure that says why it is blank."""
    fig = go.Figure()
    fig.update_layout(
        height=height,
        xaxis={"visible": False},
        yaxis={"visible": False},
        annotations=[
            {
                "text": message,
                "xref": "paper",
                "yref": "paper",
                "x": 0.5,
                "y": 0.5,
                "showarrow": False,
                "font": {"size": 14, "color": "#555"},
            }
        ],
        margin={"l": 20, "r": 20, "t": 20, "b": 20},
        plot_bgcolor="white",
    )
    return fig


def graph_config(filename: str, *, image_format: str = "png") -> dict[str, Any]:
    """dcc.Graph config: the modebar's camera button downloads ``filename`` as PNG or SVG."""
    if image_format not in ("png", "svg"):
        raise ValueError(f"image format must be png or svg, got {image_format!r}")
    return {
        "displaylogo": False,
        "toImageButtonOptions": {"format": image_format, "filename": filename, "scale": 2},
    }


def _token_ticks(labels: list[str]) -> dict[str, Any]:
    """Numeric axis with token labels (numeric so repeated tokens stay separate columns)."""
    n = len(labels)
    step = max(1, int(np.ceil(n / MAX_TICK_LABELS)))
    vals = list(range(0, n, step))
    return {
        "tickmode": "array",
        "tickvals": vals,
        "ticktext": [labels[i] for i in vals],
        "tickangle": -60 if n > 8 else 0,
        "tickfont": {"size": 10 if n <= 40 else 8},
    }


def scatter_axes(
    x: np.ndarray, y: np.ndarray, *, rescale: bool, k: int = 100
) -> tuple[list[float], list[float], dict[str, Any], dict[str, Any]]:
    """Plotted coordinates and axis settings: QER with original-unit ticks, or raw."""
    if not rescale:
        return (
            x.tolist(),
            y.tolist(),
            {"title": {"text": "t-SNE 1"}},
            {"title": {"text": "t-SNE 2"}},
        )
    r = quantile_rescale(x, y, k=k)
    xaxis = {
        "title": {"text": "t-SNE 1 (quantile-equidistant, original units)"},
        "tickmode": "array",
        "tickvals": r.x_ticks,
        "ticktext": r.x_labels,
        "range": [-0.05, 1.05],
    }
    yaxis = {
        "title": {"text": "t-SNE 2 (quantile-equidistant, original units)"},
        "tickmode": "array",
        "tickvals": r.y_ticks,
        "ticktext": r.y_labels,
        "range": [-0.05, 1.05],
    }
    return r.x, r.y, xaxis, yaxis


def token_scatter(
    coords: np.ndarray,
    *,
    indices: list[int],
    labels: list[str],
    title: str,
    rescale: bool,
    colour: np.ndarray | None = None,
    colour_title: str = "position",
    show_text: bool = True,
    height: int = 460,
) -> go.Figure:
    """A labelled 2-D map: one point per item, hover with the original coordinates."""
    coords = np.asarray(coords, dtype=np.float64).reshape(-1, 2)  # [point, 2]
    px, py, xaxis, yaxis = scatter_axes(coords[:, 0], coords[:, 1], rescale=rescale)
    colour = np.asarray(indices if colour is None else colour, dtype=np.float64)
    custom = [
        [int(i), float(a), float(b), lab]
        for i, (a, b), lab in zip(indices, coords, labels, strict=True)
    ]
    trace = go.Scatter(
        x=px,
        y=py,
        mode="markers+text" if show_text else "markers",
        text=labels,
        textposition="top center",
        textfont={"size": 10},
        customdata=custom,
        hovertemplate="%{customdata[3]} (#%{customdata[0]})<br>x = %{customdata[1]:.4g}"
        "<br>y = %{customdata[2]:.4g}<extra></extra>",
        marker={
            "size": 8,
            "color": colour.tolist(),
            "colorscale": POSITION_SCALE,
            "showscale": True,
            "colorbar": {"title": {"text": colour_title}, "thickness": 12},
            "line": {"width": 0.5, "color": "#333"},
        },
        name="",
    )
    fig = go.Figure(trace)
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        xaxis={**xaxis, "zeroline": False, "showgrid": True},
        yaxis={**yaxis, "zeroline": False, "showgrid": True},
        height=height,
        margin={"l": 60, "r": 20, "t": 60, "b": 60},
        plot_bgcolor="white",
        meta={"highlight": "points", "rescaled": rescale},
        hovermode="closest",
    )
    fig.update_xaxes(gridcolor="#eee")
    fig.update_yaxes(gridcolor="#eee")
    return fig


# ---------------------------------------------------------------------------- max attention


def max_attention_figure(
    result: dict[str, Any], *, reduction: str = "max", layers: list[int] | None = None
) -> go.Figure:
    """One heads x tokens heatmap per layer, stacked; clicking a cell names (layer, head).

    Each cell's customdata is ``[token, layer, head]``. The figure of ``max_attention_spec``.
    """
    return go.Figure(max_attention_spec(result, reduction=reduction, layers=layers))


GAP_MAX_TOKENS = 128  # above this many tokens the heatmaps' cells are drawn without gaps


def max_attention_spec(
    result: dict[str, Any], *, reduction: str = "max", layers: list[int] | None = None
) -> dict[str, Any]:
    """``max_attention_figure`` as the plotly JSON it sends (``{"data", "layout"}``), built without
    plotly's per-property validation: at 452 tokens on SmolLM2 (30 layers x 9 heads) validating the
    cells' hover labels took ~0.3 of the page server's ~0.4 CPU s per draw (docs/dashboard.md).
    ``tests/test_figures.py`` holds that plotly's validation leaves it unchanged."""
    section = result.get("max-attention")
    if not section:
        return empty_figure("No maximum-attention result yet.").to_plotly_json()
    key = "max_attention" if reduction == "max" else "mean_attention"
    data = np.asarray(section[key], dtype=np.float64)  # [layer, head, token]
    n_layers, n_heads, n_tok = data.shape
    shown = shown_layers(result, layers)
    if not shown:
        return empty_figure("No layer selected.").to_plotly_json()
    kept = section.get("kept") or list(range(n_tok))
    labels = token_labels(result, kept)
    over = "queries i >= j (causal)" if section.get("causal") else "queries"  # who can see key j
    what = (
        f"max attention (max over {over})"
        if reduction == "max"
        else f"mean attention (mean over {over})"
    )
    windows = section.get("windows") or []

    def title(layer: int) -> str:  # a sliding-window layer says so: zeros beyond its window
        w = windows[layer] if layer < len(windows) else None
        return (
            f"layer {layer} (local: each query sees the last {w} keys)" if w else f"layer {layer}"
        )

    layout = _stacked_layout(len(shown), min(0.08, 0.3 / len(shown)))
    for note, layer in zip(layout["annotations"], shown, strict=True):
        note["text"] = title(layer)
    zmax = float(data[shown].max()) or 1.0
    small = np.int16 if max(len(kept), n_layers, n_heads, *kept) < 2**15 else np.int32
    text = [labels] * n_heads  # (z and customdata are numpy: typed arrays on the wire)
    # 1-px gaps between cells only where cells are wide: with any gap plotly.js paints each cell apart
    # (not as one image), ~0.25 of the ~0.5 s the browser's main thread took for 30 layers at 452 tokens
    gaps = {"xgap": 1, "ygap": 1} if n_tok <= GAP_MAX_TOKENS else {}
    traces = []
    for row, layer in enumerate(shown, start=1):
        custom = np.empty((n_heads, n_tok, 3), dtype=small)  # [head, token, (token, layer, head)]
        custom[..., 0], custom[..., 1], custom[..., 2] = (
            np.asarray(kept),
            layer,
            np.arange(n_heads)[:, None],
        )
        suffix = "" if row == 1 else str(row)
        traces.append({
            "type": "heatmap", "z": data[layer].astype(np.float32), "x": list(range(n_tok)),
            "y": list(range(n_heads)), "customdata": custom, "coloraxis": "coloraxis",
            "hovertemplate": f"layer {layer}, head %{{y}}<br>token %{{customdata[0]}}: "
            "%{text}<br>" + reduction + " attention %{z:.3f}<br>" + reduction + " over the "
            + over + " that see this token<extra></extra>",
            "text": text, "name": f"layer {layer}", **gaps,
            "xaxis": f"x{suffix}", "yaxis": f"y{suffix}",
        })  # fmt: skip
        axis = {"title": {"text": "head"}, "autorange": "reversed", "tickfont": {"size": 9}}
        if n_heads <= 16:
            axis["dtick"] = 1
        layout[f"yaxis{suffix}"].update(axis)
    layout[f"xaxis{'' if len(shown) == 1 else len(shown)}"].update(_token_ticks(labels))
    layout.update(
        height=int(90 + len(shown) * (40 + 15 * n_heads)),
        coloraxis={"colorscale": _colorscale(HEAT_SCALE), "cmin": 0.0, "cmax": zmax,
                   "colorbar": {"title": {"text": reduction}, "thickness": 12}},
        margin={"l": 60, "r": 20, "t": 60, "b": 90},
        title={"text": f"{what} per layer: heads x tokens — click a cell to open that head",
               "font": {"size": 14}},
        plot_bgcolor="white",
        meta={"highlight": "columns", "layers": shown},
    )  # fmt: skip
    return {"data": traces, "layout": layout}


def typed_arrays(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with its traces' numpy arrays as plotly.js typed arrays (``{"dtype", "bdata", "shape"}``),
    as a ``go.Figure`` sends them: what a Dash callback returns for a figure built as a dict (Dash
    encodes a dict's arrays as nested lists). The arrays are not copied."""
    try:
        from _plotly_utils.utils import to_typed_array_spec
    except ImportError:  # plotly < 6 sends lists either way
        return spec
    data = [{k: to_typed_array_spec(v) if isinstance(v, np.ndarray) else v for k, v in trace.items()}
            for trace in spec.get("data") or []]  # fmt: skip
    return {**spec, "data": data}


@lru_cache(maxsize=32)
def _stacked_layout_json(rows: int, spacing: float) -> str:
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=spacing,
                        subplot_titles=[f"row {r}" for r in range(rows)])  # fmt: skip
    return json.dumps(fig.layout.to_plotly_json())


def _stacked_layout(rows: int, spacing: float) -> dict[str, Any]:
    """A fresh copy of ``make_subplots``' layout of ``rows`` stacked plots sharing their x axis, one
    title annotation per row (made once per shape: ~0.1 CPU s at 30 rows)."""
    return json.loads(_stacked_layout_json(rows, spacing))


def _colorscale(name: str) -> list[list[Any]]:
    """A named colour scale as plotly's validation writes it (``[[0.0, "rgb(...)"], ...]``)."""
    return [list(step) for step in _named_scale(name)]


@lru_cache(maxsize=8)
def _named_scale(name: str) -> tuple[tuple[float, str], ...]:
    return tuple(tuple(step) for step in go.layout.Coloraxis(colorscale=name).colorscale)


def shown_layers(result: dict[str, Any], layers: list[int] | None) -> list[int]:
    """The layers ``max_attention_figure`` draws, in order (all when ``layers`` is empty)."""
    n_layers = len((result.get("max-attention") or {}).get("max_attention") or []) or int(
        result.get("n_layers") or 0
    )
    return [layer for layer in (layers or range(n_layers)) if 0 <= layer < n_layers]


def clicked_head(click_data: dict[str, Any] | None, layers: list[int]) -> tuple[int, int] | None:
    """(layer, head) of a click on ``max_attention_figure`` drawn with ``layers``, or None.

    Dash's clickData of a heatmap carries ``curveNumber`` (the subplot) and ``y`` (the head) but
    not the cell's customdata.
    """
    try:
        point = click_data["points"][0]  # type: ignore[index]
        custom = point.get("customdata")
        if isinstance(custom, list) and len(custom) == 3:
            return int(custom[1]), int(custom[2])
        return int(layers[int(point["curveNumber"])]), int(point["y"])
    except (TypeError, KeyError, IndexError, ValueError):
        return None


# ---------------------------------------------------------------------------- head view


def head_embedding(section: dict[str, Any], layer: int, head: int) -> dict[str, Any] | None:
    """The map of one head from a head-tsne section (one-head or grid form), or None."""
    layers, heads = list(section.get("layers", [])), list(section.get("heads", []))
    if layer not in layers or head not in heads:
        return None
    emb = np.asarray(section["embedding"], dtype=np.float64)
    kl = np.asarray(section["kl"], dtype=np.float64)
    restarts = np.asarray(section.get("kl_restarts", []), dtype=np.float64)
    if emb.ndim == 2:  # one head: [token, 2]
        return {
            "embedding": emb,
            "kl": float(kl.ravel()[0]),
            "kl_restarts": restarts.ravel().tolist(),
            "attention": section.get("attention"),
        }
    li, hi = layers.index(layer), heads.index(head)  # grid: [layer, head, token, 2]
    return {
        "embedding": emb[li, hi],
        "kl": float(kl[li, hi]),
        "kl_restarts": restarts[li, hi].tolist() if restarts.ndim == 3 else [],
        "attention": None,
    }


def find_head(
    result: dict[str, Any], layer: int, head: int
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(section, ``head_embedding``) of (layer, head) in the first head-tsne section holding it."""
    for sec in head_sections(result):
        found = head_embedding(sec, layer, head)
        if found is not None:
            return sec, found
    return None


def state_embedding(section: dict[str, Any], state: int) -> dict[str, Any] | None:
    """The map of one hidden state from a hidden-tsne / word-tsne section, or None."""
    layers = list(section.get("layers", []))
    if state not in layers:
        return None
    emb = np.asarray(section["embedding"], dtype=np.float64)
    i = layers.index(state)
    kl = section.get("kl") or []
    return {
        "embedding": emb if emb.ndim == 2 else emb[i],
        "kl": float(kl[i]) if i < len(kl) else None,
    }


def head_tsne_figure(
    result: dict[str, Any], *, layer: int, head: int, rescale: bool = True
) -> go.Figure:
    """Attention-head t-SNE of (layer, head): tokens as labels, coloured by position."""
    hit = find_head(result, layer, head)
    if hit is None:
        return empty_figure(f"No attention-head t-SNE for layer {layer}, head {head} yet.")
    section, found = hit
    kept = section.get("kept") or list(range(len(found["embedding"])))
    restarts = found["kl_restarts"]
    best = f" (best of {len(restarts)})" if len(restarts) > 1 else ""
    return token_scatter(
        found["embedding"],
        indices=kept,
        labels=token_labels(result, kept),
        colour=np.asarray(kept, dtype=np.float64),
        title=f"Attention-head t-SNE — layer {layer}, head {head} — KL {found['kl']:.4f}{best}",
        rescale=rescale,
    )


def hidden_tsne_figure(result: dict[str, Any], *, state: int, rescale: bool = True) -> go.Figure:
    """Standard t-SNE of the hidden states X[state] (state l + 1 = output of layer l)."""
    section = result.get("hidden-tsne")
    found = state_embedding(section, state) if section else None
    if found is None:
        return empty_figure(f"No hidden-state t-SNE for state {state} yet.")
    kept = section.get("kept") or list(range(len(found["embedding"])))
    what = "embedding output" if state == 0 else f"output of layer {state - 1}"
    kl = f" — KL {found['kl']:.4f}" if found["kl"] is not None else ""
    return token_scatter(
        found["embedding"],
        indices=kept,
        labels=token_labels(result, kept),
        colour=np.asarray(kept, dtype=np.float64),
        title=f"Standard t-SNE of hidden states X[{state}] ({what}), perplexity "
        f"{section.get('perplexity', '?'):.3g}{kl}",
        rescale=rescale,
    )


def attention_matrix_figure(result: dict[str, Any], *, layer: int, head: int) -> go.Figure:
    """The head's attention matrix, queries as rows (needs the one-head ``attention`` field)."""
    hit = head_attention(result, layer, head)
    if hit is None:
        return empty_figure(f"No attention matrix for layer {layer}, head {head} in this result.")
    a, kept, exact = hit  # [query, key]
    labels = token_labels(result, kept)
    custom = [
        [int(kept[j]) for j in range(len(kept))] for _ in range(len(kept))
    ]  # key token per cell
    fig = go.Figure(
        go.Heatmap(
            z=a.tolist(),
            x=list(range(len(kept))),
            y=list(range(len(kept))),
            customdata=custom,
            text=[
                [f"{labels[i]} → {labels[j]}" for j in range(len(kept))] for i in range(len(kept))
            ],
            hovertemplate="query → key: %{text}<br>attention %{z:.3f}<extra></extra>",
            colorscale=HEAT_SCALE,
            zmin=0.0,
            colorbar={"title": {"text": "A"}, "thickness": 12},
        )
    )
    ticks = _token_ticks(labels)
    fig.update_layout(
        title={
            "text": f"Attention matrix — layer {layer}, head {head} (rows: queries)"
            + ("" if exact else ", weights to 1/255"),
            "font": {"size": 14},
        },
        xaxis={**ticks, "title": {"text": "key"}},
        yaxis={
            **{k: v for k, v in ticks.items() if k != "tickangle"},
            "title": {"text": "query"},
            "autorange": "reversed",
        },
        height=max(360, min(900, 120 + 14 * len(kept))),
        margin={"l": 80, "r": 20, "t": 60, "b": 90},
        meta={"highlight": "matrix"},
    )
    return fig


def kl_summary(result: dict[str, Any], *, layer: int, head: int) -> str:
    """One line comparing the two KLs of the head view (docs/analyses.md, thesis Fig. 12)."""
    parts = []
    hid_sec = result.get("hidden-tsne")
    found = (find_head(result, layer, head) or (None, None))[1]
    if found:
        parts.append(f"KL attention-head t-SNE (layer {layer}, head {head}): {found['kl']:.4f}")
        if len(found["kl_restarts"]) > 1:
            parts.append("restarts: " + ", ".join(f"{k:.4f}" for k in found["kl_restarts"]))
    state = state_embedding(hid_sec, layer + 1) if hid_sec else None
    if state and state["kl"] is not None:
        parts.append(f"KL standard t-SNE of X[{layer + 1}]: {state['kl']:.4f}")
    return " · ".join(parts)


# ---------------------------------------------------------------------------- word lists


def words_tsne_figure(result: dict[str, Any], *, state: int, rescale: bool = True) -> go.Figure:
    """t-SNE of the multi-token embeddings of a word list at one state."""
    section = result.get("word-tsne")
    found = state_embedding(section, state) if section else None
    if found is None:
        return empty_figure(f"No word-list t-SNE for state {state} yet.")
    words = section.get("words") or [f"#{i}" for i in range(len(found["embedding"]))]
    n = len(words)
    kl = f" — KL {found['kl']:.4f}" if found["kl"] is not None else ""
    return token_scatter(
        found["embedding"],
        indices=list(range(n)),
        labels=words,
        colour=np.arange(n, dtype=np.float64),
        colour_title="item",
        title=f"t-SNE of {n} items ({section.get('pooling', '?')} pooling) at state {state}{kl}",
        rescale=rescale,
        show_text=n <= 300,
        height=560,
    )


# ---------------------------------------------------------------------------- export


def standalone_html(figures: list[go.Figure], *, title: str, notes: str = "") -> str:
    """One self-contained HTML page (plotly.js inline, works offline) holding ``figures``."""
    parts = []
    for i, fig in enumerate(figures):
        parts.append(
            pio.to_html(
                fig, include_plotlyjs=(i == 0), full_html=False, config={"displaylogo": False}
            )
        )
    body = "\n".join(f'<div class="figure">{p}</div>' for p in parts)
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:16px} .figure{margin-bottom:24px}</style>"
        f"</head><body><h1>{html.escape(title)}</h1><p>{html.escape(notes)}</p>{body}</body></html>\n"
    )
