// The keys page and a key's page: each dispatched queue's keys, and the
// key quotas, drawn from the page's data, then polled.
"use strict";
(function () {
  const A = window.admitq;
  const data = JSON.parse(document.getElementById("data").textContent);
  let updates = 0;

  // state is a key's row's state cell: paused, held (for how long), at or
  // over its cap.
  function state(td, k) {
    td.textContent = "";
    if (k.paused) td.appendChild(A.el("span", { class: "badge paused", title: "its quota is paused: none of its tasks goes in until it is resumed" }, "paused"));
    if (k.held) td.appendChild(A.el("span", { class: "badge warn", title: "a downstream throttle (worker.ThrottledKey) holds its tasks" }, "held" + (k.held_ms ? " " + A.fmtDelay(k.held_ms).replace(/^in /, "for ") : "")));
    if (k.over_cap) td.appendChild(A.el("span", { class: "badge hot", title: "more in flight than a cap that was just lowered: the excess drains as its tasks end" }, "over cap"));
    else if (k.at_cap) td.appendChild(A.el("span", { class: "badge hot", title: "as many tasks in flight as its cap: the rest wait" }, "at cap"));
  }

  function inFlight(k) {
    return k.cap ? k.in_flight.toLocaleString() + " / " + k.cap.toLocaleString() : k.in_flight.toLocaleString();
  }

  function link(k) {
    return A.el("a", { href: k.link, title: k.key }, k.shown || k.key);
  }

  function draw(v) {
    const box = document.getElementById("queues");
    box.textContent = "";
    if (!v.queues.length) {
      box.appendChild(A.el("p", { class: "caption", id: "no-keys" }, v.key
        ? "No task carrying this key waits or runs in a dispatched queue."
        : "No task carrying a concurrency key waits or runs in a dispatched queue."));
    }
    for (const q of v.queues) {
      box.appendChild(A.el("h3", {}, "Queue ")).appendChild(A.el("span", { class: "mono" }, q.queue));
      const wrap = box.appendChild(A.el("div", { class: "table-wrap" }));
      const table = wrap.appendChild(A.el("table", { class: "tenants keys", "data-queue": q.queue }));
      const head = table.appendChild(A.el("thead")).appendChild(A.el("tr"));
      for (const [h, cls] of [["Key", ""], ["In flight / cap", "num"], ["Waiting", "num"], ["State", ""]]) head.appendChild(A.el("th", { class: cls }, h));
      const tb = table.appendChild(A.el("tbody"));
      for (const k of q.keys) {
        const tr = tb.appendChild(A.el("tr", { "data-key": k.key }));
        tr.appendChild(A.el("td", { "data-k": "key", class: "mono" })).appendChild(link(k));
        tr.appendChild(A.el("td", { "data-k": "in_flight", class: "num" }, inFlight(k)));
        tr.appendChild(A.el("td", { "data-k": "waiting", class: "num" }, k.waiting.toLocaleString()));
        state(tr.appendChild(A.el("td", { "data-k": "state" })), k);
      }
      if (q.more) box.appendChild(A.el("p", { class: "caption" }, "The dispatcher lists " + v.most + " keys of this queue: others may have tasks there too."));
    }
    const qt = document.getElementById("quota-rows");
    if (qt) {
      qt.textContent = "";
      if (!v.quotas.length) {
        const tr = qt.appendChild(A.el("tr"));
        tr.appendChild(A.el("td", { colspan: 2, class: "empty" }, "No key has a quota: keys are neither capped nor paused."));
      }
      for (const k of v.quotas) {
        const tr = qt.appendChild(A.el("tr", { "data-key": k.key }));
        const td = tr.appendChild(A.el("td", { "data-k": "key", class: "mono" }));
        td.appendChild(link(k));
        if (k.paused) td.appendChild(A.el("span", { class: "badge paused" }, "paused"));
        tr.appendChild(A.el("td", { "data-k": "quota" }, k.quota));
      }
    }
    const pe = document.getElementById("page-error");
    pe.hidden = !v.error;
    pe.textContent = v.error || "";
    box.dataset.updates = String(updates);
  }

  draw(data);
  A.poll(data.every_ms || 2000, async () => {
    const u = new URL("/api/keys", location.href);
    if (data.key) u.searchParams.set("k", data.key);
    const v = await (await fetch(u, { credentials: "same-origin" })).json();
    updates++;
    draw(v);
  });
})();
