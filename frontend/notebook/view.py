"""The inline object every notebook view returns (docs/notebook.md): figures shown in Jupyter,
JupyterLab and VS Code with plotly.js once per notebook (``frontend/notebook/page.py``), and saved as
an offline HTML page or as PNG/SVG/PDF through kaleido."""

from __future__ import annotations

import html
import json
import re
import uuid
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio

from frontend.notebook.page import DEFERRED, DRAW_WHEN_READY, PAGE, plotly_js
from workers.core.errors import HeadscopeError

EXPORT_WIDTH = 1000  # px of a PNG/SVG whose figure sets no width


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
