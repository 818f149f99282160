/* headscope: hovering a token highlights it in every figure of the page.
 * Every point or cell carries its token index as the first element of customdata (or as the
 * customdata itself), or the figure lists its columns' tokens once in layout.meta.tokens (the
 * attention matrix: nothing per cell but the weight); each figure's layout.meta.highlight says how
 * to mark it:
 *   "points"  - a ring around the token's point (scatter plots)
 *   "columns" - a band over the token's column (heatmaps with tokens on x)
 *   "matrix"  - the token's row and column (attention matrix)
 * The shapes are drawn with Plotly.relayout, so Dash's figure props stay as the server sent them.
 */
(function () {
  "use strict";
  var COLOUR = "#e6550d";

  /* A trace's data as drawn: numpy arrays come as typed-array specs ({dtype, bdata}) in gd.data,
     decoded in gd._fullData. */
  function traceOf(gd, t) {
    var full = gd._fullData && gd._fullData[t];
    return full && full.index === t ? full : (gd.data || [])[t];
  }

  function isList(c) { return Array.isArray(c) || ArrayBuffer.isView(c); }

  function tokenOf(point, gd) {
    if (!point) { return null; }
    var c = point.customdata;
    if ((c === undefined || (c !== null && typeof c === "object" && !isList(c))) && gd && gd.data) {
      /* Dash leaves customdata out of a heatmap's hoverData: look the cell up by x and y */
      var trace = traceOf(gd, point.curveNumber || 0);
      var listed = gd.layout && gd.layout.meta && gd.layout.meta.tokens;
      c = undefined;
      if (Array.isArray(listed)) {
        c = listed[Number(point.x)];
      } else if (trace && trace.customdata && trace.x && trace.y) {
        var i = Array.prototype.indexOf.call(trace.y, point.y), j = Array.prototype.indexOf.call(trace.x, point.x);
        if (i >= 0 && j >= 0 && trace.customdata[i]) { c = trace.customdata[i][j]; }
      }
      if (c === undefined) { c = point.x; }
    }
    if (isList(c)) { c = c[0]; }
    var t = Number(c);
    return Number.isFinite(t) ? t : null;
  }

  function plotOf(id) {
    var el = document.getElementById(id);
    return el ? el.querySelector(".js-plotly-plot") : null;
  }

  function customToken(c) {
    if (isList(c)) { c = c[0]; }
    return Number(c);
  }

  function pointShapes(gd, token) {
    var shapes = [];
    (gd.data || []).forEach(function (_, t) {
      var trace = traceOf(gd, t);
      if (!trace || !trace.customdata || !trace.x) { return; }
      for (var k = 0; k < trace.customdata.length; k++) {
        if (customToken(trace.customdata[k]) === token) {
          var axis = (trace.xaxis || "x"), yaxis = (trace.yaxis || "y");
          shapes.push({type: "circle", xref: axis, yref: yaxis, xsizemode: "pixel", ysizemode: "pixel",
                       xanchor: trace.x[k], yanchor: trace.y[k], x0: -11, x1: 11, y0: -11, y1: 11,
                       line: {color: COLOUR, width: 3}});
        }
      }
    });
    return shapes;
  }

  function columnOf(gd, token) {
    var listed = gd.layout && gd.layout.meta && gd.layout.meta.tokens;
    if (Array.isArray(listed)) {
      var at = listed.indexOf(token);
      return at >= 0 ? at : null;
    }
    var trace = traceOf(gd, 0);
    if (!trace || !trace.customdata || !trace.customdata.length) { return null; }
    var row = trace.customdata[0];
    for (var j = 0; j < row.length; j++) {
      if (customToken(row[j]) === token) { return trace.x ? trace.x[j] : j; }
    }
    return null;
  }

  function columnShapes(gd, token, matrix) {
    var j = columnOf(gd, token);
    if (j === null) { return []; }
    var shapes = [{type: "rect", xref: "x", yref: "paper", x0: j - 0.5, x1: j + 0.5, y0: 0, y1: 1,
                   line: {color: COLOUR, width: 2}, fillcolor: "rgba(230,85,13,0.08)"}];
    if (matrix) {
      shapes.push({type: "rect", xref: "paper", yref: "y", x0: 0, x1: 1, y0: j - 0.5, y1: j + 0.5,
                   line: {color: COLOUR, width: 2}, fillcolor: "rgba(230,85,13,0.08)"});
    }
    return shapes;
  }

  function highlight() {
    var args = Array.prototype.slice.call(arguments);
    var ids = args[args.length - 1] || [];
    var hovers = args.slice(0, args.length - 1);
    var ctx = window.dash_clientside.callback_context;
    var which = -1;
    if (ctx && ctx.triggered && ctx.triggered.length) {
      var prop = ctx.triggered[0].prop_id.split(".")[0];
      which = ids.indexOf(prop);
    }
    var hover = which >= 0 ? hovers[which] : null;
    var token = hover && hover.points && hover.points.length ? tokenOf(hover.points[0], plotOf(ids[which])) : null;
    if (token === null) { return window.dash_clientside.no_update; }
    ids.forEach(function (id) {
      var gd = plotOf(id);
      if (!gd || !gd.layout || !window.Plotly) { return; }
      var how = gd.layout.meta && gd.layout.meta.highlight;
      var shapes;
      if (how === "points") { shapes = pointShapes(gd, token); }
      else if (how === "columns") { shapes = columnShapes(gd, token, false); }
      else if (how === "matrix") { shapes = columnShapes(gd, token, true); }
      else { return; }
      window.Plotly.relayout(gd, {shapes: shapes});
    });
    return token;
  }

  window.dash_clientside = Object.assign({}, window.dash_clientside, {
    headscope: {highlight: highlight}
  });
})();
