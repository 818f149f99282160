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

import html
import json
import logging
import re
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import plotly.graph_objects as go
import plotly.io as pio

from frontend.figures.attention import attention_matrix_figure, max_attention_figure
from frontend.figures.gallery import gallery_figure, head_maps
from frontend.figures.headview import head_view_figure, model_view_figure
from frontend.figures.tsne import head_tsne_figure
from frontend.kit.heads import gallery_section
from frontend.notebook.page import DEFERRED, DRAW_WHEN_READY, PAGE, plotly_js
from frontend.notebook.page import (
    new_page as new_page,  # hs.new_page(): plotly.js again in the next view
)
from workers.analyses.attention.spec import MAX_ATTENTION
from workers.analyses.decomposition.spec import DECOMPOSITION
from workers.analyses.lasf.spec import LASF
from workers.analyses.tsne.spec import ALL_HEADS, HEAD_TSNE
from workers.core.errors import HeadscopeError
from workers.core.notation import head_label
from workers.engine.atlas import atlas as atlas  # hs.atlas("minilm"): docs/notebook.md
from workers.engine.atlas import head_labels as head_labels
from workers.engine.atlas import label_of as label_of

logger = logging.getLogger(__name__)

HEADS_JS = Path(__file__).resolve().parents[1] / "assets" / "heads.js"
EXPORT_WIDTH = 1000  # px of a PNG/SVG whose figure sets no width
RESULT_KEYS = (MAX_ATTENTION, HEAD_TSNE, ALL_HEADS, DECOMPOSITION, "checkpoints", LASF)


class ExportError(HeadscopeError):
    """A PNG/SVG export that cannot run here (no kaleido, no Chrome); HTML export still works."""


# ---------------------------------------------------------------------------- the inline object


class View:
    """Figures shown inline in a notebook (plotly.js once per notebook) and saved as PNG, SVG or HTML.

    ``figures`` maps a name to a plotly Figure (``view.figures["gallery"]`` is a plain Figure to
    restyle); ``script`` is JavaScript run after the figures are drawn, with ``{ids}`` (name -> div
    id) substituted, for views that react to clicks in the page itself.
    """

    def __init__(self, figures: dict[str, go.Figure], *, title: str, script: str = ""):
        self.figures = figures
        self.title = title
        self.script = script

    def __repr__(self) -> str:
        return f"<headscope {self.title}: {', '.join(self.figures)}>"

    def html(self, *, include_plotlyjs: bool = True) -> str:
        """The HTML fragment: plotly.js (``include_plotlyjs``), each figure in its own div (fresh
        ids), then the view's script; without plotly.js the scripts wait for ``window.Plotly``."""
        ids = {name: f"hs-{name}-{uuid.uuid4().hex[:10]}" for name in self.figures}
        parts = []
        for name, fig in self.figures.items():
            config = {
                "displaylogo": False,
                "responsive": True,
                "toImageButtonOptions": {
                    "format": "png",
                    "filename": f"headscope-{name}",
                    "scale": 2,
                },
            }
            parts.append(
                pio.to_html(
                    fig, include_plotlyjs=False, full_html=False, div_id=ids[name], config=config
                )
            )
        script = (
            f"<script>{self.script.replace('{ids}', json.dumps(ids))}</script>"
            if self.script
            else ""
        )
        body = "".join(parts) + script
        if include_plotlyjs:
            return f'<div class="headscope-view">{plotly_js()}{body}</div>'
        view_id = f"hs-view-{uuid.uuid4().hex[:10]}"
        deferred = re.sub(r"<script\b[^>]*>", f'<script type="{DEFERRED}">', body)
        if deferred.count(DEFERRED) != body.count("</script>"):
            raise RuntimeError(
                "a view's scripts could not all be deferred (plotly's HTML changed?)"
            )
        return (
            f'<div class="headscope-view" id="{view_id}">{deferred}'
            f"{DRAW_WHEN_READY % (json.dumps(view_id), DEFERRED)}</div>"
        )

    def _repr_html_(self) -> str:
        """Inline in a notebook: plotly.js in the first view a kernel shows only (``PlotlyPage``)."""
        return self.html(include_plotlyjs=PAGE.claim())

    def to_html(self) -> str:
        """A standalone page (plotly.js inline) that works offline, interactive as in the notebook."""
        return (
            '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
            f"<title>{html.escape(self.title)}</title>"
            "<style>body{font-family:sans-serif;margin:16px}</style></head><body>"
            f"<h1>{html.escape(self.title)}</h1>{self.html()}</body></html>\n"
        )

    def save(self, path: str | Path, *, scale: float = 2.0, width: int | None = None) -> list[Path]:
        """Write the view to ``path`` by its suffix: ``.html`` (one offline page), ``.png``/``.svg``/
        ``.pdf`` (one file per figure: ``path`` itself for one figure, ``stem-NAME.png`` for several).

        Raises:
            ExportError: PNG/SVG/PDF without kaleido or without a Chrome/Chromium for it.
        """
        path = Path(path)
        fmt = path.suffix.lower().lstrip(".")
        if fmt in ("html", "htm"):
            path.write_text(self.to_html(), encoding="utf-8")
            return [path]
        if fmt not in ("png", "svg", "pdf"):
            raise HeadscopeError(
                f"cannot save a view as {path.suffix or 'a file without suffix'}: use .html, .png, .svg or .pdf"
            )
        names = list(self.figures)
        paths = (
            [path]
            if len(names) == 1
            else [path.with_name(f"{path.stem}-{n}{path.suffix}") for n in names]
        )
        figs = list(self.figures.values())
        widths = [width or f.layout.width or EXPORT_WIDTH for f in figs]
        try:
            import kaleido  # noqa: F401 - the engine plotly uses; its absence is the usual reason
        except ImportError as exc:
            raise ExportError(
                "PNG/SVG export needs the kaleido package (pip install kaleido) and a "
                "Chrome or Chromium; .html export needs neither"
            ) from exc
        try:
            pio.write_images(figs, paths, format=fmt, scale=scale, width=widths)
        except (RuntimeError, ValueError, OSError) as exc:
            raise ExportError(
                f"PNG/SVG export failed ({exc}); kaleido needs a Chrome or Chromium "
                "(e.g. apt-get install chromium); .html export needs neither"
            ) from exc
        return paths


