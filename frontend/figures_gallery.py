"""The gallery of every head's attention-head t-SNE, and the per-head data that switches the large map.

Pure functions, result JSON -> Figure / JSON, no Dash. The gallery is one figure on one pair of
hidden axes: panel (row r, column c) holds head ``heads[c]`` of layer ``layers[r]`` with its map
rescaled quantile-equidistantly (docs/analyses.md#quantile-equidistant-rescaling) into the unit square at ``(c·SX, r·SY)`` — a single axis
draws fast for hundreds of panels and exports as one PNG/SVG. ``layout.meta.gallery`` tells
``assets/heads.js`` which panel a click falls in. Large pages switch to WebGL (``Scattergl``).

``head_maps`` packs, for every head of a result, exactly what ``figures.head_tsne_figure`` would
draw (plotted and original coordinates, ticks, title) plus two template figures, so the browser
redraws the large map for another head without asking the server.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from frontend.figures import (
    POSITION_SCALE,
    empty_figure,
    head_tsne_figure,
    scatter_axes,
    token_labels,
)
from frontend.heads import gallery_section, head_sections

SX, SY = 1.12, 1.28  # panel pitch in data units: a unit square plus the gap (and the title above it)
MAX_PANELS = 96  # panels per gallery page; a page holds whole layers
WEBGL_POINTS = 30_000  # points on a page beyond which the gallery draws with WebGL
DIGITS = 5


def gallery_layers(result: dict[str, Any], layers: list[int] | None = None) -> list[int]:
    """The layers of the gallery: those chosen (``layers``) that the grid holds, or all of them."""
    sec = gallery_section(result)
    have = list(planned_layers(sec)) if sec else []
    return [layer for layer in (layers or have) if layer in have]


def planned_layers(sec: dict[str, Any]) -> list[int]:
    """The section's layers, or, while it fills in layer by layer (``workers.layer_parts``), all it will hold."""
    return list((sec.get("partial") or {}).get("layers") or sec.get("layers", []))


