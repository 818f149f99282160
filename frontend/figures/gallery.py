"""The gallery of every head's attention-head t-SNE, and the per-head data that switches the large map.

Pure functions, result JSON -> Figure / JSON, no Dash. The gallery is one figure on one pair of
hidden axes: head ``heads[c]`` of the page's ``r``-th layer is a panel with its map rescaled
quantile-equidistantly (docs/analyses.md#quantile-equidistant-rescaling) into the unit square at
``(c·SX, 0)`` from its layer's place; a row holds ``per_row`` layers side by side (as many as
``ROW_PANELS`` panels hold: a model with 4 heads a layer gets 3 layers a row), so the panels fill
the width whatever the heads per layer (docs/dashboard.md) — a single axis
draws fast for hundreds of panels and exports as one PNG/SVG. Each row's panels are one PNG
picture (``row_image``, drawn by ``frontend.figures.thumbnails``), placed as a layout image: the
browser draws no points (as WebGL points they cost a software-rendered Chromium far more:
docs/dashboard.md, "Measured costs the code points to"). ``layout.meta.gallery`` tells
``assets/heads.js`` which panel a click falls in; the large map of the clicked head is the
interactive one.

The figure has a fixed shape while the gallery fills in (``workers/core/partials.py``): trace 0 the
panel frames, trace 1 the colour bar, trace 2 the panels' titles, layout image r the row r, invisible
until its layer is computed. A page that already shows some rows therefore takes the others as ``gallery_update``
(the new rows' images by index, the frames, the titles' text trace, title and meta), which the dashboard sends
as a partial update: the rows on screen are not sent again.

``head_maps`` packs, for every head of a result, exactly what ``figures.tsne.head_tsne_figure`` would
draw (plotted and original coordinates, ticks, title) plus two template figures, so the browser
redraws the large map for another head without asking the server; ``head_map_entries`` gives the
maps of some heads only (the layers that just arrived).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import plotly.graph_objects as go

from frontend.figures import thumbnails as T
from frontend.figures.base import POSITION_SCALE, empty_figure, scatter_axes
from frontend.figures.tokens import token_labels
from frontend.figures.tsne import head_tsne_figure
from frontend.kit.atlas_labels import Labels, head_name
from frontend.kit.heads import gallery_section, head_sections
from workers.analyses.attention.spec import MAX_ATTENTION

SX, SY = (
    1.12,
    1.28,
)  # panel pitch in data units: a unit square plus the gap (and the title above it)
PAD = 0.03  # a row's picture reaches this far beyond its panels (a point on a panel's edge stays whole)
IMAGE_SCALE = (
    2  # picture pixels per screen pixel: sharp on a high-density screen and in an exported PNG
)
MAX_PANELS = 96  # panels per gallery page; a page holds whole layers
ROW_PANELS = (
    12  # panels a row holds at most: a model with few heads a layer gets several layers a row
)
GX = 0.4  # the gap between two layers side by side in a row, in data units (beside SX's own gap)
ROW_PX = 1250  # the screen pixels a row of panels is laid out for (the page's width at 1400 px)
DIGITS = 5
TITLE_COLOUR = "#2a3f5f"  # plotly's template font colour, as the annotations the titles were


def planned_layers(sec: dict[str, Any]) -> list[int]:
    """The section's layers, or, while it fills in layer by layer (``workers.core.partials``), all it will hold."""
    return list((sec.get("partial") or {}).get("layers") or sec.get("layers", []))


