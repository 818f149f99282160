"""AG Grid's bundle only where a grid is drawn (docs/dashboard.md, "Less JavaScript before a page is
done").

Dash serves every component library the process has imported on every page: ``dash_ag_grid``'s
bundle (1.3 MB, about a second of a loaded core to parse and run) was in the text explorer's page
although only a few pages draw a grid. A page that draws none gets, in place of that ``<script>``,
a small inline one (``STUB_JS``) that defines ``window.dash_ag_grid`` as components of the same names
which load the real bundle the first time one is drawn (a page reached by the navigation, without a
new document) and then draw the real component with the same props. Until it is in, the stub's
``_dashprivate_isLazyComponentReady`` is a promise of it, so that dash-renderer holds a callback
writing to a grid until the grid exists (as it does for its own lazy components). The real bundle,
once run, replaces ``window.dash_ag_grid``; later grids resolve to it directly.
"""

from __future__ import annotations

import json
import re
from types import ModuleType

# the tag Dash writes for the bundle (``dash.resources``, ``serve_locally``)
GRID_TAG = re.compile(r'<script src="([^"]*/dash_ag_grid/dash_ag_grid[^"]*\.js)"></script>')

STUB_JS = """(function () {
  var R = window.React, loading = null, real = null;
  function load() {
    if (!loading) {
      loading = new Promise(function (res, rej) {
        var s = document.createElement('script');
        s.src = SRC;
        s.onload = function () { real = window.dash_ag_grid; res(real); };
        s.onerror = function () { loading = null; rej(new Error('dash_ag_grid')); };
        document.head.appendChild(s);
      });
    }
    return loading;
  }
  function AgGrid(props) {
    var st = R.useState(function () { return real && real.AgGrid; }), grid = st[0], set = st[1];
    R.useEffect(function () {
      if (!grid) { load().then(function (ns) { set(function () { return ns.AgGrid; }); }); }
    }, []);
    return grid ? R.createElement(grid, props) : null;
  }
  AgGrid.dashRenderType = true;
  Object.defineProperty(AgGrid, '_dashprivate_isLazyComponentReady', {
    get: function () { return real ? true : load().then(function () { return true; }); }
  });
  window.dash_ag_grid = {
    AgGrid: AgGrid,
    getApi: function (id) {
      if (!real) { throw new Error('no grid is drawn yet'); }
      return real.getApi(id);
    },
    getApiAsync: function (id) { return load().then(function (ns) { return ns.getApiAsync(id); }); },
    headscopeStub: true
  };
})();"""


def grid_paths(modules: list[ModuleType]) -> set[str]:
    """The paths of the pages whose module imports ``dash_ag_grid`` (a page that is a package: any
    of its modules, e.g. ``pages/corpus/layout.py``): they keep its bundle."""
    import sys

    import dash_ag_grid

    def imports_grid(m: ModuleType) -> bool:
        inside = [m] + [
            sub for name, sub in list(sys.modules.items()) if name.startswith(m.__name__ + ".")
        ]
        return any(v is dash_ag_grid for sub in inside for v in vars(sub).values())

    return {m.PATH for m in modules if imports_grid(m)}


def defer_grid(page: str) -> str:
    """``page`` (Dash's HTML) with AG Grid's bundle loaded only once a grid is drawn."""

    def stub(match: re.Match[str]) -> str:
        src = json.dumps(match.group(1)).replace("<", "\\u003c")
        return f"<script>{STUB_JS.replace('SRC', src, 1)}</script>"

    return GRID_TAG.sub(stub, page, count=1)
