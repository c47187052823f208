// The report's memory view (views/memory_view.py): a click on the chart lists the rows embedded for
// the clicked moment under it, as text nodes only (Note [Strings reaching a page]), and moves the
// timeline's cursor and view there (window.openregReport.timeline, when the page has a timeline).
// The list's caption says what the embedded rows leave out, as memory_view.caption does in Python.
function openregMemoryView(id, data) {
  const fmtBytes = (n) => {
    const units = ["B", "KiB", "MiB", "GiB"];
    let u = 0;
    while (Math.abs(n) >= 1024 && u < 3) { n /= 1024; u++; }
    return u ? n.toFixed(1) + " " + units[u] : n.toFixed(0) + " B";
  };
  const fmtNs = (ns) => {
    const a = Math.abs(ns);
    if (a < 1e3) return ns.toFixed(0) + " ns";
    if (a < 1e6) return (ns / 1e3).toFixed(1) + " µs";
    return a < 1e9 ? (ns / 1e6).toFixed(1) + " ms" : (ns / 1e9).toFixed(2) + " s";
  };
  const el = (tag, text, style) => {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (style) e.style.cssText = style;
    return e;
  };
  const TH = "text-align:left;background:#f4f5f7;padding:2px 6px;border-bottom:1px solid #ccc";
  const TD = "padding:2px 6px;border-bottom:1px solid #eee";
  function show(device, i) {
    const d = data.devices[device];
    if (!d || i < 0 || i >= d.t.length) return;
    const rows = d.rows[i];
    const [count, total] = d.totals[i];
    let text = `Live on ${device} at ${fmtNs(d.t[i])} (step ${d.step[i]}): ` +
      `${count.toLocaleString("en-US")} allocations, ${fmtBytes(total)}.`;
    if (count > rows.length) {
      const listed = rows.reduce((s, r) => s + r[0], 0);
      text += ` The ${rows.length.toLocaleString("en-US")} largest are listed, the other ` +
        `${(count - rows.length).toLocaleString("en-US")} (${fmtBytes(total - listed)}) left out ` +
        "(Trace.memory().live(t_ns) lists all).";
    }
    const box = document.getElementById("memory-live");
    box.replaceChildren();
    const cap = el("div", text);
    cap.className = "openreg-memory-caption";
    box.appendChild(cap);
    const table = el("table", undefined, "border-collapse:collapse;font:12px system-ui,sans-serif;margin:4px 0 10px 0");
    const head = el("tr");
    for (const h of ["size", "category", "op", "module", "line", "age (steps)"]) head.appendChild(el("th", h, TH));
    table.appendChild(head);
    for (const r of rows) {
      const tr = el("tr");
      const cells = [fmtBytes(r[0]), data.categories[r[1]], data.strings[r[2]], data.strings[r[3]],
                     data.strings[r[4]], r[5].toLocaleString("en-US")];
      for (const c of cells) tr.appendChild(el("td", c, TD));
      table.appendChild(tr);
    }
    box.appendChild(table);
    box.dataset.device = device;
    box.dataset.moment = String(i);
    const report = window.openregReport;
    const tl = report && report.timeline;
    if (tl) {
      const t = d.t[i];
      const span = tl.get("span_ns");
      const v = tl.get("view");
      let w = v[1] - v[0];
      if (w >= span * 0.99) w = span / 8;
      tl.set("cursor", t);
      tl.set("view", [t - w / 2, t + w / 2]);
    }
  }
  const gd = document.getElementById(id);
  const hook = () => {
    if (!gd.on) return setTimeout(hook, 50);
    gd.on("plotly_click", (ev) => {
      for (const p of ev.points || []) {
        const meta = p.data && p.data.meta;
        if (!meta || !meta.device) continue;
        show(meta.device, meta.moment !== undefined ? meta.moment : p.pointIndex);
        return;
      }
    });
  };
  hook();
}