def gallery_pages(
    layers: list[int], n_heads: int, *, max_panels: int = MAX_PANELS
) -> list[list[int]]:
    """Whole layers per page, at most ``max_panels`` panels a page (at least one layer)."""
    per = max(1, max_panels // max(1, n_heads))
    return [layers[i : i + per] for i in range(0, len(layers), per)]


def skeleton_section(result: dict[str, Any]) -> dict[str, Any] | None:
    """A grid section with no layer yet, shaped as the gallery the job is computing: every layer and
    head of the model over the max-attention section's tokens (None before that section is there).
    The page draws it while the first layer is embedded, so its rows wait in their places."""
    ma = result.get(MAX_ATTENTION)
    n_layers, n_heads = result.get("n_layers"), result.get("n_heads")
    if not ma or not n_layers or not n_heads:
        return None
    kept = ma.get("kept") or list(range(int(result.get("n_tokens") or 0)))
    return {
        "layers": [],
        "heads": list(range(int(n_heads))),
        "kept": list(kept),
        "embedding": [],
        "kl": [],
        "partial": {"layers_done": 0, "layers": list(range(int(n_layers)))},
    }


@dataclass(frozen=True)
class GalleryPage:
    """One page of the gallery: the section it is drawn from and what it shows."""

    section: dict[str, Any]
    shown: list[int]  # the page's layers, in order (``per_row`` of them a row)
    heads: list[int]
    kept: list[int]
    page: int
    pages: int
    done: list[int]  # the page's layers computed so far (row order)
    layers_done: int  # of the whole gallery
    layers_planned: int
    labels: Labels = field(default_factory=dict)  # the stored atlas' labels (kit/atlas_labels.py)

    @property
    def complete(self) -> bool:
        """Every layer of the gallery (not only of this page) is computed."""
        return self.layers_done >= self.layers_planned

    @property
    def shape(self) -> dict[str, Any]:
        """What fixes the figure's traces: a page of another shape is drawn anew, not updated."""
        return {"layers": self.shown, "heads": self.heads, "n": len(self.kept), "page": self.page}


def gallery_page(
    result: dict[str, Any],
    *,
    layers: list[int] | None = None,
    page: int = 0,
    max_panels: int = MAX_PANELS,
    section: dict[str, Any] | None = None,
    labels: Labels | None = None,
) -> GalleryPage | str:
    """The page to draw, or the message to show instead. ``section``: draw this one (a skeleton);
    ``labels``: the heads' atlas labels, named in the panels' titles."""
    sec = section if section is not None else gallery_section(result)
    if sec is None:
        return "The gallery of every head appears here after Analyze."
    planned = planned_layers(sec)
    heads = list(sec["heads"])
    pages = gallery_pages(
        [la for la in (layers or planned) if la in planned], len(heads), max_panels=max_panels
    )
    if not pages:
        return "None of the chosen layers is in the gallery."
    page = min(max(0, int(page or 0)), len(pages) - 1)
    shown = pages[page]
    kept = list(sec.get("kept") or range(np.shape(sec["embedding"])[2]))
    have = set(sec.get("layers", []))
    return GalleryPage(
        section=sec,
        shown=shown,
        heads=heads,
        kept=kept,
        page=page,
        pages=len(pages),
        done=[la for la in shown if la in have],
        # a stored gallery read a page at a time (frontend/kit/sections.py) says it is all done
        layers_done=int((sec.get("partial") or {}).get("layers_done", len(have))),
        layers_planned=len(planned),
        labels=dict(labels or {}),
    )


def row_image(result: dict[str, Any], gp: GalleryPage, row: int) -> dict[str, Any]:
    """Layout image of row ``row``: every head of its layer drawn into one PNG (``frontend.figures.thumbnails``),
    placed over the row's panels; or, while the layer is computed, an invisible placeholder in its
    place (the page's images are set by index as rows arrive)."""
    layer = gp.shown[row]
    x0, y0 = _origin(gp, row)
    place = {
        "xref": "x",
        "yref": "y",
        "x": x0 - PAD,
        "y": y0 - PAD,
        "sizex": _row_width(gp),
        "sizey": 1 + 2 * PAD,
        "xanchor": "left",
        "yanchor": "top",
        "sizing": "stretch",
        "layer": "above",
        "name": f"layer {layer}",
    }
    if layer not in gp.done:
        return {**place, "visible": False}
    sec = gp.section
    emb = np.asarray(
        sec["embedding"][sec["layers"].index(layer)], dtype=np.float64
    )  # [head, token, 2]
    return {**place, "source": _row_picture(emb, gp), "visible": True}


_PICTURES: OrderedDict[bytes, str] = OrderedDict()  # the last rows drawn: key -> PNG data URI
_PICTURES_KEPT = 128  # ~130 kB each at 452 tokens: ~17 MB at most
_PICTURES_LOCK = threading.Lock()


def _row_picture(emb: np.ndarray, gp: GalleryPage) -> str:
    """``_draw_row``, remembered by what it draws: a row is drawn once however many updates carry it
    (an update Dash dropped, because a newer one had started, makes the next one carry its rows again)."""
    key = hashlib.blake2b(b"".join([emb.tobytes(), np.asarray(gp.kept, np.int64).tobytes(),
                                    repr((len(gp.heads), _panel_px(gp))).encode()]), digest_size=16).digest()  # fmt: skip
    with _PICTURES_LOCK:
        if key in _PICTURES:
            _PICTURES.move_to_end(key)
            return _PICTURES[key]
    uri = _draw_row(emb, gp)
    with _PICTURES_LOCK:
        _PICTURES[key] = uri
        while len(_PICTURES) > _PICTURES_KEPT:
            _PICTURES.popitem(last=False)
    return uri


def _draw_row(emb: np.ndarray, gp: GalleryPage) -> str:
    heads, n = gp.heads, len(gp.kept)
    scale = _pixels_per_unit(gp)
    xs, ys = np.empty(len(heads) * n), np.empty(len(heads) * n)
    for c in range(len(heads)):  # the panel's unit square, quantile-equidistant, y pointing down
        xs[c * n : (c + 1) * n] = (PAD + c * SX + _unit(emb[c, :, 0])) * scale
        ys[c * n : (c + 1) * n] = (PAD + 1.0 - _unit(emb[c, :, 1])) * scale
    index = T.palette_index(
        np.tile(np.asarray(gp.kept, dtype=np.float64), len(heads)),
        lo=float(min(gp.kept)),
        hi=float(max(gp.kept)),
    )  # coloured by position
    size = (int(round(_row_width(gp) * scale)), int(round((1 + 2 * PAD) * scale)))
    img = T.draw_points(xs, ys, index, size=size, radius=_radius(n) * scale / _panel_px(gp))
    return T.png_data_uri(img, T.palette())


def _panel_px(gp: GalleryPage) -> int:
    """Screen pixels of a panel's unit square (the figure's height follows it, and its axes keep
    the panels square): a row's panels (``per_row`` layers of them) fill ``ROW_PX``."""
    return max(48, min(120, int(ROW_PX / (_width(gp) + 0.08))))


def _width(gp: GalleryPage) -> float:
    """The data units a row spans: its layers' panels and the gaps between them."""
    return min(len(gp.shown), per_row(len(gp.heads))) * _slot(gp) - GX


def _pixels_per_unit(gp: GalleryPage) -> float:
    return IMAGE_SCALE * _panel_px(gp)


def _row_width(gp: GalleryPage) -> float:
    return (len(gp.heads) - 1) * SX + 1 + 2 * PAD


def per_row(n_heads: int) -> int:
    """Layers side by side in a row of the gallery: as many whole layers as ``ROW_PANELS`` panels
    hold, at least one (2 heads a layer: 6 layers a row; 12 heads: one)."""
    return max(1, ROW_PANELS // max(1, n_heads))


def _slot(gp: GalleryPage) -> float:
    """The width of one layer's place in a row (its panels and the gap to the next layer)."""
    return len(gp.heads) * SX + GX


def _origin(gp: GalleryPage, r: int) -> tuple[float, float]:
    """Data coordinates of the top left of the ``r``-th layer of the page (its first panel)."""
    k = per_row(len(gp.heads))
    return (r % k) * _slot(gp), (r // k) * SY


def _rows(gp: GalleryPage) -> int:
    """The rows the page's layers take."""
    return -(-len(gp.shown) // per_row(len(gp.heads)))


def _radius(n: int) -> float:
    """A point's radius in screen pixels (plotly's marker size 4, or 3 beyond 200 points, is a diameter)."""
    return 2.0 if n <= 200 else 1.5


def _scale_trace(gp: GalleryPage) -> dict[str, Any]:
    """An invisible point that carries the position colour bar (the rows are pictures)."""
    lo, hi = float(min(gp.kept)), float(max(gp.kept))
    return {
        "type": "scatter",
        "x": [-1.0],
        "y": [-1.0],
        "mode": "markers",
        "hoverinfo": "skip",
        "showlegend": False,
        "name": "position",
        "marker": {
            "color": [lo],
            "colorscale": POSITION_SCALE,
            "cmin": lo,
            "cmax": hi,
            "opacity": 0,
            "showscale": True,
            "colorbar": {"title": {"text": "position"}, "thickness": 10, "len": 0.5},
        },
    }


def _frames(gp: GalleryPage) -> dict[str, Any]:
    xs, ys = [], []
    for r, layer in enumerate(gp.shown):
        if layer in gp.done:
            ox, oy = _origin(gp, r)
            for c in range(len(gp.heads)):
                x0, y0 = ox + c * SX - 0.03, oy - 0.03
                xs += [x0, x0 + 1.06, x0 + 1.06, x0, x0, None]
                ys += [y0, y0, y0 + 1.06, y0 + 1.06, y0, None]
    return {
        "type": "scatter",
        "x": xs,
        "y": ys,
        "mode": "lines",
        "line": {"color": "#ccc", "width": 1},
        "hoverinfo": "skip",
        "showlegend": False,
        "name": "panels",
    }


def _labels(gp: GalleryPage) -> dict[str, Any]:
    """The panels' titles (``L{layer}H{head} · KL {kl}``) and each waiting row's ``layer L: computing…``,
    as one text trace, not layout annotations: Plotly redraws and measures every annotation when any
    changes, text points cost a fraction of it (docs/dashboard.md, "Measured costs the code points
    to")."""
    sec = gp.section
    kl = {la: sec["kl"][i] for i, la in enumerate(sec.get("layers", []))}
    size = 9 if len(gp.heads) <= 16 else 7
    points = []  # (x, y, text, position, size, colour)
    for r, layer in enumerate(gp.shown):
        ox, oy = _origin(gp, r)
        if layer not in gp.done:  # not computed yet: the layer waits in its place
            points.append(
                (ox + 0.02, oy + 0.5, f"layer {layer}: computing…", "middle right", 12, "#888")
            )
            continue
        points += [
            (
                ox + c * SX + 0.5,
                oy - 0.06,
                f"{head_name(layer, head, gp.labels)} · KL {float(kl[layer][c]):.2f}",
                "top center",
                size,
                TITLE_COLOUR,
            )
            for c, head in enumerate(gp.heads)
        ]
    xs, ys, texts, where, sizes, colours = (
        (list(v) for v in zip(*points, strict=True)) if points else ([],) * 6
    )
    return {
        "type": "scatter",
        "x": xs,
        "y": ys,
        "text": texts,
        "mode": "text",
        "textposition": where,
        "textfont": {"size": sizes, "color": colours},
        "hoverinfo": "skip",
        "showlegend": False,
        "name": "titles",
    }


def gallery_title(gp: GalleryPage) -> str:
    """The page's title; while the page's own rows fill in, it counts the layers computed. A page whose
    rows are all there says nothing of other pages' layers: their arrival changes nothing on it, so
    the browser redraws nothing (the status line counts them)."""
    filling = not gp.complete and len(gp.done) < len(gp.shown)
    return (f"Attention-head t-SNE of every head — layers {gp.shown[0]}–{gp.shown[-1]}"
            + (f" (page {gp.page + 1} of {gp.pages})" if gp.pages > 1 else "")
            + (f" — {gp.layers_done} of {gp.layers_planned} layers so far" if filling else "")
            + " — quantile-equidistant axes, colour = position; click a panel to open it")  # fmt: skip


def _meta(gp: GalleryPage) -> dict[str, Any]:
    panels = [[layer, head] for layer in gp.done for head in gp.heads]
    return {"highlight": "points", "gallery": {"panels": panels, "layers": gp.shown, "heads": gp.heads, "sx": SX,
                                               "sy": SY, "page": gp.page, "pages": gp.pages,
                                               "per_row": per_row(len(gp.heads)), "slot": _slot(gp),
                                               "complete": gp.complete}}  # fmt: skip


def gallery_figure(
    result: dict[str, Any],
    *,
    layers: list[int] | None = None,
    page: int = 0,
    max_panels: int = MAX_PANELS,
    section: dict[str, Any] | None = None,
    labels: Labels | None = None,
) -> go.Figure:
    """Small multiples of every head of the page's layers: a layer's heads side by side, whole
    layers wrapped into rows of at most ``ROW_PANELS`` panels (``per_row``).

    Each panel: the head's map on quantile-equidistant axes, coloured by position, titled
    ``L{layer}H{head} · KL {kl}``. Traces: the panel frames, the colour bar and the titles; each row's panels are
    one picture (``row_image``, layout image ``r``): the browser places pictures, it does not plot
    the points (a software-rendered browser spent seconds a row redrawing WebGL points).
    """
    gp = gallery_page(
        result, layers=layers, page=page, max_panels=max_panels, section=section, labels=labels
    )
    if isinstance(gp, str):
        return empty_figure(gp, height=200)
    rows, panel_px = _rows(gp), _panel_px(gp)
    square = {"scaleanchor": "y", "scaleratio": 1, "constrain": "domain", "constraintoward": "left"}
    layout = {
        "title": {"text": gallery_title(gp), "font": {"size": 14}},
        "xaxis": {"visible": False, "range": [-0.08, _width(gp)], "fixedrange": True, **square},
        "yaxis": {
            "visible": False,
            "range": [rows * SY, -0.3],
            "fixedrange": True,
            "constrain": "domain",
            "constraintoward": "top",
        },  # fmt: skip
        "images": [row_image(result, gp, r) for r in range(len(gp.shown))],
        "height": int(80 + rows * panel_px * SY),
        "margin": {"l": 10, "r": 10, "t": 50, "b": 10},
        "plot_bgcolor": "white",
        "hovermode": False,
        "meta": _meta(gp),
    }
    return go.Figure([_frames(gp), _scale_trace(gp), _labels(gp)], layout)


def gallery_update(result: dict[str, Any], gp: GalleryPage, drawn: Iterable[int]) -> dict[str, Any]:
    """What changes on a page of this shape that already shows the layers ``drawn``: ``images``
    (row -> layout image of each newly computed row), and the ``frames`` and ``labels`` traces,
    ``title`` and ``meta`` (None where unchanged). Applying it twice changes nothing more."""
    drawn = set(drawn)
    new = [r for r, layer in enumerate(gp.shown) if layer in gp.done and layer not in drawn]
    changed = bool(new) or set(gp.done) != drawn
    return {
        "images": {r: row_image(result, gp, r) for r in new},
        "frames": _frames(gp) if changed else None,
        "labels": _labels(gp) if changed else None,
        "title": gallery_title(gp),
        "meta": _meta(gp),
    }


def gallery_page_options(
    result: dict[str, Any], layers: list[int] | None = None, section: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Dropdown options of the gallery's pages (``layers a–b``)."""
    sec = section if section is not None else gallery_section(result)
    if sec is None:
        return []
    planned = planned_layers(sec)
    pages = gallery_pages(
        [la for la in (layers or planned) if la in planned], len(sec.get("heads", []))
    )
    return [
        {"label": f"layers {p[0]}–{p[-1]}" if len(p) > 1 else f"layer {p[0]}", "value": i}
        for i, p in enumerate(pages)
    ]


def _unit(v: np.ndarray) -> np.ndarray:
    """Quantile-equidistant coordinates in [0, 1] (docs/analyses.md#quantile-equidistant-rescaling, k = 100)."""
    from frontend.figures.rescale import fit_axis

    return fit_axis(v, k=100).forward(v)


def _rounded(values: Any) -> list[float]:
    return np.round(np.asarray(values, dtype=np.float64), DIGITS).tolist()


def _every_head(
    result: dict[str, Any], layers: set[int] | None = None
) -> dict[tuple[int, int], tuple[list[int], np.ndarray, float, list[float]]]:
    """(layer, head) -> (kept, map ``[token, 2]``, KL, restart KLs) of every head (of ``layers``), the
    one-head section first."""
    out: dict[tuple[int, int], tuple[list[int], np.ndarray, float, list[float]]] = {}
    for sec in head_sections(result):
        kl = np.asarray(sec["kl"], dtype=np.float64)
        restarts = np.asarray(sec.get("kl_restarts", []), dtype=np.float64)
        one = kl.ndim != 2
        emb = np.asarray(sec["embedding"], dtype=np.float64) if one else None
        for li, layer in enumerate(sec.get("layers", [])):
            if layers is not None and layer not in layers:
                continue
            layer_emb = None
            for hi, head in enumerate(sec.get("heads", [])):
                if (layer, head) in out:
                    continue
                if one:
                    kept = list(sec.get("kept") or range(emb.shape[-2]))
                    out[(layer, head)] = (
                        kept,
                        emb,
                        float(kl.ravel()[0]),
                        restarts.ravel().tolist(),
                    )
                    continue
                if layer_emb is None:
                    layer_emb = np.asarray(
                        sec["embedding"][li], dtype=np.float64
                    )  # [head, token, 2]
                kept = list(sec.get("kept") or range(layer_emb.shape[-2]))
                rs = restarts[li, hi].tolist() if restarts.ndim == 3 else []
                out[(layer, head)] = (kept, layer_emb[hi], float(kl[li, hi]), rs)
    return out


def head_map_entries(
    result: dict[str, Any], *, layers: Iterable[int] | None = None, labels: Labels | None = None
) -> dict[str, Any]:
    """``{"L,H": map}`` (as in ``head_maps``) of every head of ``layers`` (default: every head);
    ``labels``: the heads' atlas labels, named in the titles."""
    maps: dict[str, Any] = {}
    for (layer, head), (_, xy, kl, restarts) in _every_head(
        result, None if layers is None else set(layers)
    ).items():
        px, py, xaxis, yaxis = scatter_axes(xy[:, 0], xy[:, 1], rescale=True)
        best = f" (best of {len(restarts)})" if len(restarts) > 1 else ""
        maps[f"{layer},{head}"] = {
            "title": f"Attention-head t-SNE — {head_name(layer, head, labels)} — KL {kl:.4f}{best}",
            "x": _rounded(px),
            "y": _rounded(py),
            "xr": _rounded(xy[:, 0]),
            "yr": _rounded(xy[:, 1]),
            "xaxis": xaxis,
            "yaxis": yaxis,
        }
    return maps


def head_maps(result: dict[str, Any], labels: Labels | None = None) -> dict[str, Any]:
    """What the browser needs to draw any head's large map at once (``assets/heads.js``).

    ``{"maps": {"L,H": {"title", "x", "y", "xr", "yr", "xaxis", "yaxis"}}, "kept", "labels",
    "templates": {"rescaled": figure, "raw": figure}}``: ``x``/``y`` and the axes are the
    quantile-equidistant plot, ``xr``/``yr`` the original coordinates (the raw plot and the hover);
    the same numbers ``figures.tsne.head_tsne_figure`` draws.
    """
    heads = _every_head(result)
    if not heads:
        return {"maps": {}}
    first = next(iter(heads))
    kept = heads[first][0]
    templates = {
        mode: head_tsne_figure(
            result, layer=first[0], head=first[1], rescale=mode == "rescaled"
        ).to_plotly_json()
        for mode in ("rescaled", "raw")
    }
    return {
        "maps": head_map_entries(result, labels=labels),
        "kept": kept,
        "labels": token_labels(result, kept),
        "templates": templates,
    }


def first_row_points(gp: GalleryPage) -> dict[str, Any]:
    """The gallery's first row as its picture draws it, in screen pixels: ``width``/``height`` of the
    row, ``left``/``top`` of its first panel in the figure (the margins and the axes' range before
    it), ``radius`` of a point, ``colours`` (``#rrggbb`` per kept token, by position) and
    ``panels``: ``(layer, head, xs, ys)`` of each computed head of the row's layers, ``frames``
    their frames' ``(left, top, side)``. A static
    picture of it (``frontend.pages.text.preview``) stands in for the row until plotly.js draws it."""
    n, px = len(gp.kept), _panel_px(gp)
    panels, frames = (
        [],
        [],
    )  # frames: (left, top, side) of each panel's frame, as ``_frames`` draws it
    for r, layer in enumerate(gp.shown[: per_row(len(gp.heads))]):
        if layer not in gp.done:
            continue
        x0, _ = _origin(gp, r)
        emb = np.asarray(gp.section["embedding"][gp.section["layers"].index(layer)], np.float64)
        for c, head in enumerate(gp.heads):
            xs = (PAD + x0 + c * SX + _unit(emb[c, :, 0])) * px
            ys = (PAD + 1.0 - _unit(emb[c, :, 1])) * px
            panels.append((layer, head, xs, ys))
            frames.append(((x0 + c * SX + PAD - 0.03) * px, (PAD - 0.03) * px, 1.06 * px))
    colours = T.colour_scale(
        np.asarray(gp.kept, np.float64), lo=float(min(gp.kept)), hi=float(max(gp.kept))
    )
    return {
        "width": (_width(gp) + 2 * PAD) * px,
        "height": (1 + 2 * PAD) * px,
        "left": 10 + (0.08 - PAD) * px,  # the figure's margin, the x axis' range before 0, the pad
        "top": 50
        + (0.3 - PAD) * px,  # the margin (the title's), the y axis' range above 0, the pad
        "radius": _radius(n),
        "colours": ["#" + "".join(f"{int(v):02x}" for v in rgb) for rgb in colours],
        "panels": panels,
        "frames": frames,
    }
