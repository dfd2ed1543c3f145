// scatterbench dashboard: draws each case's history with uPlot from the
// site's data files (data/runs.js, data/cases/*.js), which are plain scripts
// so the site works from file:// (where the fetch API is refused) as from any
// static host. Text from result files is set with textContent, never as HTML.
(function () {
  "use strict";
  var SB = (window.SB = window.SB || { cases: {} });
  var MARK_COLOURS = { red: "#d00000", grey: "#8a8a8a", source: "#1f5fbf" };
  // A case measured on several machines: one series per strategy and machine, the
  // strategy's colour, the machine's dash pattern (solid for the first).
  var DASHES = [[], [6, 3], [2, 3], [8, 3, 2, 3]];

  function timeText(seconds) {
    if (seconds == null || !isFinite(seconds)) return "–";
    var units = [["s", 1], ["ms", 1e-3], ["µs", 1e-6], ["ns", 1e-9]];
    for (var i = 0; i < units.length; i++) {
      if (seconds >= units[i][1] || i === units.length - 1) {
        return Number((seconds / units[i][1]).toPrecision(3)) + " " + units[i][0];
      }
    }
  }

  // A count as Python's metrics.fmt_count prints it, f"{value:,.{decimals}f}" (a metric's
  // decimals come in the case's data): thousands separators, `decimals` after the point,
  // "–" for none. toFixed rounds the double's exact value as Python does, but a tie up, where
  // Python rounds it to even: the exact expansion (toFixed(100), exact for decimals up to 14)
  // tells a true tie.
  function countText(value, decimals) {
    if (value == null || !isFinite(value)) return "–";
    decimals = decimals || 0;
    var magnitude = Math.abs(value), text;
    if (magnitude >= 1e21) {  // an integer, which toFixed would write with an exponent
      text = BigInt(magnitude).toString() + (decimals ? "." + "0".repeat(decimals) : "");
    } else {
      text = magnitude.toFixed(decimals);
      var exact = magnitude.toFixed(100), cut = exact.indexOf(".") + 1 + decimals;
      var kept = exact.slice(0, cut).replace(/\.$/, "");
      if (/^50*$/.test(exact.slice(cut)) && /[02468]$/.test(kept)) text = kept;
    }
    var parts = text.split(".");
    parts[0] = parts[0].replace(/\B(?=(\d{3})+(?!\d))/g, ",");
    return (value < 0 || Object.is(value, -0) ? "-" : "") + parts.join(".");
  }
  SB.countText = countText;  // for the test that holds it to Python's

  function runText(order) {
    var runs = SB.runs;
    if (order == null || !runs || runs.id[order] === undefined) return "";
    return "#" + order + " " + runs.id[order] + " · " + runs.date[order] + " · " + runs.commit[order] + " · " +
      SB.machines[runs.machine[order]];
  }

  function drawMarks(u, data, marks, machineChanges) {
    var ctx = u.ctx, ratio = window.devicePixelRatio || 1;
    ctx.save();
    ctx.lineWidth = 2 * ratio;
    machineChanges.forEach(function (point) {
      var x = u.valToPos(data[0][point], "x", true);
      ctx.strokeStyle = "#555";
      ctx.setLineDash([4 * ratio, 4 * ratio]);
      ctx.beginPath();
      ctx.moveTo(x, u.bbox.top);
      ctx.lineTo(x, u.bbox.top + u.bbox.height);
      ctx.stroke();
    });
    ctx.setLineDash([]);
    var drawn = { red: 0, grey: 0, source: 0 };
    marks.forEach(function (mark) {
      var value = data[mark[0] + 1][mark[1]];
      if (value == null) value = u.scales.y.max;  // a case that broke has no time: ring the top
      var x = u.valToPos(data[0][mark[1]], "x", true), y = u.valToPos(value, "y", true);
      ctx.strokeStyle = MARK_COLOURS[mark[2]];
      ctx.beginPath();
      if (mark[2] === "source") {
        ctx.rect(x - 6 * ratio, y - 6 * ratio, 12 * ratio, 12 * ratio);
      } else {
        ctx.arc(x, y, 7 * ratio, 0, 2 * Math.PI);
      }
      ctx.stroke();
      drawn[mark[2]] += 1;
    });
    ctx.restore();
    return drawn;
  }

  // The number of points whose centre the canvas painted (a check for tests: #verify).
  function paintedPoints(u, data) {
    var canvas = u.ctx.canvas, pixels = u.ctx.getImageData(0, 0, canvas.width, canvas.height).data, painted = 0;
    for (var s = 1; s < data.length; s++) {
      for (var i = 0; i < data[s].length; i++) {
        if (data[s][i] == null) continue;
        var x = Math.round(u.valToPos(data[0][i], "x", true)), y = Math.round(u.valToPos(data[s][i], "y", true));
        if (x >= 0 && y >= 0 && x < canvas.width && y < canvas.height && pixels[4 * (y * canvas.width + x) + 3] > 0) {
          painted += 1;
        }
      }
    }
    return painted;
  }

  function chart(element, item, metric) {
    var data = [item.x].concat(item.series.map(function (s) { return s[metric] || item.x.map(function () { return null; }); }));
    var points = 0;
    for (var s = 1; s < data.length; s++) data[s].forEach(function (v) { if (v != null) points += 1; });
    var info = document.createElement("div");
    info.className = "runinfo";
    var marks = metric === "y" ? item.marks : (item.count_marks || {})[metric] || [];
    var format = metric === "y" ? timeText : function (v) { return countText(v, (item.decimals || {})[metric]); };
    var opts = {
      width: Math.max(480, Math.min(1150, element.clientWidth || 1150)),
      height: 320,
      scales: { x: { time: false }, y: { distr: 3 } },
      axes: [
        { space: 110, values: function (u, splits) {
          return splits.map(function (v) { return Number.isInteger(v) && SB.runs.date[v] ? SB.runs.date[v].slice(0, 10) : ""; });
        } },
        { size: 70, values: function (u, splits) { return splits.map(format); } }
      ],
      series: [{ label: "run", value: function (u, v) { return v == null ? "" : "#" + v; } }].concat(
        item.series.map(function (s) {
          return { label: s.name, stroke: s.colour, width: 1.5, spanGaps: (item.machines || []).length > 1,
                   dash: DASHES[(s.dash || 0) % DASHES.length],
                   points: { show: true, size: 5, fill: s.colour, stroke: s.colour },
                   value: function (u, v, seriesIdx, idx) {
                     var iqr = metric === "y" && idx != null ? s.iqr[idx] : null;
                     return format(v) + (iqr != null && v != null ? " (IQR " + iqr + " %)" : "");
                   } };
        })),
      hooks: {
        draw: [function (u) {
          var drawn = drawMarks(u, data, marks, metric === "y" ? item.machine : []);
          element.dataset.points = points;
          element.dataset.series = item.series.length;
          element.dataset.red = drawn.red;
          element.dataset.grey = drawn.grey;
          if (location.hash.indexOf("verify") >= 0) element.dataset.painted = paintedPoints(u, data);
        }],
        setCursor: [function (u) { info.textContent = runText(data[0][u.cursor.idx]); }]
      }
    };
    new uPlot(opts, data, element);
    element.appendChild(info);
  }

  SB.draw = function () {
    var charts = document.querySelectorAll("div.chart[data-case]");
    for (var i = 0; i < charts.length; i++) {
      var element = charts[i], item = SB.cases[element.dataset.case];
      if (!item) {
        element.textContent = "no data for this case (data/cases/" + element.dataset.case + ".js did not load)";
        continue;
      }
      chart(element, item, element.dataset.metric || "y");
    }
  };

  document.addEventListener("DOMContentLoaded", SB.draw);
})();
