"""headscope in a notebook: every view inline in Jupyter, JupyterLab and VS Code, offline.

Each function returns a ``View``: the same figures the dashboard draws (the pure functions of
``frontend/figures/``) shown inline through ``_repr_html_``, offline (no CDN, no server): the
first view a kernel shows carries plotly.js, the others draw with it (``PlotlyPage``), and saved with ``View.save`` as PNG/SVG (kaleido and a Chrome/Chromium) or as a
standalone HTML page that works offline. docs/notebook.md lists what to type for each view::

    from frontend import notebook as hs
    result = hs.analyze("minilm", "The cat sat on the mat.")     # or a result dict / JSON path / share link
    hs.heatmaps(result)                                          # max attention, every layer
    hs.gallery(result)                                           # every head's t-SNE; click a panel
    hs.head_view(out.attentions, tokens, layer=2)                # bring your own attention (bertviz's shape)

A source is headscope's own result (a dict from ``workers.engine.pipeline.analyze``, a saved
result JSON, or a share link of a running service, ``http://host:8050/?share=ID``), or attention you
bring: the ``output_attentions=True`` tuple of any model plus its tokens, from which
``workers.engine.external.attention_result`` computes what the view needs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import plotly.io as pio

from frontend.figures.attention import attention_matrix_figure, max_attention_figure
from frontend.figures.gallery import gallery_figure, head_maps
from frontend.figures.headview import head_view_figure, model_view_figure
from frontend.figures.tsne import head_tsne_figure
from frontend.kit.heads import gallery_section
from frontend.notebook.page import (
    new_page as new_page,  # hs.new_page(): plotly.js again in the next view
)
from frontend.notebook.sources import RESULT_KEYS as RESULT_KEYS
from frontend.notebook.sources import analyze as analyze  # hs.analyze("minilm", text)
from frontend.notebook.sources import attention as attention
from frontend.notebook.sources import load as load
from frontend.notebook.sources import own_result, result_of
from frontend.notebook.sources import share as share
from frontend.notebook.view import EXPORT_WIDTH as EXPORT_WIDTH
from frontend.notebook.view import ExportError as ExportError  # hs.ExportError
from frontend.notebook.view import View as View
from workers.analyses.attention.spec import MAX_ATTENTION
from workers.analyses.decomposition.spec import DECOMPOSITION
from workers.analyses.lasf.spec import LASF
from workers.analyses.tsne.spec import HEAD_TSNE
from workers.core.errors import HeadscopeError
from workers.core.notation import head_label
from workers.engine.atlas import atlas as atlas  # hs.atlas("minilm"): docs/notebook.md
from workers.engine.atlas import head_labels as head_labels
from workers.engine.atlas import label_of as label_of

logger = logging.getLogger(__name__)

HEADS_JS = Path(__file__).resolve().parents[1] / "assets" / "heads.js"


# ---------------------------------------------------------------------------- the views


def heatmaps(
    source: Any,
    tokens: Sequence[str] | None = None,
    *,
    reduction: str = "max",
    layers: list[int] | None = None,
    **byo: Any,
) -> View:
    """Max-attention (or ``reduction="mean"``) heatmaps, heads x tokens, one per layer."""
    result = result_of(source, tokens, analyses=(MAX_ATTENTION,), byo=byo)
    return View(
        {"heatmaps": max_attention_figure(result, reduction=reduction, layers=layers)},
        title=f"{reduction} attention — {result.get('model', '')}",
    )


GALLERY_SCRIPT = """
(function () {
  var ids = {ids}, maps = %s, ns = window.dash_clientside.headscope_heads;
  var g = document.getElementById(ids.gallery), m = document.getElementById(ids.map);
  if (!g || !m || !ns || !window.Plotly) { return; }
  g.addEventListener("click", function (ev) {  /* a click anywhere in a panel opens that head */
    var picked = ns.galleryPanel(g, ev);
    if (!picked) { return; }
    var fig = ns.drawHead(picked, ["rescale"], maps);
    window.Plotly.react(m, fig.data, fig.layout);
    m.setAttribute("data-head", picked.layer + "," + picked.head);
  });
})();
"""


def gallery(
    source: Any,
    tokens: Sequence[str] | None = None,
    *,
    layers: list[int] | None = None,
    page: int = 0,
    open_head: tuple[int, int] | None = None,
    atlas: dict[str, Any] | None = None,
    **byo: Any,
) -> View:
    """Every head's attention-head t-SNE as small multiples; clicking a panel opens that head's map
    below it, in the page (the dashboard's ``assets/heads.js``, no kernel round trip). ``atlas``
    (``hs.atlas(...)``): each panel and the open map named with its head's label."""
    labels = head_labels(atlas) if atlas is not None else None
    result = result_of(source, tokens, analyses=(HEAD_TSNE,), byo=byo)
    sec = gallery_section(result)
    if sec is None:
        raise HeadscopeError(
            "this result holds no gallery: analyse with layer and head 'all' (head-tsne)"
        )
    layer, head = open_head or (sec["layers"][0], sec["heads"][0])
    maps = head_maps(result, labels)
    script = (
        HEADS_JS.read_text(encoding="utf-8")
        + "\n"
        + GALLERY_SCRIPT % pio.json.to_json_plotly(maps).replace("</", "<\\/")
    )
    figures = {
        "gallery": gallery_figure(result, layers=layers, page=page, labels=labels),
        "map": head_tsne_figure(result, layer=layer, head=head),
    }
    return View(
        figures,
        title=f"attention-head t-SNE of every head — {result.get('model', '')}",
        script=script,
    )


def head_map(
    source: Any,
    tokens: Sequence[str] | None = None,
    *,
    layer: int,
    head: int,
    rescale: bool = True,
    matrix: bool = True,
    **byo: Any,
) -> View:
    """One head's attention-head t-SNE (quantile-equidistant axes unless ``rescale=False``) and,
    when ``matrix``, its attention matrix."""
    result = result_of(
        source,
        tokens,
        analyses=(HEAD_TSNE,),
        select={"layers": [layer], "heads": [head]},
        byo=byo,
    )
    figures = {"map": head_tsne_figure(result, layer=layer, head=head, rescale=rescale)}
    if matrix:
        figures["matrix"] = attention_matrix_figure(result, layer=layer, head=head)
    return View(figures, title=f"{head_label(layer, head)} — {result.get('model', '')}")


def head_view(
    source: Any,
    tokens: Sequence[str] | None = None,
    *,
    layer: int = 0,
    heads: list[int] | None = None,
    threshold: float = 0.05,
    atlas: dict[str, Any] | None = None,
    **byo: Any,
) -> View:
    """bertviz's head view: lines from queries (left) to keys (right), one colour per head of
    ``layer`` (all its heads unless ``heads``), weights below ``threshold`` left out; ``atlas``
    (``hs.atlas(...)``): each head named with its label in the title and the legend."""
    result = result_of(source, tokens, analyses=(HEAD_TSNE,), select={"layers": [layer]}, byo=byo)
    sec = gallery_section(result)
    chosen = (
        heads
        if heads is not None
        else list((sec or {}).get("heads") or range(int(result.get("n_heads") or 0)))
    )
    return View(
        {
            "head_view": head_view_figure(
                result,
                layer=layer,
                heads=chosen,
                threshold=threshold,
                labels=head_labels(atlas) if atlas is not None else None,
            )
        },
        title=f"head view, layer {layer} — {result.get('model', '')}",
    )


def atlas_grid(source: Any) -> View:
    """The head atlas as the /heads page draws it: layers x heads coloured by label (tentative
    pale); ``source`` as ``hs.atlas`` takes it (a model name computes the atlas)."""
    from frontend.figures.atlas import atlas_grid_figure

    sec = source if isinstance(source, dict) and "heads" in source else atlas(source)
    model = str(sec.get("model") or "")
    return View({"atlas": atlas_grid_figure(sec, model=model)}, title=f"head atlas — {model}")


def model_view(
    source: Any,
    tokens: Sequence[str] | None = None,
    *,
    layer: int | None = None,
    head: int | None = None,
    **byo: Any,
) -> View:
    """Every head's attention pattern, layers down and heads across; (layer, head) framed if given."""
    result = result_of(source, tokens, analyses=(HEAD_TSNE,), byo=byo)
    return View(
        {"model_view": model_view_figure(result, layer=layer, head=head)},
        title=f"model view — {result.get('model', '')}",
    )


def terms(source: Any, *, compare: Any = None, state: int | None = None) -> View:
    """Term-importance curves (input, attention, feed-forward, bias) and each head's contribution,
    from a ``decomposition`` result; ``compare``: a second model's result for Spearman's ρ."""
    from frontend.figures.terms import (
        head_contributions_figure,
        model_compare_figure,
        term_curves_figure,
    )

    result = own_result(source, DECOMPOSITION, "terms")
    figures = {
        "terms": term_curves_figure(result),
        "heads": head_contributions_figure(result, state=state),
    }
    if compare is not None:
        figures["compare"] = model_compare_figure(
            result, own_result(compare, DECOMPOSITION, "terms")
        )
    return View(figures, title=f"term importance — {result.get('model', '')}")


def pe(
    source: Any,
    *,
    reorder: bool = True,
    shared_scale: bool = False,
    colour_by: str = "row",
    grid: tuple[int, int] | None = (4, 4),
) -> View:
    """The PE explorer's distance heatmaps (reordered by partition) and 2-D maps of a PE result."""
    from frontend.figures.positional import pe_distance_figure, pe_map_figure

    result = own_result(source, "checkpoints", "pe")
    figures = {
        "distances": pe_distance_figure(result, reorder=reorder, shared_scale=shared_scale),
        "map": pe_map_figure(result, colour_by=colour_by, grid=grid),
    }
    return View(figures, title="positional encodings")


def lasf(source: Any, *, field: int | None = None) -> View:
    """The LasF page's figures (Φ, relations, the field's matrix and map, contributions, ablation,
    field vs head) of a ``lasf`` result: ``hs.lasf(hs.analyze("lasf-minilm", text))``."""
    from frontend.figures.lasf import all_figures

    result = own_result(source, LASF, "lasf")
    names = (
        "phi",
        "relation",
        "field_matrix",
        "field_map",
        "contribution",
        "ablation",
        "field_vs_head",
    )
    return View(
        dict(zip(names, all_figures(result, field), strict=True)),
        title=f"LasF — {result.get('model', '')}",
    )
