"""plotly.js once per notebook (frontend/notebook/__init__.py): which output carries the bundle, and how the
others wait for it. No web or kernel library is needed to import this (IPython is looked up when a
view is shown)."""

from __future__ import annotations


class PlotlyPage:
    """plotly.js once per notebook: the first view a kernel shows carries the bundle (4.8 MB), the
    others only their figures, drawn when ``window.Plotly`` is there (at once, as outputs render in
    order; a saved notebook opened as HTML holds the carrier above them).

    Re-running the carrier's cell gives the bundle to its new output (the cell is known by the
    ``cellId`` JupyterLab, Notebook 7 and VS Code send with each execution); a view that finds no
    plotly.js in the page says how to bring it back (``hs.new_page()``, then run the cell again).
    """

    def __init__(self) -> None:
        self.carrier: tuple[str | None, str | None] | None = (
            None  # (cell id, execution's message id)
        )

    @staticmethod
    def execution() -> tuple[str | None, str | None]:
        """(cell id, message id) of the execution running now; (None, None) outside a kernel."""
        try:
            from IPython import get_ipython
        except ImportError:
            return None, None
        shell = get_ipython()
        try:
            parent = shell.get_parent() if shell is not None else {}
        except (AttributeError, TypeError):  # a terminal IPython has no parent message
            parent = {}
        return (parent.get("metadata") or {}).get("cellId"), (parent.get("header") or {}).get(
            "msg_id"
        )

    def claim(self) -> bool:
        """True when the output being made now should carry plotly.js (and it is then the carrier)."""
        now = self.execution()
        carrier = self.carrier
        if carrier is None or (
            now[0] is not None and now[0] == carrier[0] and now[1] != carrier[1]
        ):
            self.carrier = now
            return True
        return False

    def reset(self) -> None:
        self.carrier = None


PAGE = PlotlyPage()


def new_page() -> None:
    """The next view carries plotly.js again (after the output that carried it was cleared)."""
    PAGE.reset()


def plotly_js() -> str:
    """plotly.js inline, hidden from an AMD loader (require.js in classic notebooks and in nbconvert's
    pages), which would otherwise take the bundle as an anonymous module and leave no ``window.Plotly``."""
    from plotly.offline import get_plotlyjs

    return (
        "<script>window.__hsDefine = window.define; window.define = undefined;"
        "window.PlotlyConfig = {MathJaxConfig: 'local'};</script>"
        f'<script type="text/javascript">{get_plotlyjs()}</script>'
        "<script>window.define = window.__hsDefine;</script>"
    )


DEFERRED = "text/x-headscope-deferred"  # scripts of a view without plotly.js, run when it is there
DRAW_WHEN_READY = """<script>(function () {
  var view = document.getElementById(%s), tries = 0;
  (function draw() {
    if (window.Plotly) {
      var note = view.querySelector(".headscope-no-plotly");
      if (note) { note.remove(); }
      view.querySelectorAll('script[type="%s"]').forEach(function (s) { (0, eval)(s.textContent); });
      return;
    }
    if (++tries === 40 && !view.querySelector(".headscope-no-plotly")) {
      var p = document.createElement("p");
      p.className = "headscope-no-plotly";
      p.textContent = "plotly.js is not in this page (the output that carried it was cleared): run " +
        "hs.new_page() and then this cell again, or Restart & Run All.";
      view.prepend(p);
    }
    if (tries < 1200) { setTimeout(draw, 50); }
  })();
})();</script>"""