# ---------------------------------------------------------------------------- sources


def share(
    url: str, share_id: str | None = None, *, token: str | None = None, timeout: float = 30.0
) -> dict[str, Any]:
    """The result behind a share link of a running service: ``share("http://host:8050/?share=ID")``
    or ``share("http://host:8050", "ID")``; fetched over HTTP, never recomputed."""
    from frontend.kit.api_client import ApiClient, ApiError

    parts = urlsplit(url)
    if share_id is None:
        share_id = (parse_qs(parts.query).get("share") or [""])[0]
        if not share_id:
            raise HeadscopeError(
                f"{url} holds no share id: pass a link with ?share=ID or the id as share_id="
            )
    base = f"{parts.scheme}://{parts.netloc}"
    client = ApiClient(base, timeout=timeout, token=token)
    try:
        payload = client.share(share_id)
    except ApiError as exc:
        raise HeadscopeError(f"share {share_id} from {base}: {exc}") from exc
    finally:
        client.close()
    return payload["result"]


def load(source: dict[str, Any] | str | Path) -> dict[str, Any]:
    """headscope's own result from a result dict, a saved JSON file (the result itself, the
    dashboard's Download JSON, the CLI's ``--out`` or a share's payload) or a share link."""
    if isinstance(source, dict):
        if "result" in source and isinstance(source["result"], dict):  # download / share payload
            return load(source["result"])
        if "analysis" in source and source["analysis"] not in source:  # the CLI's flat form
            return {**source, source["analysis"]: source}
        if (
            "distance_matrix" in source and "checkpoints" not in source
        ):  # `headscope pe` on one file
            return {"checkpoints": [source]}
        if not any(k in source for k in RESULT_KEYS):
            raise HeadscopeError(
                f"this dict is no headscope result: none of {', '.join(RESULT_KEYS)} in it"
            )
        return source
    if isinstance(source, str | Path):
        text = str(source)
        if text.startswith(("http://", "https://")):
            return share(text)
        path = Path(text).expanduser()
        if not path.is_file():
            raise HeadscopeError(f"no result file at {path}")
        try:
            return load(json.loads(path.read_text(encoding="utf-8")))
        except ValueError as exc:
            raise HeadscopeError(f"{path} is not a result JSON: {exc}") from exc
    raise HeadscopeError(
        f"cannot read a headscope result from a {type(source).__name__}; pass a result dict, a JSON path, "
        "a share link, or attention maps with their tokens: view(attentions, tokens)"
    )


