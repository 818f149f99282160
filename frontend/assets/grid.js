/* headscope: functions the AG Grid tables name in their column definitions ({"function": "name"}).
 *
 * - headOrder sorts head names (L2H10 after L2H9, L10H0 after L9H5) by layer, then head, not as text.
 */
(function () {
  "use strict";
  var dagfuncs = (window.dashAgGridFunctions = window.dashAgGridFunctions || {});

  function parts(name) {
    var m = /^L(\d+)H(\d+)$/.exec(String(name));
    return m ? [Number(m[1]), Number(m[2])] : [Infinity, Infinity];
  }

  dagfuncs.headOrder = function (a, b) {
    var x = parts(a), y = parts(b);
    return x[0] - y[0] || x[1] - y[1];
  };
})();
