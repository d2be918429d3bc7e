// The tenants page: draws the rows from the page's data, then polls.
"use strict";
(function () {
  const A = window.admitq;
  let page = JSON.parse(document.getElementById("data").textContent);
  const tbody = document.getElementById("rows");
  // Rows are keyed by r.key: the tenant, or the default's key, which no
  // tenant has (a tenant may be named "(default)", the default's label).
  let rows = new Map(); // key -> {tr, cells, buf, dec, st}
  let keys = "";
  let updates = 0;

  function keyOf(p) {
    return (p.has_depth ? "\u0000depth|" : "") + (p.default ? "\u0000default|" : "") + p.rows.map(r => r.key).join("\u0000");
  }

  function cell(tr, k, cls) {
    const td = A.el("td", { "data-k": k, class: cls || "" });
    tr.appendChild(td);
    return td;
  }

  function build(p) {
    rows.forEach(r => { r.dec && r.dec.destroy(); r.st && r.st.destroy(); });
    rows = new Map();
    tbody.textContent = "";
    document.querySelectorAll("th.depth").forEach(th => { th.hidden = !p.has_depth; });
    const all = (p.default ? [p.default] : []).concat(p.rows);
    if (!all.length) {
      const tr = A.el("tr");
      const td = A.el("td", { colspan: 20, class: "empty" }, p.query || p.flagged ? "No tenant matches." : "No tenant has a quota of its own or a window in Redis yet.");
      tr.appendChild(td);
      tbody.appendChild(tr);
    }
    for (const r of all) {
      const isDef = r === p.default;
      const tr = A.el("tr", isDef ? { "data-default": "1", class: "default" } : { "data-tenant": r.tenant });
      const c = {};
      c.tenant = cell(tr, "tenant", "mono");
      // The name as admitq quota list shows it: quoted when it could read
      // as the default's row, shortened when long; the whole in the title.
      const a = A.el("a", { href: r.link, title: r.tenant }, r.shown || r.tenant);
      c.tenant.appendChild(a);
      if (r.on_default) c.tenant.appendChild(A.el("span", { class: "badge def", title: "no quota of its own: the default applies" }, "default"));
      if (r.paused) c.tenant.appendChild(A.el("span", { class: "badge paused", title: "paused: none of its tasks goes into a dispatched queue until resumed" }, "paused"));
      // Held comes and goes between refreshes: fill shows or hides it
      // (empty while hidden, so that the cell's text is as before).
      c.held = c.tenant.appendChild(A.el("span", { class: "badge warn", "data-k": "held", title: "its parked tasks are held back for a while: its rate, or a downstream throttle (worker.Throttled)" }));
      c.held.style.display = "none";
      if (r.no_quota) c.tenant.appendChild(A.el("span", { class: "badge none", title: "no quota of its own and no default: its tasks are refused (ErrNoQuota)" }, "no quota"));
      if (isDef) c.others = c.tenant.appendChild(A.el("div", { class: "sub", "data-k": "others" }));
      c.quota = cell(tr, "quota");
      c.mode = cell(tr, "mode");
      c.in_window = cell(tr, "in_window", "num");
      c.reserved = cell(tr, "reserved", "num");
      c.next_free = cell(tr, "next_free");
      if (p.has_depth) {
        c.in_flight = cell(tr, "in_flight", "num");
        c.parked = cell(tr, "parked", "num");
      }
      const dtd = cell(tr, "decisions", "spark");
      const dchart = dtd.appendChild(A.el("div"));
      c.dnow = dtd.appendChild(A.el("div", { class: "sub", "data-k": "decisions_now" }));
      const std = cell(tr, "started", "spark");
      const schart = std.appendChild(A.el("div"));
      c.snow = std.appendChild(A.el("div", { class: "sub", "data-k": "started_now" }));
      c.flags = cell(tr, "flags");
      tbody.appendChild(tr);
      const buf = new A.Buffer(5 * 60 * 1000);
      rows.set(r.key, { tr, c, buf, dec: A.decisionsChart(dchart, 170, 38, true), st: A.startedChart(schart, 130, 38, true) });
    }
    keys = keyOf(p);
  }

  function fill(p, full) {
    const all = (p.default ? [p.default] : []).concat(p.rows);
    const times = (p.rates && p.rates.times) || [];
    for (const r of all) {
      const x = rows.get(r.key);
      if (!x) continue;
      const c = x.c, isDef = r === p.default;
      c.quota.textContent = r.quota;
      const held = !!(r.depth && r.depth.held);
      c.held.style.display = held ? "" : "none";
      c.held.textContent = held ? "held" : "";
      c.mode.textContent = r.mode;
      if (isDef) {
        c.in_window.textContent = c.reserved.textContent = c.next_free.textContent = "";
        c.others.textContent = r.others ? A.plural(r.others, "tenant") + " on it, marked default" : "";
      } else if (r.no_quota) {
        c.in_window.textContent = c.reserved.textContent = c.next_free.textContent = "";
        c.next_free.className = "";
      } else if (r.error) {
        c.in_window.textContent = "";
        c.reserved.textContent = "";
        c.next_free.textContent = r.error;
        c.next_free.className = "err";
      } else {
        c.in_window.textContent = "";
        const pct = Math.min(100, Math.round(100 * r.usage));
        const bar = A.el("span", { class: "bar" });
        bar.appendChild(A.el("span", { class: pct >= 100 ? "full" : "", style: "width:" + pct + "%" }));
        c.in_window.appendChild(A.el("span", { "data-v": "in_window" }, r.in_window.toLocaleString() + " / " + r.limit.toLocaleString()));
        c.in_window.appendChild(bar);
        c.reserved.textContent = r.reserved.toLocaleString();
        c.next_free.textContent = A.fmtDelay(r.next_free_ms);
        c.next_free.className = "";
      }
      if (p.has_depth) {
        c.in_flight.textContent = r.depth ? A.fmtDepth(r.depth) : "";
        c.in_flight.title = r.depth ? "share of worker time " + A.fmtShare(r.depth) : "";
        c.parked.textContent = r.depth ? A.fmtParked(r.depth) : "";
      }
      if (full) x.buf.reset();
      const pts = p.rates && p.rates.series ? p.rates.series[r.key] : null;
      x.buf.add(times, pts);
      x.dec.setData(x.buf.decisions());
      x.st.setData(x.buf.started());
      const d = x.buf.s;
      // What the charts hold, as counts: the browser tests read these.
      for (const k of A.outcomes.concat(["started"])) {
        x.tr.dataset[k] = String(Math.round(x.buf.count(k, p.every_ms)));
      }
      c.dnow.textContent = p.sources ? A.decisionsNow(x.buf) + " /s now" : "no metrics source";
      c.snow.textContent = p.sources ? A.fmtRate(A.last(d.started)) + " /s now" : "";
      c.flags.textContent = "";
      const f = r.flags || {};
      if (f.at_limit) c.flags.appendChild(A.el("span", { class: "badge warn", title: "share of intervals at the limit" }, "at limit " + Math.round(100 * f.at_limit_part) + "%"));
      if (f.hog) c.flags.appendChild(A.el("span", { class: "badge hot", title: "share of all worker seconds" }, Math.round(100 * f.busy_part) + "% of worker time"));
    }
    const sum = document.getElementById("summary");
    const from = p.total ? (p.page - 1) * p.page_size + 1 : 0;
    sum.textContent = A.plural(p.all, "tenant") + (p.all === 1 ? " with a quota of its own" : " with a quota of their own") +
      (p.on_default ? ", " + p.on_default.toLocaleString() + " on the default" : "") +
      (p.no_quota ? ", " + p.no_quota.toLocaleString() + " with no quota" : "") +
      (p.query || p.flagged ? ", " + p.total.toLocaleString() + (p.total === 1 ? " matches" : " match") : "") +
      (p.total ? " · " + from.toLocaleString() + "–" + Math.min(p.total, from + p.page_size - 1).toLocaleString() : "");
    const pager = document.getElementById("pager");
    pager.textContent = "";
    if (p.pages > 1) {
      const link = (n, label) => {
        const u = new URL(location.href);
        u.searchParams.set("page", n);
        return A.el("a", { href: u.pathname + u.search, rel: label }, label);
      };
      if (p.page > 1) pager.appendChild(link(p.page - 1, "prev"));
      pager.appendChild(A.el("span", {}, " page " + p.page + " of " + p.pages.toLocaleString() + " "));
      if (p.page < p.pages) pager.appendChild(link(p.page + 1, "next"));
    }
    const ws = document.getElementById("warnings");
    ws.replaceChildren(...(p.warnings || []).map(w => A.el("p", { class: "warn banner" }, w)));
    const pe = document.getElementById("page-error");
    pe.hidden = !p.error;
    pe.textContent = p.error || "";
    document.getElementById("no-decisions").hidden = !(p.rates && p.rates.no_decisions);
    const re = document.getElementById("rates-error");
    const errs = (p.rates && p.rates.errors) || [];
    re.hidden = !errs.length;
    re.textContent = errs.length ? "Metrics not read: " + errs.join("; ") : "";
    tbody.dataset.updates = String(updates);
    tbody.dataset.now = String(p.now);
  }

  build(page);
  fill(page, true);
  // From navigation to drawn rows: the load time the tests report.
  performance.mark("rows-drawn");

  A.poll(page.every_ms, async () => {
    const u = new URL("/api/tenants", location.href);
    const here = new URL(location.href).searchParams;
    for (const k of ["q", "page", "flagged"]) if (here.get(k)) u.searchParams.set(k, here.get(k));
    let last = 0;
    rows.forEach(r => { last = Math.max(last, r.buf.lastTime()); });
    u.searchParams.set("since", String(last));
    let p = await (await fetch(u, { credentials: "same-origin" })).json();
    let full = false;
    if (keyOf(p) !== keys) {
      // Other rows (a tenant added or gone): start over with full history.
      u.searchParams.set("since", "0");
      p = await (await fetch(u, { credentials: "same-origin" })).json();
      build(p);
      full = true;
    }
    updates++;
    fill(p, full);
  });
})();
