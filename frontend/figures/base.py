"""The figures' basics: empty and labelled figures, colour scales, the modebar, the t-SNE scatter.

Pure functions, no Dash and no HTTP, so tests and notebooks call them on a result dict directly
(docs/dashboard.md). Every point or cell of a figure carries its token index in ``customdata``
(first element), and ``layout.meta`` says how the dashboard highlights a hovered token
(``assets/highlight.js``): ``{"highlight": "columns" | "points" | "matrix"}``.
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from frontend.figures.rescale import quantile_rescale

POSITION_SCALE = "Viridis"
HEAT_SCALE = "Blues"


EMPTY_PX = 90  # a placeholder's height: no large empty card before Analyze (docs/dashboard.md)


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
