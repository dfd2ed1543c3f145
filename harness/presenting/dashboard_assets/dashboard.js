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
  var SVG = "http://www.w3.org/2000/svg";

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

  // The time axis's labels: a tick's date or time to the unit of the axis's step (uPlot's
  // foundIncr, seconds), in UTC as the runs record it, so that two ticks never read alike
  // (run numbers as x put the same date under every run of a day).
  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function timeTick(seconds, step) {
    var d = new Date(seconds * 1000);
    var day = d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate());
    var clock = pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes());
    if (step >= 365 * 86400) return String(d.getUTCFullYear());
    if (step >= 28 * 86400) return day.slice(0, 7);
    if (step >= 86400) return day;
    if (step >= 60) return day.slice(5) + " " + clock;
    return clock + ":" + pad(d.getUTCSeconds());
  }
  SB.timeTick = timeTick;

  // An SVG element with the given attributes, set in the object's order.
  function svgElement(name, attributes) {
    var element = document.createElementNS(SVG, name);
    Object.keys(attributes).forEach(function (key) { element.setAttribute(key, attributes[key]); });
    return element;
  }

  // A legend entry's sample: ``shape`` in an SVG of its own, ``width`` × ``height``.
  function sample(width, height, shape) {
    var svg = svgElement("svg", {width: String(width), height: String(height)});
    svg.appendChild(shape);
    return svg;
  }

  function dashSample(dash) {
    var line = svgElement("line", {x1: "0", y1: "4", x2: "28", y2: "4", stroke: "#444", "stroke-width": "2"});
    if (dash.length) line.setAttribute("stroke-dasharray", dash.join(" "));
    return sample(28, 8, line);
  }

  function colourSample(colour) {
    return sample(12, 12, svgElement("rect", {width: "12", height: "12", fill: colour}));
  }

  // The chart's legend, grouped: one entry per machine (its dash pattern), one per strategy
  // (its colour), not one per strategy and machine. A series is shown while both its machine
  // and its strategy are; clicking an entry switches them.
  function legend(u, item) {
    var box = document.createElement("div"), entries = [];
    box.className = "legend";
    var machines = item.machines && item.machines.length ? item.machines : [""];
    var machineOn = machines.map(function () { return true; }), strategyOn = {}, strategies = [];
    item.series.forEach(function (s) {
      if (!(s.name in strategyOn)) { strategyOn[s.name] = true; strategies.push(s); }
    });
    function apply() {
      item.series.forEach(function (s, i) {
        var show = machineOn[s.machine || 0] && strategyOn[s.name];
        if (u.series[i + 1].show !== show) u.setSeries(i + 1, { show: show });
      });
    }
    function entry(row, sample, text, isOn, flip) {
      var button = document.createElement("button");
      button.type = "button";
      button.appendChild(sample);
      button.appendChild(document.createTextNode(text));
      button.setAttribute("aria-pressed", "true");
      button.addEventListener("click", function () {
        flip();
        button.classList.toggle("off", !isOn());
        button.setAttribute("aria-pressed", String(isOn()));
        apply();
      });
      row.appendChild(button);
      entries.push(button);
    }
    function row(heading) {
      var div = document.createElement("div"), b = document.createElement("b");
      b.textContent = heading;
      div.appendChild(b);
      box.appendChild(div);
      return div;
    }
    var machineRow = row(machines.length > 1 ? "machines" : "machine");
    machines.forEach(function (machine, m) {
      entry(machineRow, dashSample(DASHES[m % DASHES.length]), machine || "this machine",
            function () { return machineOn[m]; }, function () { machineOn[m] = !machineOn[m]; });
    });
    var strategyRow = row("strategies");
    strategies.forEach(function (s) {
      entry(strategyRow, colourSample(s.colour), s.name, function () { return strategyOn[s.name]; },
            function () { strategyOn[s.name] = !strategyOn[s.name]; });
    });
    box.entries = entries;
    return box;
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
    var times = item.x.map(function (run) { return SB.runs.t[run]; });
    var data = [times].concat(item.series.map(function (s) { return s[metric] || item.x.map(function () { return null; }); }));
    var first = times[0], last = times[times.length - 1];
    var room = first === last ? 3600 : (last - first) * 0.02;
    var points = 0;
    for (var s = 1; s < data.length; s++) data[s].forEach(function (v) { if (v != null) points += 1; });
    var info = document.createElement("div");
    info.className = "runinfo";
    var marks = metric === "y" ? item.marks : (item.count_marks || {})[metric] || [];
    var format = metric === "y" ? timeText : function (v) { return countText(v, (item.decimals || {})[metric]); };
    var opts = {
      width: Math.max(480, Math.min(1150, element.clientWidth || 1150)),
      height: 320,
      padding: [null, 48, null, null],  // room for the last time label, centred on the right edge
      // x: the runs' start times, a little room either side (an hour for a case of one run,
      // which uPlot would spread over years)
      scales: { x: { time: true, auto: false, range: [first - room, last + room] }, y: { distr: 3 } },
      legend: { show: false },  // ours, grouped by machine (legend())
      axes: [
        { space: 90, values: function (u, splits, axisIdx, space, step) {
          var labels = splits.map(function (v) { return timeTick(v, step); });
          element.dataset.xticks = labels.join("|");
          return labels;
        } },
        { size: 70, values: function (u, splits) { return splits.map(format); } }
      ],
      series: [{ label: "run start" }].concat(
        item.series.map(function (s) {
          return { label: s.name, stroke: s.colour, width: 1.5, spanGaps: (item.machines || []).length > 1,
                   dash: DASHES[(s.machine || 0) % DASHES.length],
                   points: { show: true, size: 5, fill: s.colour, stroke: s.colour } };
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
        setCursor: [function (u) { info.textContent = cursorText(u, u.cursor.idx); }]
      }
    };
    // The run under the cursor, and the value of each series shown there (the legend has none).
    function cursorText(u, idx) {
      if (idx == null) return "";
      var values = [];
      item.series.forEach(function (s, i) {
        var v = data[i + 1][idx];
        if (v == null || !u.series[i + 1].show) return;
        var iqr = metric === "y" && s.iqr ? s.iqr[idx] : null;
        values.push(s.name + " " + format(v) + (iqr != null ? " (IQR " + iqr + " %)" : ""));
      });
      return runText(item.x[idx]) + (values.length ? " — " + values.join(", ") : "");
    }
    var u = new uPlot(opts, data, element);
    var keys = legend(u, item);
    element.appendChild(keys);
    element.appendChild(info);
    element.dataset.legend = keys.entries.length;
    if (location.hash.indexOf("verify") >= 0 && keys.entries.length) {
      // The first machine switched off and on again by its entry, as a reader clicks it:
      // how many series it hid.
      keys.entries[0].click();
      element.dataset.toggled = u.series.filter(function (s, i) { return i > 0 && !s.show; }).length;
      keys.entries[0].click();
    }
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