def _result(
    source: Any,
    tokens: Sequence[str] | None,
    *,
    analyses: Sequence[str],
    select: dict[str, Any] | None = None,
    byo: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The result to draw: headscope's own (``load``), or computed from attention brought with its
    tokens — only ``analyses`` of only the heads in ``select`` (``layers``/``heads``) the view shows."""
    byo = dict(byo or {})
    if tokens is None:
        if byo:
            raise HeadscopeError(
                f"{', '.join(sorted(byo))}: options of attention you bring; pass its tokens too"
            )
        return load(source)
    from workers.analyses.tsne import TSNEOptions
    from workers.engine.external import attention_result

    if isinstance(byo.get("options"), dict):
        byo["options"] = TSNEOptions(**byo["options"])
    return attention_result(source, tokens, analyses=analyses, **{**(select or {}), **byo})


def attention(attentions: Any, tokens: Sequence[str], **options: Any) -> dict[str, Any]:
    """A result of max-attention and every head's t-SNE from attention you bring (computed once,
    then drawn by any view): see ``workers.engine.external.attention_result`` for the options."""
    return _result(attentions, tokens, analyses=(MAX_ATTENTION, HEAD_TSNE), byo=options)


def analyze(
    model: str, text: str, analyses: Sequence[str] | None = None, **options: Any
) -> dict[str, Any]:
    """headscope's own result: ``pipeline.analyze`` on a catalogue model (``minilm``, …) and a text;
    ``analyses`` default to max-attention and every head's t-SNE (``lasf`` for a shipped LasF model,
    ``lasf-minilm``); ``options`` as the CLI's (``drop_special=True``, ``n_iter=300``, …)."""
    from workers.analyses.lasf.checkpoint import shipped_path
    from workers.engine.pipeline import analyze as run
    from workers.models import load_model

    lasf, path = None, shipped_path(model)
    if path is not None:
        from workers.analyses.lasf.fields import load_lasf

        lasf = load_lasf(path, name=model)
        model = str(lasf.config["base_model"])
    kinds = list(analyses or ([LASF] if lasf is not None else [MAX_ATTENTION, HEAD_TSNE]))
    return run(load_model(model), text, kinds, options, lasf=lasf)


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
    result = _result(source, tokens, analyses=(MAX_ATTENTION,), byo=byo)
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
    result = _result(source, tokens, analyses=(HEAD_TSNE,), byo=byo)
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
    result = _result(
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
    result = _result(source, tokens, analyses=(HEAD_TSNE,), select={"layers": [layer]}, byo=byo)
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
    result = _result(source, tokens, analyses=(HEAD_TSNE,), byo=byo)
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

    result = _own(source, DECOMPOSITION, "terms")
    figures = {
        "terms": term_curves_figure(result),
        "heads": head_contributions_figure(result, state=state),
    }
    if compare is not None:
        figures["compare"] = model_compare_figure(result, _own(compare, DECOMPOSITION, "terms"))
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

    result = _own(source, "checkpoints", "pe")
    figures = {
        "distances": pe_distance_figure(result, reorder=reorder, shared_scale=shared_scale),
        "map": pe_map_figure(result, colour_by=colour_by, grid=grid),
    }
    return View(figures, title="positional encodings")


def lasf(source: Any, *, field: int | None = None) -> View:
    """The LasF page's figures (Φ, relations, the field's matrix and map, contributions, ablation,
    field vs head) of a ``lasf`` result: ``hs.lasf(hs.analyze("lasf-minilm", text))``."""
    from frontend.figures.lasf import all_figures

    result = _own(source, LASF, "lasf")
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


def _own(source: Any, key: str, view: str) -> dict[str, Any]:
    """headscope's own result holding ``key``: these views need more than attention maps."""
    result = load(source)
    if key not in result:
        raise HeadscopeError(
            f"{view}() needs a result with {key!r} (headscope's own analysis); this one has "
            f"{', '.join(k for k in result if k in RESULT_KEYS) or 'none of the views'}"
        )
    return result
