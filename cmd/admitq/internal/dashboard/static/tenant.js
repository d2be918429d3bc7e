// A tenant's page (or the default's): its window as a timeline, its rates
// and its newest entries, refreshed by polling.
"use strict";
(function () {
  const A = window.admitq;
  const live = document.getElementById("live");
  if (!live) return;
  // The default's page asks with default=1, not a name: any name could be
  // a tenant's, "(default)" included.
  const isDefault = live.dataset.default === "1";
  const tenant = live.dataset.tenant;
  const every = Number(live.dataset.every) || 2000;
  const width = Math.min(1100, document.querySelector("main").clientWidth - 40);
  const buf = new A.Buffer(5 * 60 * 1000);
  const dec = A.decisionsChart(document.getElementById("chart-decisions"), width / 2 - 20, 180, false);
  const st = A.startedChart(document.getElementById("chart-started"), width / 2 - 20, 180, false);
  const tlEl = document.getElementById("timeline");
  let tl = null;

  // The timeline: slots per bucket over (now - window, last reservation],
  // x in seconds from now, a line at now.
  function timeline(v) {
    if (!tlEl) return;
    const note = document.getElementById("timeline-note");
    if (v.mode !== "log") {
      note.textContent = "Counter mode keeps counts per tenth of the window, not slots: " + v.in_window + " in the window.";
      return;
    }
    const from = v.now - v.window_ms;
    const to = Math.max(v.now + 1, v.slots.length ? v.slots[v.slots.length - 1] + 1 : v.now + 1);
    const n = 60;
    const step = Math.max(1, (to - from) / n);
    const xs = [], inWin = [], ahead = [];
    for (let i = 0; i < n; i++) { xs.push((from + (i + 0.5) * step - v.now) / 1000); inWin.push(0); ahead.push(0); }
    for (const s of v.slots) {
      const i = Math.min(n - 1, Math.floor((s - from) / step));
      if (i < 0) continue;
      if (s <= v.now) inWin[i]++; else ahead[i]++;
    }
    const data = [xs, inWin.map(x => x || null), ahead.map(x => x || null)];
    if (!tl) {
      const bars = uPlot.paths.bars({ size: [0.9, 40] });
      tl = new uPlot({
        width: width, height: 200,
        scales: { x: { time: false }, y: { range: (u, lo, hi) => [0, Math.max(1, hi * 1.15)] } },
        axes: [{ label: "seconds from now", values: (u, ts) => {
          const out = A.uniqueTicks(ts, (t, d) => (t > 0 ? "+" : "") + t.toFixed(d));
          tlEl.dataset.ticks = out.join(" "); // what the axis shows: the browser tests read it
          return out;
        } }, { size: 40, label: "slots" }],
        series: [{ label: "s from now", value: (u, v) => v == null ? "" : v.toFixed(2) },
          { label: "in window", fill: A.colors.admitted + "cc", stroke: A.colors.admitted, paths: bars, points: { show: false } },
          { label: "reserved ahead", fill: A.colors.deferred + "cc", stroke: A.colors.deferred, paths: bars, points: { show: false } }],
        hooks: { draw: [u => {
          const x = u.valToPos(0, "x", true);
          const ctx = u.ctx;
          ctx.save(); ctx.strokeStyle = "#333"; ctx.setLineDash([4, 3]); ctx.lineWidth = 1.5;
          ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke(); ctx.restore();
        }] },
      }, data, tlEl);
    } else {
      tl.setData(data);
    }
    note.textContent = A.plural(v.slots.length, "slot") + " shown" + (v.cut ? " (the newest " + v.slots.length + ")" : "") + "; bucket " + (step / 1000).toFixed(2) + " s.";
  }

  function set(id, text) { const e = document.getElementById(id); if (e) e.textContent = text; }

  async function refresh(full) {
    const u = new URL("/api/tenant", location.href);
    if (isDefault) u.searchParams.set("default", "1");
    else u.searchParams.set("t", tenant);
    u.searchParams.set("since", full ? "0" : String(buf.lastTime()));
    const v = await (await fetch(u, { credentials: "same-origin" })).json();
    if (v.error) set("st-next", v.error);
    if (v.no_quota) ["st-window", "st-reserved", "st-next"].forEach(id => set(id, "no quota"));
    if (v.limit) {
      set("st-window", v.in_window.toLocaleString() + " / " + v.limit.toLocaleString());
      set("st-reserved", v.reserved.toLocaleString());
      set("st-next", A.fmtDelay(v.next_free_ms));
      document.querySelectorAll(".stats .depth").forEach(e => { e.hidden = !v.depth; });
      if (v.depth) {
        set("st-in-flight", A.fmtDepth(v.depth));
        set("st-parked", A.fmtParked(v.depth, true) + (v.depth.held ? " · held" : ""));
        set("st-share", A.fmtShare(v.depth));
      }
      timeline(v);
    }
    // The key of the page's rates: the tenant, or the default's key.
    const nd = document.getElementById("no-decisions");
    if (nd) nd.hidden = !(v.rates && v.rates.no_decisions);
    const pts = v.rates && v.rates.series ? v.rates.series[v.tenant] : null;
    buf.add((v.rates && v.rates.times) || [], pts);
    dec.setData(buf.decisions());
    st.setData(buf.started());
    set("st-dec", A.decisionsNow(buf));
    set("st-started", A.fmtRate(A.last(buf.s.started)));
    const tb = document.getElementById("entries");
    if (tb) {
      tb.textContent = "";
      for (const e of v.entries || []) {
        const tr = A.el("tr");
        tr.appendChild(A.el("td", { class: "mono" }, e.id));
        const d = e.at - v.now;
        tr.appendChild(A.el("td", {}, new Date(e.at).toLocaleTimeString() + (d > 0 ? " (" + A.fmtDelay(d) + ")" : "")));
        const td = A.el("td");
        if (e.task) td.appendChild(A.el("a", { href: e.task }, "task in asynqmon"));
        tr.appendChild(td);
        tb.appendChild(tr);
      }
    }
  }
  refresh(true);
  A.poll(every, () => refresh(false));
})();
