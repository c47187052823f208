// The report's op explorer (op_explorer.py): the op table filters by name and kernel kind, sorts by
// any column, and a click on a row outlines the op on the timeline (its `highlight` and `selected`)
// and shows its details and dispatch path. No kernel, no network: the rows come with the page.
// Every string from the trace goes in as text; the details panel is HTML escaped in Python.

const MAX_ROWS = 200;
const COLUMNS = [
  ["name", "op", "text"],
  ["device", "device", "text"],
  ["kernel", "ran", "text"],
  ["calls", "calls", "int"],
  ["fallback", "fell back", "int"],
  ["total_ns", "total", "ns"],
  ["self_ns", "self", "ns"],
  ["bytes_copied", "copied", "bytes"],
  ["path", "dispatch path", "text"],
];
const CELL = "padding:2px 6px;border-bottom:1px solid #eee;text-align:left";

function control(tag, cls, css) {
  const e = document.createElement(tag);
  e.className = cls;
  e.style.cssText = css;
  return e;
}

// Several ranks (the merged report): a rank column and a filter; rows carry `rank`.
function rankFilter(ranks) {
  const sel = control("select", "openreg-op-rank", "font:inherit");
  for (const r of ["", ...ranks]) {
    const o = document.createElement("option");
    o.value = String(r);
    o.textContent = r === "" ? "every rank" : `rank ${r}`;
    sel.appendChild(o);
  }
  return sel;
}

function toolbar(kernels) {
  const bar = control("div", "openreg-op-bar", "display:flex;gap:8px;align-items:center;margin:4px 0");
  const filter = control("input", "openreg-op-filter", "font:inherit;padding:1px 4px;width:220px");
  filter.placeholder = "filter by name…";
  const kernel = control("select", "openreg-op-kernel", "font:inherit");
  for (const k of ["", ...kernels]) {
    const o = document.createElement("option");
    o.value = k;
    o.textContent = k ? `ran ${k}` : "any kernel";
    kernel.appendChild(o);
  }
  const count = control("span", "openreg-op-count", "color:#555");
  bar.append(filter, kernel, count);
  return { bar, filter, kernel, count };
}

// The rows to show: filtered, then sorted.
function visible(rows, state) {
  const needle = state.filter.toLowerCase();
  const out = rows.filter(
    (r) =>
      (!needle || r.name.toLowerCase().includes(needle)) &&
      (!state.kernel || r[state.kernel] > 0) &&
      (state.rank === "" || String(r.rank) === state.rank),
  );
  const [key, desc] = state.sort;
  out.sort((a, b) => {
    const x = a[key];
    const y = b[key];
    const c = typeof x === "number" ? x - y : String(x).localeCompare(String(y));
    return desc ? -c : c;
  });
  return out;
}

function header(table, state, redraw) {
  const tr = document.createElement("tr");
  for (const [key, label] of state.columns) {
    const th = control("th", "", CELL + ";background:#f4f5f7;cursor:pointer;border-bottom:1px solid #ccc");
    th.dataset.key = key;
    const mark = state.sort[0] === key ? (state.sort[1] ? " ▼" : " ▲") : "";
    th.textContent = label + mark;
    th.title = "sort by " + label;
    th.onclick = () => {
      state.sort = [key, state.sort[0] === key ? !state.sort[1] : true];
      redraw();
    };
    tr.appendChild(th);
  }
  table.appendChild(tr);
}

function body(table, rows, state, colors, pick) {
  for (const r of rows.slice(0, MAX_ROWS)) {
    const tr = document.createElement("tr");
    tr.className = "openreg-op-row";
    tr.dataset.name = r.name;
    tr.style.cursor = "pointer";
    if (state.picked === r) tr.style.background = "#e7f0fa";
    for (const [key, , fmt] of state.columns) {
      const td = control("td", "", CELL);
      td.textContent = fmt === "int" ? r[key].toLocaleString() : fmt === "text" ? String(r[key]) : r.text[key];
      if (key === "kernel" && colors[r.kernel]) td.style.borderLeft = `4px solid ${colors[r.kernel]}`;
      tr.appendChild(td);
    }
    tr.onclick = () => pick(r);
    table.appendChild(tr);
  }
}

export function mountOpExplorer(el, data, timeline) {
  el.textContent = "";
  const ranks = data.ranks || null;
  const columns = ranks ? [["rank", "rank", "int"], ...COLUMNS] : COLUMNS;
  const state = { filter: "", kernel: "", rank: "", sort: ["total_ns", true], picked: null, columns };
  const tools = toolbar(data.kernels);
  if (ranks) {
    const sel = rankFilter(ranks);
    tools.bar.insertBefore(sel, tools.count);
    sel.addEventListener("change", () => {
      state.rank = sel.value;
      redraw();
    });
  }
  const wrap = control("div", "", "display:flex;gap:10px;align-items:flex-start");
  const table = control("table", "openreg-op-table", "border-collapse:collapse;font:12px system-ui,sans-serif;flex:0 1 auto");
  const details = control("div", "openreg-op-details", "flex:1 1 38%;max-height:460px;overflow:auto;font:12px system-ui,sans-serif");
  details.textContent = "Click a row to outline that op on the timeline and see how it was dispatched.";
  wrap.append(table, details);
  el.append(tools.bar, wrap);

  function pick(r) {
    state.picked = r;
    if (r.details) details.innerHTML = r.details; // built and escaped in Python (details_html)
    else details.textContent = `${r.name}: ${r.calls} calls (details are kept for the costliest ops only)`;
    timeline.set("highlight", r.name);
    if (r.event >= 0) timeline.set("selected", r.event);
    redraw();
  }

  function redraw() {
    const rows = visible(data.rows, state);
    table.textContent = "";
    header(table, state, redraw);
    body(table, rows, state, data.colors, pick);
    const cut = rows.length > MAX_ROWS ? ` (the first ${MAX_ROWS} shown: filter to narrow)` : "";
    tools.count.textContent = `${rows.length.toLocaleString()} of ${data.rows.length.toLocaleString()} ops${cut}`;
  }

  tools.filter.addEventListener("input", () => {
    state.filter = tools.filter.value;
    redraw();
  });
  tools.kernel.addEventListener("change", () => {
    state.kernel = tools.kernel.value;
    redraw();
  });
  // A slice clicked on the timeline picks its op's row when that slice is the op's longest call.
  timeline.on("change:selected", () => {
    const id = timeline.get("selected");
    const r = data.rows.find((x) => x.event === id);
    if (r && r !== state.picked) pick(r);
  });
  redraw();
}
