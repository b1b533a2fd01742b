// Conversation health over time: figures for the window and four inline-SVG charts drawn from
// /api/health/series. Read-only; every value from the database is written with textContent.
"use strict";

(() => {
  const SVG = "http://www.w3.org/2000/svg";
  // Stacked from the bottom: outcomes first, then the conversations still going on.
  const STACK = ["completed", "failed", "abandoned", "waiting_customer", "awaiting_approval", "active"];
  const RATES = [
    ["completion_rate", "completion"], ["abandonment_rate", "abandonment"],
    ["waiting_customer_rate", "waiting customer"], ["stuck_rate", "stuck step"],
  ];
  const QUANTILES = [["0.5", "p50"], ["0.9", "p90"], ["0.99", "p99"]];
  const W = 380, H = 150, PAD = { l: 40, r: 6, t: 8, b: 20 };

  function node(tag, attrs, ...children) {
    const n = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) n.setAttribute(k, v);
    for (const c of children) if (c !== null && c !== undefined) n.append(c instanceof Node ? c : String(c));
    return n;
  }

  function html(tag, attrs, ...children) {
    const n = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, v);
    for (const c of children) if (c !== null && c !== undefined) n.append(c instanceof Node ? c : String(c));
    return n;
  }

  // An even top for counts, so that the middle grid line is a whole number.
  const evenTop = (values) => 2 * Math.max(1, Math.ceil(Math.max(0, ...values) / 2));
  const pct = (r) => (r === null || r === undefined ? "–" : `${(r * 100).toFixed(r < 0.1 && r > 0 ? 1 : 0)}%`);

  function secs(s) {
    if (s === null || s === undefined) return "–";
    if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)}s`;
    if (s < 3600) return `${(s / 60).toFixed(1)}m`;
    if (s < 86400) return `${(s / 3600).toFixed(1)}h`;
    return `${(s / 86400).toFixed(1)}d`;
  }

  function bucketLabel(iso, every) {
    const d = new Date(iso);
    return every >= 86400 ? d.toLocaleDateString([], { month: "short", day: "numeric" })
      : d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
  }

  // The frame of one chart: an svg with a y axis from 0 to top, and x slots, one per bucket.
  function frame(id, title, series, top, fmt) {
    const n = series.buckets.length;
    const slot = (W - PAD.l - PAD.r) / n;
    const y = (v) => PAD.t + (H - PAD.t - PAD.b) * (1 - (top ? v / top : 0));
    const svg = node("svg", { id, class: "trend-chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title });
    for (const v of [0, top / 2, top]) {
      svg.append(node("line", { class: "grid", x1: PAD.l, x2: W - PAD.r, y1: y(v), y2: y(v) }));
      svg.append(node("text", { class: "axis", x: PAD.l - 4, y: y(v) + 4, "text-anchor": "end" }, fmt(v)));
    }
    const every = Math.max(1, Math.round(n / 6));
    series.buckets.forEach((b, i) => {
      if (i % every === 0) {
        svg.append(node("text", { class: "axis", x: PAD.l + slot * (i + 0.5), y: H - 6, "text-anchor": "middle" },
          bucketLabel(b, series.every_seconds)));
      }
    });
    return { svg, slot, y, x: (i) => PAD.l + slot * (i + 0.5) };
  }

  function figure(title, svg, legend) {
    return html("figure", { class: "trend" }, html("figcaption", {}, title,
      ...legend.map(([cls, label]) => html("span", { class: `key ${cls}` }, label))), svg);
  }

  // Conversations started per bucket, stacked by their health now.
  function outcomes(series, points) {
    const top = evenTop(points.map((p) => p.started));
    const f = frame("trend-outcomes", "conversations started, by health now", series, top, (v) => String(Math.round(v)));
    points.forEach((p, i) => {
      const g = node("g", { class: "bucket", "data-bucket": series.buckets[i], "data-started": p.started });
      let base = 0;
      for (const h of STACK) {
        const count = p.health[h];
        if (!count) continue;
        g.append(node("rect", { class: `seg ${h}`, "data-count": count, x: f.x(i) - f.slot * 0.38,
          width: f.slot * 0.76, y: f.y(base + count), height: f.y(base) - f.y(base + count) }));
        base += count;
      }
      g.append(node("title", {}, `${bucketLabel(series.buckets[i], series.every_seconds)}: ${p.started} started; `
        + STACK.map((h) => `${h.replace(/_/g, " ")} ${p.health[h]}`).join(", ")));
      f.svg.append(g);
    });
    return figure("Conversations started, by health now", f.svg, STACK.map((h) => [h, h.replace(/_/g, " ")]));
  }

  // Lines with a point per bucket that has a value (a rate needs a started conversation, a time a completion).
  function lines(id, title, series, points, keys, top, fmt) {
    const f = frame(id, title, series, top, fmt);
    for (const [get, cls] of keys) {
      // A line joins neighbouring buckets only: a bucket without a value breaks it (no slope over a gap).
      const runs = [[]];
      points.forEach((p, i) => {
        const v = get(p);
        if (v === null || v === undefined) {
          if (runs[runs.length - 1].length) runs.push([]);
          return;
        }
        runs[runs.length - 1].push([f.x(i), f.y(Math.min(v, top))]);
        f.svg.append(node("circle", { class: `pt ${cls}`, cx: f.x(i), cy: f.y(Math.min(v, top)), r: 2.6,
          "data-bucket": series.buckets[i], "data-value": v }, node("title", {}, `${cls}: ${fmt(v)}`)));
      });
      for (const run of runs.filter((r) => r.length > 1)) {
        f.svg.prepend(node("polyline", { class: `line ${cls}`, points: run.map((q) => q.join(",")).join(" ") }));
      }
    }
    return f.svg;
  }

  function rates(series, points) {
    const keys = RATES.map(([k, label]) => [(p) => p[k], label.replace(/ /g, "_")]);
    return figure("Rates (share of the conversations started)",
      lines("trend-rates", "rates", series, points, keys, 1, pct), RATES.map(([, l]) => [l.replace(/ /g, "_"), l]));
  }

  function completion(series, points) {
    const keys = QUANTILES.map(([q, label]) => [(p) => p.completion_seconds[q], label]);
    const top = Math.max(1, ...points.flatMap((p) => QUANTILES.map(([q]) => p.completion_seconds[q] || 0)));
    return figure("Time to completion", lines("trend-completion", "time to completion", series, points, keys, top, secs),
      QUANTILES.map(([, l]) => [l, l]));
  }

  function guarded(series, points) {
    const top = evenTop(points.map((p) => Math.max(p.duplicates_stopped, p.stuck_steps)));
    const f = frame("trend-guards", "duplicate side effects stopped and stuck steps", series, top,
      (v) => String(Math.round(v)));
    points.forEach((p, i) => {
      const g = node("g", { class: "bucket", "data-bucket": series.buckets[i], "data-duplicates": p.duplicates_stopped,
        "data-stuck": p.stuck_steps });
      const w = f.slot * 0.36;
      if (p.duplicates_stopped) g.append(node("rect", { class: "seg duplicates", x: f.x(i) - w, width: w,
        y: f.y(p.duplicates_stopped), height: f.y(0) - f.y(p.duplicates_stopped) }));
      if (p.stuck_steps) g.append(node("rect", { class: "seg stuck", x: f.x(i), width: w,
        y: f.y(p.stuck_steps), height: f.y(0) - f.y(p.stuck_steps) }));
      g.append(node("title", {}, `${p.duplicates_stopped} duplicates stopped, ${p.stuck_steps} stuck steps`));
      f.svg.append(g);
    });
    return figure("Duplicate side effects stopped, stuck steps", f.svg,
      [["duplicates", "duplicates stopped"], ["stuck", "stuck steps"]]);
  }

  function figures(w) {
    const items = [
      ["started", w.started], ["completed", pct(w.completion_rate)], ["abandoned", pct(w.abandonment_rate)],
      ["waiting customer", pct(w.waiting_customer_rate)], ["stuck step", pct(w.stuck_rate)],
      ...QUANTILES.map(([q, l]) => [`${l} to complete`, secs(w.completion_seconds[q])]),
      ["duplicates stopped", w.duplicates_stopped],
    ];
    return items.map(([label, value]) => html("span", { class: "figure", "data-figure": label }, label,
      html("b", {}, String(value))));
  }

  async function loadTrends() {
    const box = document.getElementById("trends");
    if (!box) return;
    const every = document.getElementById("trend-range").value;
    const pick = document.getElementById("trend-group");
    const chosen = pick.value;
    try {
      const response = await fetch(`/api/health/series?every=${encodeURIComponent(every)}`,
        { headers: { Accept: "application/json" } });
      const series = await response.json();
      if (!response.ok) throw new Error(series.error || response.statusText);
      const options = [html("option", { value: "" }, "every app and framework"),
        ...series.groups.map((g) => html("option", { value: `${g.app}\u001f${g.framework}` },
          `${g.app || "(no app)"} · ${g.framework || "(no framework)"}`))];
      pick.replaceChildren(...options);
      const group = series.groups.find((g) => `${g.app}\u001f${g.framework}` === chosen);
      if (group) pick.value = chosen;
      const points = group ? group.points : series.total;
      const windowPoint = group ? group.window : series.window;
      document.getElementById("trend-figures").replaceChildren(...figures(windowPoint));
      document.getElementById("trend-charts").replaceChildren(
        outcomes(series, points), rates(series, points), completion(series, points), guarded(series, points));
      box.dataset.buckets = String(series.buckets.length);
    } catch (err) {
      document.getElementById("trend-charts").replaceChildren(html("p", { class: "error" }, `health: ${err.message}`));
    }
    box.setAttribute("data-trends-loaded", "1");
  }

  document.addEventListener("DOMContentLoaded", () => {
    if (!document.getElementById("trends")) return;
    for (const id of ["trend-range", "trend-group"]) document.getElementById(id).addEventListener("change", loadTrends);
    const refresh = document.getElementById("refresh");
    if (refresh) refresh.addEventListener("click", loadTrends);
    loadTrends();
  });
})();
