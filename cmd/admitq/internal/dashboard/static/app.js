// Shared by the dashboard's pages: formatting and small uPlot charts.
"use strict";
window.admitq = (function () {
  const colors = { admitted: "#2ca02c", deferred: "#e8a317", rejected: "#d62728", started: "#1f77b4" };

  function fmtRate(v) {
    if (v == null || isNaN(v)) return "–";
    if (v === 0) return "0";
    if (v < 10) return v.toFixed(1);
    return Math.round(v).toLocaleString();
  }

  function fmtDelay(ms) {
    if (!ms) return "now";
    if (ms < 1000) return "in " + ms + " ms";
    if (ms < 60000) return "in " + (ms / 1000).toFixed(1) + " s";
    if (ms < 3600000) return "in " + (ms / 60000).toFixed(1) + " min";
    return "in " + (ms / 3600000).toFixed(1) + " h";
  }

  // A capped tenant's depth (see depth in server.go): "3 / 4" in flight,
  // and "12 (oldest 4.1 s)" parked, or "12 / 10,000 (oldest 4.1 s)" with
  // the bound.
  function fmtDepth(d) { return d.in_flight.toLocaleString() + " / " + d.cap.toLocaleString(); }
  function fmtParked(d, bound) {
    const s = d.parked.toLocaleString() + (bound ? " / " + d.max_parked.toLocaleString() : "");
    return d.oldest_parked_ms ? s + " (oldest " + fmtDelay(d.oldest_parked_ms).slice(3) + ")" : s;
  }

  function last(a) { return a && a.length ? a[a.length - 1] : 0; }

  // A chart of rates over time: series is a list of [label, color, fill].
  function rateChart(el, series, width, height, small) {
    const opts = {
      width: width, height: height,
      legend: { show: !small },
      cursor: { show: !small, points: { show: false } },
      scales: { x: { time: true }, y: { range: (u, lo, hi) => [0, Math.max(1, hi * 1.1)] } },
      axes: small ? [{ show: false }, { show: false }] : [{ values: (u, ts) => ts.map(t => new Date(t * 1000).toTimeString().slice(0, 8)) }, { size: 40 }],
      series: [{}].concat(series.map(s => ({
        label: s[0], stroke: s[1], width: small ? 1.25 : 1.5, fill: s[2] ? s[1] + "33" : undefined,
        points: { show: false }, value: (u, v) => fmtRate(v) + "/s",
      }))),
    };
    if (small) opts.padding = [2, 2, 2, 2];
    return new uPlot(opts, [[]].concat(series.map(() => [])), el);
  }

  function decisionsChart(el, w, h, small) {
    return rateChart(el, [["admitted", colors.admitted], ["deferred", colors.deferred], ["rejected", colors.rejected]], w, h, small);
  }
  function startedChart(el, w, h, small) {
    return rateChart(el, [["started", colors.started, true]], w, h, small);
  }

  // Keeps one chart's data: appends points, drops those older than keepMs.
  function Buffer(keepMs) { this.keep = keepMs; this.t = []; this.s = {}; }
  Buffer.prototype.reset = function () { this.t = []; this.s = {}; };
  Buffer.prototype.add = function (times, pts) {
    for (const k of ["admitted", "deferred", "rejected", "started"]) {
      this.s[k] = (this.s[k] || []).concat((pts && pts[k]) || times.map(() => 0));
    }
    this.t = this.t.concat(times);
    const cut = this.t.length ? this.t[this.t.length - 1] - this.keep : 0;
    let i = 0;
    while (i < this.t.length && this.t[i] < cut) i++;
    if (i > 0) {
      this.t = this.t.slice(i);
      for (const k in this.s) this.s[k] = this.s[k].slice(i);
    }
  };
  Buffer.prototype.decisions = function () {
    return [this.t.map(x => x / 1000), this.s.admitted || [], this.s.deferred || [], this.s.rejected || []];
  };
  Buffer.prototype.started = function () { return [this.t.map(x => x / 1000), this.s.started || []]; };
  Buffer.prototype.lastTime = function () { return this.t.length ? this.t[this.t.length - 1] : 0; };

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text != null) e.textContent = text;
    return e;
  }

  // poll calls f every ms while the tab is visible, and at once when it
  // becomes visible again.
  function poll(ms, f) {
    let busy = false;
    const tick = async () => {
      if (document.hidden || busy) return;
      busy = true;
      try { await f(); } catch (e) { console.error(e); } finally { busy = false; }
    };
    setInterval(tick, ms);
    document.addEventListener("visibilitychange", tick);
  }

  return { colors, fmtRate, fmtDelay, fmtDepth, fmtParked, last, decisionsChart, startedChart, Buffer, el, poll };
})();
