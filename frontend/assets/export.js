/* headscope: the image format switch (PNG / SVG) of the modebar's camera button.
 * dcc.Graph replots only when its figure changes, so a new config would wait for the next figure:
 * this applies it to the figures on screen at once (Plotly.react with the same data and layout).
 */
(function () {
  "use strict";
  function setImageFormat(format, ids) {
    (ids || []).forEach(function (id) {
      var el = document.getElementById(id);
      var gd = el ? el.querySelector(".js-plotly-plot") : null;
      if (!gd || !gd.data || !window.Plotly) { return; }
      var config = {displaylogo: false,
                    toImageButtonOptions: {format: format || "png", filename: "headscope-" + id, scale: 2}};
      window.Plotly.react(gd, gd.data, gd.layout, config);
    });
    return format;
  }
  var ns = (window.dash_clientside = window.dash_clientside || {});
  ns.headscope_export = {setImageFormat: setImageFormat};
})();
