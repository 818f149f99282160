/* One-click examples (frontend/kit/frontdoor.py): a page opened with ``run=1`` in its URL presses its
   Analyze button (the page's first ``.button.primary``) once it is drawn; ``run=a,b`` clicks the
   elements with ids a, then b, each once the callbacks the one before started have answered. Not
   when the page shows that the URL's model cannot run (``.url-model-error``). The ``run`` key then
   leaves the URL, so a reload or a shared link does not run it again. */
(function () {
  function busy() { return document.querySelector('[data-dash-is-loading="true"]') !== null; }
  function waitFor(test, timeoutMs, then) {
    const start = Date.now();
    (function poll() {
      if (test()) { then(true); return; }
      if (Date.now() - start > timeoutMs) { then(false); return; }
      setTimeout(poll, 150);
    })();
  }
  // a loaded machine can take well over 30 s to draw a page: the example waits for its element as
  // long as it takes (it gave up after 30 s, leaving run=1 in the URL and Analyze unpressed), then
  // for a moment with no callback in flight (the URL's model and text put in place), but not for
  // ever: a page whose polls keep a callback in flight on a slow machine is clicked all the same
  const PATIENCE_MS = 600000;
  const QUIET_MS = 15000;
  function clickInTurn(targets) {
    if (!targets.length) { return; }
    const [first, ...rest] = targets;
    waitFor(() => first(), PATIENCE_MS, (found) => {
      if (!found) { return; }
      waitFor(() => !busy() && first(), QUIET_MS, () => {
        const el = first();
        if (!el) { return; }
        el.click();
        setTimeout(() => clickInTurn(rest), 400);
      });
    });
  }
  function start() {
    const q = new URLSearchParams(window.location.search);
    const run = q.get('run');
    if (!run) { return; }
    waitFor(() => document.querySelector('#page-content .page'), PATIENCE_MS, (ok) => {
      if (!ok || document.querySelector('.url-model-error')) { return; }
      q.delete('run');
      const rest = q.toString();
      const search = rest ? '?' + rest : '';
      window.history.replaceState(null, '', window.location.pathname + search);
      // and in Dash's own copy of the URL (the dcc.Location "url"): otherwise its next render pushes
      // the href it still holds, run=1 included, back over this one
      const dc = window.dash_clientside;
      if (dc && dc.set_props) { dc.set_props('url', {search: search, href: window.location.href}); }
      const targets = run === '1'
        ? [() => document.querySelector('#page-content .button.primary')]
        : run.split(',').map((id) => () => document.getElementById(id.trim()));
      clickInTurn(targets);
    });
  }
  if (document.readyState === 'loading') { document.addEventListener('DOMContentLoaded', start); }
  else { start(); }
})();
