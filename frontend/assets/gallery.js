/* headscope: the text explorer's gallery asks its server for one update at a time
 * (docs/dashboard.md, "The starvation, fixed").
 *
 * Dash drops a callback's answer once a newer call of the same callback has started. The gallery
 * callback patches the figure from what the browser holds (store text-gallery-key, written by the
 * last answer applied), so when layers arrived faster than it answered, every answer was dropped,
 * each call carried all rows since the last applied one, and the gallery only came at the end.
 *
 * The gate: a change of the job (store text-job, every new layer) asks for an update (store
 * text-gallery-tick, the gallery callback's Input) only when no update is on its way; otherwise it
 * is remembered, and asked for as soon as the answer on its way is applied (text-gallery-key
 * changes, answerApplied). So no answer is dropped, and each carries only the layers that arrived
 * while the previous one travelled. The follow-up is written with set_props: an Output of
 * answerApplied feeding the gallery would be a loop that Dash prunes ("circular callbacks that have
 * completed the loop"), which is what made the reverted cap of commit a7bcb73 hang.
 * An answer that never comes (the server failed) frees the gate after LOST_MS, and is asked again.
 */
(function () {
  "use strict";
  var NO = function () { return window.dash_clientside.no_update; };
  var LOST_MS = 30000;
  var RETRIES = 3;  /* answers lost in a row before the gate stops asking again on its own */
  var gate = {busy: null, pending: false, n: 0, lost: 0, view: '[null,0]'};  /* view: the page's default (viewKey) */

  function send() {
    gate.n += 1;
    gate.busy = gate.n;
    gate.pending = false;
    var n = gate.n;
    window.setTimeout(function () {
      if (gate.busy !== n) { return; }
      gate.busy = null;
      gate.lost += 1;
      if (gate.lost <= RETRIES) { gate.pending = true; }
      if (gate.pending) { ask(); }
    }, LOST_MS);
    return n;
  }

  /* The page's stores are in the layout only while the text explorer is shown (#text-page): a timer
   * set here (LOST_MS, DRAWN_MS, MAPS_MS, HOLD_MS) can fire after a navigation to another page, and
   * dash-renderer's set_props on an id missing from the layout throws (a page error, "Cannot read
   * properties of undefined (reading 'length')": the component's path it looks up). */
  function onPage() { return document.getElementById("text-page") !== null; }

  function ask() {
    if (!onPage()) { gate.busy = null; gate.pending = false; return; }  /* the page was left */
    window.dash_clientside.set_props("text-gallery-tick", {data: send()});
  }

  /* Input text-job -> text-gallery-tick: a new layer (or status) asks for an update unless one travels */
  function jobChanged(job) {
    if (gate.busy !== null) {
      gate.pending = true;
      return NO();
    }
    return send();
  }

  function viewKey(layers, page) {
    return JSON.stringify([(layers && layers.length) ? layers : null, page || 0]);
  }

  /* Inputs text-layers, text-gallery-page -> text-gallery-tick: another page or other layers, asked
   * for through the same gate (a call beside the gate's made Dash drop one of the two answers); the
   * same view again (a dropdown given its options re-sends its value) asks for nothing */
  function viewChanged(layers, page) {
    var key = viewKey(layers, page);
    if (key === gate.view) { return NO(); }
    gate.view = key;
    return jobChanged(null);
  }

  /* The head maps (store text-head-maps, megabytes for a stored result) are asked for once the
   * answer's rows are painted (store text-gallery-drawn, the maps callback's Input): asked for on the
   * answer, the server built them and the browser received them while it drew the gallery, on the
   * same 2 cores, and the first row waited for them. Painted: the gallery's figure has its panels,
   * then one animation frame; at most DRAWN_MS after the answer in any case. */
  var DRAWN_MS = 3000;
  var drawn = 0;
  function whenDrawn() {
    var n = (drawn += 1), start = Date.now(), done = false;
    function fire() {
      if (done || n !== drawn) { return; }
      done = true;
      var held = late.open ? null : late.pending;  /* a stored result's figures, held for this answer */
      release();
      afterHeatmaps(held, function () {
        if (onPage()) { window.dash_clientside.set_props("text-gallery-drawn", {data: n}); }
      });
    }
    (function look() {
      if (n !== drawn) { return; }
      var gd = document.querySelector("#head-gallery .js-plotly-plot");
      var meta = gd && gd._fullLayout && gd.layout && gd.layout.meta && gd.layout.meta.gallery;
      if ((meta && meta.panels && meta.panels.length) || Date.now() - start > DRAWN_MS) {
        window.requestAnimationFrame(function () { window.setTimeout(fire, 0); });
        window.setTimeout(fire, 250);  /* no frames in a hidden tab */
        return;
      }
      window.setTimeout(look, 20);
    })();
  }

  /* A stored result's head maps after its heatmaps too: asked for with them, the server built the
   * maps (megabytes) while it built the heatmaps, the browser received them while it drew them, on the
   * same 2 cores, and the page was done later. So when the gallery's answer released held figures with
   * the heatmaps among them, the maps are asked for once the heatmaps have their data and a frame has
   * passed (docs/dashboard.md, "A stored page"); at most MAPS_MS after the release. */
  var MAPS_MS = 5000;
  function afterHeatmaps(held, then) {
    var job = (held && held[0]) || {};
    if ((job.sections || []).indexOf("max-attention") < 0) { then(); return; }
    var start = Date.now(), done = false;
    function go() { if (!done) { done = true; then(); } }
    (function look() {
      var gd = document.querySelector("#max-attention-graph .js-plotly-plot");
      if ((gd && gd._fullLayout && gd.data && gd.data.length) || Date.now() - start > MAPS_MS) {
        window.requestAnimationFrame(function () { window.setTimeout(go, 0); });
        window.setTimeout(go, 250);  /* no frames in a hidden tab */
        return;
      }
      window.setTimeout(look, 20);
    })();
  }

  /* Input text-gallery-key: an answer was applied (any of the gallery's, however it was asked for) */
  function answerApplied(shown) {
    if (shown && shown.shape) { gate.view = viewKey(shown.layers, shown.shape.page); }  /* what it shows */
    gate.busy = null;
    gate.lost = 0;
    if (gate.pending) { ask(); }
    if (shown && shown.empty) { release(); }  /* no rows to paint: nothing to wait for */
    whenDrawn();
    return NO();
  }

  /* A stored result's other figures after its gallery (store text-job-late: the input of the
   * heatmaps, the open head's matrix and t-SNE, the head and model views, in place of
   * text-job-sections). Opened from its link, every figure's answer came at once, and Chromium drew
   * the 30-layer heatmaps (megabytes) and the matrix before the gallery's first row. So when the
   * first sections the page sees of a source are already finished (or failed), they are held until
   * the gallery's answer is painted (whenDrawn, at most DRAWN_MS after it) and passed on then; a
   * job the page sees computing passes through at once, as the heatmaps come before the gallery's
   * layers (docs/dashboard.md, "The gallery first"); at most HOLD_MS in any case. */
  var late = {id: undefined, open: true, pending: null};
  var HOLD_MS = 10000;
  function lateSections(sections) {
    var job = (sections && sections[0]) || {};
    if (job.id !== late.id) {
      late.id = job.id;
      late.open = !job.id || (job.status !== "finished" && job.status !== "failed");
      late.pending = null;
      if (!late.open) {  /* a gallery answer that never comes holds nothing for long */
        window.setTimeout(function () { if (late.id === job.id) { release(); } }, HOLD_MS);
      }
    }
    if (late.open) { return sections; }
    late.pending = sections;
    return NO();
  }
  function release() {
    if (late.open) { return; }
    late.open = true;
    if (late.pending !== null && onPage()) {
      window.dash_clientside.set_props("text-job-late", {data: late.pending});
      late.pending = null;
    }
  }

  var ns = (window.dash_clientside = window.dash_clientside || {});
  ns.headscope_gallery = {jobChanged: jobChanged, viewChanged: viewChanged, answerApplied: answerApplied,
                          lateSections: lateSections,
                          state: function () { return Object.assign({}, gate); }};
})();
