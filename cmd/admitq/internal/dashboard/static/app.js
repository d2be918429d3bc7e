// Shared by the dashboard's pages: formatting and small uPlot charts.
"use strict";
window.admitq = (function () {
  const colors = { admitted: "#2ca02c", deferred: "#e8a317", parked: "#9467bd", rejected: "#d62728", started: "#1f77b4" };
  const outcomes = ["admitted", "deferred", "parked", "rejected"];

  // plural is "1 tenant", "2 tenants".
  function plural(n, one, many) { return n.toLocaleString() + " " + (n === 1 ? one : (many || one + "s")); }

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
  // fmtShare is a tenant's share of its queues' worker time, and its weight.
  function fmtShare(d) {
    return Math.round(100 * (d.worker_share || 0)) + "% (weight " + (d.weight || 1).toLocaleString() + ")";
  }
  function fmtDepth(d) {
    if (!d.cap) { return d.in_flight.toLocaleString(); }
    var note = d.over_cap ? " (over its cap: draining)" : d.at_cap ? " (at cap)" : "";
    return d.in_flight.toLocaleString() + " / " + d.cap.toLocaleString() + note;
  }
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
    return rateChart(el, outcomes.map(o => [o, colors[o]]), w, h, small);
  }
  function startedChart(el, w, h, small) {
    return rateChart(el, [["started", colors.started, true]], w, h, small);
  }

  // Keeps one chart's data: appends points, drops those older than keepMs.
  function Buffer(keepMs) { this.keep = keepMs; this.t = []; this.s = {}; }
  Buffer.prototype.reset = function () { this.t = []; this.s = {}; };
  Buffer.prototype.add = function (times, pts) {
    for (const k of outcomes.concat(["started"])) {
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
    return [this.t.map(x => x / 1000)].concat(outcomes.map(o => this.s[o] || []));
  };
  Buffer.prototype.started = function () { return [this.t.map(x => x / 1000), this.s.started || []]; };
  Buffer.prototype.lastTime = function () { return this.t.length ? this.t[this.t.length - 1] : 0; };
  // count is what a series adds up to: each point's rate times the time
  // since the point before (everyMs for the first).
  Buffer.prototype.count = function (k, everyMs) {
    const s = this.s[k] || [];
    let n = 0;
    for (let i = 0; i < s.length; i++) n += s[i] * (i ? this.t[i] - this.t[i - 1] : everyMs) / 1000;
    return n;
  };

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

  // decisionsNow is the newest rate of each outcome: "1.0 · 0 · 0 · 0".
  function decisionsNow(b) { return outcomes.map(o => fmtRate(last(b.s[o]))).join(" · "); }

  // uniqueTicks formats axis ticks with as few decimals as keep them apart:
  // a 1 s window's ticks read -0.9, -0.85, -0.8, not -0.9, -0.9, -0.8.
  function uniqueTicks(ts, fmt) {
    for (let d = 0; d <= 4; d++) {
      const out = ts.map(t => fmt(t, d));
      if (new Set(out).size === out.length) return out;
    }
    return ts.map(t => fmt(t, 4));
  }

  return { colors, outcomes, plural, decisionsNow, uniqueTicks, fmtRate, fmtDelay, fmtDepth, fmtParked, fmtShare, last, decisionsChart, startedChart, Buffer, el, poll };
})();
