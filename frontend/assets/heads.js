/* headscope: switching heads in the browser, with no request to the analysis service.
 *
 * - A click anywhere in a panel of the gallery (#head-gallery, one figure whose layout.meta.gallery
 *   gives the panel pitch), on a cell of the max-attention heatmaps or of the model view picks that
 *   head: the large map is redrawn at once, in the click's own event (Plotly.react), and the head is
 *   written to the store text-pick (set_props) for everything else that follows it.
 * - selectHead merges the ways of picking a head (gallery, max-attention cell, model-view cell,
 *   the layer/head dropdowns) into text-selected and the dropdowns.
 * - drawHead draws the large attention-head t-SNE (#head-tsne-graph) of the selected head from the
 *   per-head maps the server sent once (store text-head-maps, frontend/figures_gallery.head_maps).
 * - headViewHover keeps only the hovered token's lines in the head view (layout.meta.headview).
 */
(function () {
  "use strict";
  var NO = function () { return window.dash_clientside.no_update; };

  function plotOf(id) {
    var el = document.getElementById(id);
    return el ? el.querySelector(".js-plotly-plot") : null;
  }

  function galleryPanel(gd, ev) {
    var meta = gd.layout && gd.layout.meta && gd.layout.meta.gallery;
    var fl = gd._fullLayout;
    if (!meta || !fl || !fl.xaxis || !fl.yaxis) { return null; }
    var rect = gd.getBoundingClientRect();
    var xd = fl.xaxis.p2l(ev.clientX - rect.left - fl.xaxis._offset);
    var yd = fl.yaxis.p2l(ev.clientY - rect.top - fl.yaxis._offset);
    /* a row holds per_row layers side by side, each in a slot of its own (frontend/figures/gallery.py) */
    var per = meta.per_row || 1, slot = meta.slot || (meta.heads.length * meta.sx);
    var k = Math.floor((xd + 0.04) / slot), x = xd - k * slot;
    var c = Math.floor((x + 0.04) / meta.sx), row = Math.floor((yd + 0.3) / meta.sy);
    var r = row * per + k;
    if (k < 0 || k >= per || c < 0 || row < 0 || c >= meta.heads.length || r >= meta.layers.length) { return null; }
    if (x - c * meta.sx > 1.04) { return null; }  /* the gap right of a panel */
    return {layer: meta.layers[r], head: meta.heads[c]};
  }

  function pointer(gd, ev, xa, ya) {  /* data coordinates of the event on axes (xa, ya), or null */
    var rect = gd.getBoundingClientRect();
    var px = ev.clientX - rect.left - xa._offset, py = ev.clientY - rect.top - ya._offset;
    if (px < 0 || py < 0 || px > xa._length || py > ya._length) { return null; }
    return [xa.p2l(px), ya.p2l(py)];
  }

  function heatmapCell(gd, ev) {  /* a max-attention cell: the subplot under the pointer, head = row */
    var meta = gd.layout && gd.layout.meta, fl = gd._fullLayout;
    if (!meta || !meta.layers || !fl) { return null; }
    for (var t = 0; t < (gd.data || []).length; t++) {
      var tr = gd.data[t];
      var xa = fl[(tr.xaxis || "x").replace("x", "xaxis")], ya = fl[(tr.yaxis || "y").replace("y", "yaxis")];
      var at = xa && ya ? pointer(gd, ev, xa, ya) : null;
      if (at && meta.layers[t] !== undefined) {
        var head = Math.round(at[1]);
        return head >= 0 && head < (tr.y || []).length ? {layer: meta.layers[t], head: head} : null;
      }
    }
    return null;
  }

  function modelCell(gd, ev) {
    var fl = gd._fullLayout, at = fl && fl.xaxis ? pointer(gd, ev, fl.xaxis, fl.yaxis) : null;
    return at ? fromModelView({points: [{x: at[0], y: at[1]}]}) : null;
  }

  var PICKERS = {"head-gallery": galleryPanel, "max-attention-graph": heatmapCell, "model-view-graph": modelCell};
  var shown = {maps: null, viewOpts: ["rescale"]};  /* what drawHead last drew from */

  document.addEventListener("click", function (ev) {
    var host = ev.target && ev.target.closest
      ? ev.target.closest("#head-gallery, #max-attention-graph, #model-view-graph") : null;
    if (!host) { return; }
    var gd = host.querySelector(".js-plotly-plot");
    var picked = gd ? PICKERS[host.id](gd, ev) : null;
    if (!picked || !window.dash_clientside || !window.dash_clientside.set_props) { return; }
    headInUrl(picked);  /* the link holds the head from the click on, before Dash's round */
    var map = plotOf("head-tsne-graph");
    if (map && window.Plotly && shown.maps) {  /* draw now; Dash's own update then finds it drawn */
      var fig = drawHead(picked, shown.viewOpts, shown.maps);
      window.Plotly.react(map, fig.data, fig.layout);
    }
    window.dash_clientside.set_props("text-pick", {data: {layer: picked.layer, head: picked.head}});
  }, true);

  /* the page's URL with the picked head (the same keys as viewUrl) */
  function headInUrl(picked) {
    if (!window.history || !window.history.replaceState) { return; }
    var q = new URLSearchParams(window.location.search);
    q.set("layer", String(picked.layer));
    q.set("head", String(picked.head));
    window.history.replaceState(window.history.state, "", window.location.pathname + "?" + q.toString());
  }

  /* The URL query of the text page's view, as frontend.kit.data.source_query(source, text._view(...))
     builds it, computed in the browser so that a head picked by a click is in the URL in the same
     turn as its map (a server callback would answer later, and a slower earlier answer could
     overwrite it). None/empty values are left out, booleans are 1/0, lists comma-joined. */
  function viewUrl(source, layer, head, viewOpts, reduction, layers, gpage, hvHeads, threshold) {
    if (!source || !source.id) { return NO(); }
    var params = [[source.kind === "share" ? "share" : "analysis", source.id], ["layer", layer],
      ["head", head], ["rescale", (viewOpts || []).indexOf("rescale") >= 0 ? 1 : 0],
      ["reduction", reduction], ["layers", layers && layers.length ? layers.join(",") : null],
      ["gpage", gpage || null], ["hv_heads", hvHeads && hvHeads.length ? hvHeads.join(",") : null],
      ["threshold", threshold]];
    var q = new URLSearchParams();
    params.forEach(function (kv) {
      if (kv[1] !== null && kv[1] !== undefined && kv[1] !== "") { q.append(kv[0], String(kv[1])); }
    });
    var search = "?" + q.toString();
    return search === window.location.search ? NO() : search;
  }

  function fromMaxAttention(click) {
    var p = click && click.points && click.points[0];
    if (!p) { return null; }
    if (Array.isArray(p.customdata) && p.customdata.length === 3) {
      return {layer: Number(p.customdata[1]), head: Number(p.customdata[2])};
    }
    var gd = plotOf("max-attention-graph");
    var layers = gd && gd.layout && gd.layout.meta && gd.layout.meta.layers;
    if (!layers || layers[p.curveNumber] === undefined) { return null; }
    return {layer: Number(layers[p.curveNumber]), head: Number(p.y)};
  }

  function fromModelView(click) {
    var p = click && click.points && click.points[0];
    var gd = plotOf("model-view-graph");
    var meta = gd && gd.layout && gd.layout.meta && gd.layout.meta.modelview;
    if (!p || !meta) { return null; }
    var x = Math.round(Number(p.x)), y = Math.round(Number(p.y));
    if (x % meta.stride >= meta.size || y % meta.stride >= meta.size) { return null; }
    var layer = meta.layers[Math.floor(y / meta.stride)], head = meta.heads[Math.floor(x / meta.stride)];
    return (layer === undefined || head === undefined) ? null : {layer: layer, head: head};
  }

  function selectHead(pick, maClick, mvClick, layer, head, selected) {
    var ctx = window.dash_clientside.callback_context;
    var trig = ctx && ctx.triggered && ctx.triggered.length ? ctx.triggered[0].prop_id : "";
    var sel = null;
    if (trig === "text-pick.data") { sel = pick; }
    else if (trig === "max-attention-graph.clickData") { sel = fromMaxAttention(maClick); }
    else if (trig === "model-view-graph.clickData") { sel = fromModelView(mvClick); }
    else if (layer !== null && layer !== undefined && head !== null && head !== undefined) {
      sel = {layer: Number(layer), head: Number(head)};
    }
    if (!sel) { return [NO(), NO(), NO()]; }
    if (selected && selected.layer === sel.layer && selected.head === sel.head) {
      return [NO(), NO(), NO()];
    }
    return [{layer: sel.layer, head: sel.head}, sel.layer, sel.head];
  }

  function emptyFigure(message) {  /* as frontend/figures/base.py's, EMPTY_PX high */
    return {data: [], layout: {height: 90, xaxis: {visible: false}, yaxis: {visible: false},
      plot_bgcolor: "white", margin: {l: 20, r: 20, t: 20, b: 20},
      annotations: [{text: message, xref: "paper", yref: "paper", x: 0.5, y: 0.5, showarrow: false,
                     font: {size: 14, color: "#555"}}]}};
  }

  function drawHead(selected, viewOpts, maps) {
    shown.maps = maps || shown.maps;
    shown.viewOpts = viewOpts || [];
    if (!selected) {
      return emptyFigure("Click a panel of the gallery or a cell of the heatmaps to open that head.");
    }
    var m = maps && maps.maps && maps.maps[selected.layer + "," + selected.head];
    if (!m) {
      return emptyFigure((maps && maps.message) ||
                         ("No attention-head t-SNE for layer " + selected.layer + ", head " + selected.head + " yet."));
    }
    var rescale = (viewOpts || []).indexOf("rescale") >= 0;
    var gd = plotOf("head-tsne-graph");
    if (gd && gd.layout && gd.layout.title && gd.layout.title.text === m.title && gd.layout.meta &&
        gd.layout.meta.rescaled === rescale && gd.data && gd.data.length === 1) {
      return {data: gd.data, layout: gd.layout};  /* already drawn by the click: nothing to redo */
    }
    var tpl = maps.templates[rescale ? "rescaled" : "raw"];
    var fig = JSON.parse(JSON.stringify(tpl));
    var tr = fig.data[0], labels = maps.labels, kept = maps.kept;
    tr.x = rescale ? m.x : m.xr;
    tr.y = rescale ? m.y : m.yr;
    tr.customdata = kept.map(function (t, i) { return [t, m.xr[i], m.yr[i], labels[i]]; });
    fig.layout.title = Object.assign({}, fig.layout.title, {text: m.title});
    if (rescale) {
      fig.layout.xaxis = Object.assign({}, fig.layout.xaxis, m.xaxis);
      fig.layout.yaxis = Object.assign({}, fig.layout.yaxis, m.yaxis);
    }
    fig.layout.shapes = [];
    return fig;
  }

  function message(layout) {  /* the text of an empty figure's one annotation */
    var a = layout && layout.annotations;
    return a && a.length === 1 ? a[0].text : null;
  }

  function drawHeadOnMaps(maps, selected, viewOpts) {  /* new maps (a layer of the gallery arrived) */
    var fig = drawHead(selected, viewOpts, maps);
    var gd = plotOf("head-tsne-graph");
    if (gd && fig.data === gd.data) { return NO(); }  /* the head on screen has not changed: leave it */
    if (gd && !fig.data.length && !(gd.data || []).length && message(fig.layout) !== null &&
        message(fig.layout) === message(gd.layout)) {
      return NO();  /* the same empty figure (no head selected): not redrawn with every layer */
    }
    return fig;
  }

  function headViewHover(hover, figure) {
    var gd = plotOf("head-view-graph");
    var meta = gd && gd.layout && gd.layout.meta && gd.layout.meta.headview;
    if (!gd || !meta || !window.Plotly) { return NO(); }
    var p = hover && hover.points && hover.points[0];
    var token = null, side = null;
    if (p && Array.isArray(p.customdata) && p.customdata.length === 2) {
      token = Number(p.customdata[0]); side = p.customdata[1];
    }
    var kept = (gd.data[meta.traces.length] || {}).customdata || [];
    var row = -1;
    for (var i = 0; i < kept.length; i++) { if (Number(kept[i][0]) === token) { row = i; } }
    var xs = [], ys = [];
    meta.traces.forEach(function (t, k) {
      var x = [], y = [];
      meta.pairs[k].forEach(function (qk) {
        if (row >= 0 && (side === "query" ? qk[0] : qk[1]) !== row) { return; }
        x.push(0, 1, null); y.push(qk[0], qk[1], null);
      });
      xs.push(x); ys.push(y);
    });
    window.Plotly.restyle(gd, {x: xs, y: ys}, meta.traces);
    return row >= 0 ? token : null;
  }

  var ns = (window.dash_clientside = window.dash_clientside || {});
  ns.headscope_heads = {selectHead: selectHead, drawHead: drawHead, drawHeadOnMaps: drawHeadOnMaps,
                        headViewHover: headViewHover, viewUrl: viewUrl,
                        galleryPanel: galleryPanel};  /* also the notebook's gallery (frontend/notebook/__init__.py) */
})();