def gallery_pages(layers: list[int], n_heads: int, *, max_panels: int = MAX_PANELS) -> list[list[int]]:
    """Whole layers per page, at most ``max_panels`` panels a page (at least one layer)."""
    per = max(1, max_panels // max(1, n_heads))
    return [layers[i : i + per] for i in range(0, len(layers), per)]


def _unit(v: np.ndarray) -> np.ndarray:
    """Quantile-equidistant coordinates in [0, 1] (docs/analyses.md#quantile-equidistant-rescaling, k = 100)."""
    from frontend.rescale import fit_axis

    return fit_axis(v, k=100).forward(v)


def gallery_figure(
    result: dict[str, Any],
    *,
    layers: list[int] | None = None,
    page: int = 0,
    max_panels: int = MAX_PANELS,
    webgl: bool | None = None,
) -> go.Figure:
    """Small multiples of every head of the page's layers: rows = layers, columns = heads.

    Each panel: the head's map on quantile-equidistant axes, coloured by position, titled
    ``L{layer} H{head} KL {kl}``. Each point's customdata is ``[token, layer, head, x, y]``.
    """
    sec = gallery_section(result)
    if sec is None:
        return empty_figure("The gallery of every head appears here after Analyze.", height=200)
    all_layers, heads = list(sec["layers"]), list(sec["heads"])
    pages = gallery_pages(gallery_layers(result, layers), len(heads), max_panels=max_panels)
    if not pages:
        return empty_figure("None of the chosen layers is in the gallery.", height=200)
    page = min(max(0, int(page)), len(pages) - 1)
    shown = pages[page]
    emb = np.asarray(sec["embedding"], dtype=np.float64)  # [layer, head, token, 2]
    kl = np.asarray(sec["kl"], dtype=np.float64)  # [layer, head]
    kept = list(sec.get("kept") or range(emb.shape[2]))
    labels = token_labels(result, kept)
    n = len(kept)
    gl = (len(shown) * len(heads) * n > WEBGL_POINTS) if webgl is None else webgl
    scatter = go.Scattergl if gl else go.Scatter
    colour = np.asarray(kept, dtype=np.float64)
    traces, annotations, frame_x, frame_y, panels = [], [], [], [], []
    for r, layer in enumerate(shown):
        if layer not in all_layers:  # not computed yet: the row waits in its place
            annotations.append({"x": 0.02, "y": r * SY + 0.5, "xref": "x", "yref": "y", "showarrow": False,
                                "text": f"layer {layer}: computing…", "xanchor": "left", "font": {"color": "#888"}})
            continue
        li = all_layers.index(layer)
        xs, ys, custom = [], [], []
        for c, head in enumerate(heads):
            xy = emb[li, c]  # [token, 2]
            ux, uy = _unit(xy[:, 0]), _unit(xy[:, 1])
            xs.append(c * SX + ux)
            ys.append(r * SY + 1.0 - uy)  # y axis points down: row 0 on top, larger y lower
            custom += [[int(t), layer, head, round(float(a), DIGITS), round(float(b), DIGITS)]
                       for t, (a, b) in zip(kept, xy, strict=True)]
            annotations.append({"x": c * SX + 0.5, "y": r * SY - 0.04, "xref": "x", "yref": "y",
                                "text": f"L{layer} H{head} · KL {kl[li, c]:.2f}", "showarrow": False,
                                "yanchor": "bottom", "font": {"size": 9 if len(heads) <= 16 else 7}})
            x0, y0 = c * SX - 0.03, r * SY - 0.03
            frame_x += [x0, x0 + 1.06, x0 + 1.06, x0, x0, None]
            frame_y += [y0, y0, y0 + 1.06, y0 + 1.06, y0, None]
            panels.append([layer, head])
        traces.append(scatter(
            x=np.round(np.concatenate(xs), DIGITS), y=np.round(np.concatenate(ys), DIGITS), mode="markers",
            customdata=custom, text=labels * len(heads),
            hovertemplate="%{text} (#%{customdata[0]}) — layer %{customdata[1]}, head %{customdata[2]}"
            "<br>x = %{customdata[3]:.4g}, y = %{customdata[4]:.4g}<extra></extra>",
            marker={"size": 4 if n <= 200 else 3, "color": np.tile(colour, len(heads)), "colorscale": POSITION_SCALE,
                    "cmin": float(colour.min()), "cmax": float(colour.max()), "showscale": r == 0,
                    "colorbar": {"title": {"text": "position"}, "thickness": 10, "len": 0.5}},
            name=f"layer {layer}", showlegend=False,
        ))
    frames = go.Scatter(x=frame_x, y=frame_y, mode="lines", line={"color": "#ccc", "width": 1},
                        hoverinfo="skip", showlegend=False, name="panels")
    rows, cols = len(shown), len(heads)
    panel_px = max(48, min(120, 1350 // cols))
    fig = go.Figure([frames, *traces])
    progress = sec.get("partial")
    fig.update_layout(
        title={"text": f"Attention-head t-SNE of every head — layers {shown[0]}–{shown[-1]}"
               + (f" (page {page + 1} of {len(pages)})" if len(pages) > 1 else "")
               + (f" — {progress['layers_done']} of {len(progress['layers'])} layers so far" if progress else "")
               + " — quantile-equidistant axes, colour = position; click a panel to open it", "font": {"size": 14}},
        xaxis={"visible": False, "range": [-0.08, cols * SX], "fixedrange": True},
        yaxis={"visible": False, "range": [rows * SY, -0.3], "fixedrange": True},
        annotations=annotations,
        height=int(80 + rows * panel_px * SY),
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        plot_bgcolor="white",
        hovermode="closest",
        meta={"highlight": "points", "gallery": {"panels": panels, "layers": shown, "heads": heads, "sx": SX,
                                                 "sy": SY, "page": page, "pages": len(pages), "webgl": gl,
                                                 "complete": not progress}},
    )
    return fig


def gallery_page_options(result: dict[str, Any], layers: list[int] | None = None) -> list[dict[str, Any]]:
    """Dropdown options of the gallery's pages (``layers a–b``)."""
    sec = gallery_section(result)
    if sec is None:
        return []
    pages = gallery_pages(gallery_layers(result, layers), len(sec.get("heads", [])))
    return [{"label": f"layers {p[0]}–{p[-1]}" if len(p) > 1 else f"layer {p[0]}", "value": i}
            for i, p in enumerate(pages)]


def _rounded(values: Any) -> list[float]:
    return [round(float(v), DIGITS) for v in values]


def _every_head(result: dict[str, Any]) -> dict[tuple[int, int], tuple[list[int], np.ndarray, float, list[float]]]:
    """(layer, head) -> (kept, map ``[token, 2]``, KL, restart KLs), the one-head section first."""
    out: dict[tuple[int, int], tuple[list[int], np.ndarray, float, list[float]]] = {}
    for sec in head_sections(result):
        emb = np.asarray(sec["embedding"], dtype=np.float64)
        kl = np.asarray(sec["kl"], dtype=np.float64)
        restarts = np.asarray(sec.get("kl_restarts", []), dtype=np.float64)
        kept = list(sec.get("kept") or range(emb.shape[-2]))
        for li, layer in enumerate(sec.get("layers", [])):
            for hi, head in enumerate(sec.get("heads", [])):
                if (layer, head) in out:
                    continue
                if emb.ndim == 2:  # one head
                    out[(layer, head)] = (kept, emb, float(kl.ravel()[0]), restarts.ravel().tolist())
                else:
                    rs = restarts[li, hi].tolist() if restarts.ndim == 3 else []
                    out[(layer, head)] = (kept, emb[li, hi], float(kl[li, hi]), rs)
    return out


def head_maps(result: dict[str, Any]) -> dict[str, Any]:
    """What the browser needs to draw any head's large map at once (``assets/heads.js``).

    ``{"maps": {"L,H": {"title", "x", "y", "xr", "yr", "xaxis", "yaxis"}}, "kept", "labels",
    "templates": {"rescaled": figure, "raw": figure}}``: ``x``/``y`` and the axes are the
    quantile-equidistant plot, ``xr``/``yr`` the original coordinates (the raw plot and the hover);
    the same numbers ``figures.head_tsne_figure`` draws.
    """
    heads = _every_head(result)
    if not heads:
        return {"maps": {}}
    maps: dict[str, Any] = {}
    kept: list[int] = []
    for (layer, head), (kept_h, xy, kl, restarts) in heads.items():
        kept = kept_h
        px, py, xaxis, yaxis = scatter_axes(xy[:, 0], xy[:, 1], rescale=True)
        best = f" (best of {len(restarts)})" if len(restarts) > 1 else ""
        maps[f"{layer},{head}"] = {
            "title": f"Attention-head t-SNE — layer {layer}, head {head} — KL {kl:.4f}{best}",
            "x": _rounded(px), "y": _rounded(py), "xr": _rounded(xy[:, 0]), "yr": _rounded(xy[:, 1]),
            "xaxis": xaxis, "yaxis": yaxis,
        }
    first = next(iter(heads))
    templates = {mode: head_tsne_figure(result, layer=first[0], head=first[1], rescale=mode == "rescaled")
                 .to_plotly_json() for mode in ("rescaled", "raw")}
    return {"maps": maps, "kept": kept, "labels": token_labels(result, kept), "templates": templates}
