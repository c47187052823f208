// A sortable, filterable, paged table whose rows are computed in Python (views/table.py): the
// browser only draws the current page and sends back clicks, sort keys, filters and page turns.

function fmt(v, kind) {
  if (v === null || v === undefined) return "";
  if (kind === "ns") {
    const a = Math.abs(v);
    if (a < 1e3) return `${v.toFixed(0)} ns`;
    if (a < 1e6) return `${(v / 1e3).toFixed(1)} µs`;
    if (a < 1e9) return `${(v / 1e6).toFixed(2)} ms`;
    return `${(v / 1e9).toFixed(3)} s`;
  }
  if (kind === "bytes") {
    const u = ["B", "KiB", "MiB", "GiB"];
    let i = 0;
    let b = v;
    while (Math.abs(b) >= 1024 && i < u.length - 1) {
      b /= 1024;
      i++;
    }
    return i ? `${b.toFixed(1)} ${u[i]}` : `${b} B`;
  }
  if (kind === "int") return Number(v).toLocaleString();
  if (kind === "pct") return `${(100 * v).toFixed(1)}%`;
  return String(v);
}

function render({ model, el }) {
  el.classList.add("openreg-table");
  const style = document.createElement("style");
  style.textContent = `
    .openreg-table { font: 12px system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif; }
    .openreg-table table { border-collapse: collapse; width: 100%; }
    .openreg-table th { text-align: left; background: #f4f5f7; cursor: pointer; padding: 3px 6px;
      border-bottom: 1px solid #ccc; white-space: nowrap; position: sticky; top: 0; }
    .openreg-table td { padding: 2px 6px; border-bottom: 1px solid #eee; white-space: nowrap; }
    .openreg-table td.num { text-align: right; font-variant-numeric: tabular-nums; }
    .openreg-table tr.openreg-row { cursor: pointer; }
    .openreg-table tr.openreg-row:hover { background: #eef4ff; }
    .openreg-table tr.openreg-selected { background: #dbe7ff; }
    .openreg-table .bar { display: flex; gap: 6px; align-items: center; margin-bottom: 4px; flex-wrap: wrap; }
    .openreg-table .chip { background: #e8eefc; border-radius: 10px; padding: 1px 8px; }
    .openreg-table .dot { display: inline-block; width: 9px; height: 9px; border-radius: 2px; margin-right: 4px; }
  `;
  el.appendChild(style);
  const bar = document.createElement("div");
  bar.className = "bar";
  const search = document.createElement("input");
  search.type = "search";
  search.placeholder = "filter by name…";
  search.className = "openreg-search";
  search.style.width = "180px";
  const kernel = document.createElement("select");
  const device = document.createElement("select");
  const chip = document.createElement("span");
  const info = document.createElement("span");
  info.style.color = "#555";
  const prev = document.createElement("button");
  prev.textContent = "‹ prev";
  const next = document.createElement("button");
  next.textContent = "next ›";
  bar.append(search, kernel, device, chip, prev, next, info);
  const box = document.createElement("div");
  box.style.cssText = "max-height: 340px; overflow: auto; border: 1px solid #e3e3e3";
  el.append(bar, box);

  function options(select, values, current, label) {
    select.innerHTML = "";
    for (const v of ["", ...values]) {
      const o = document.createElement("option");
      o.value = v;
      o.textContent = v || label;
      if (v === current) o.selected = true;
      select.appendChild(o);
    }
  }

  function draw() {
    const cols = model.get("columns");
    const rows = model.get("rows");
    const [sortKey, asc] = model.get("sort");
    if (document.activeElement !== search) search.value = model.get("name_filter");
    options(kernel, model.get("kernels"), model.get("kernel_filter"), "any kernel");
    options(device, model.get("devices"), model.get("device_filter"), "any device");
    kernel.style.display = model.get("kernels").length ? "" : "none";
    device.style.display = model.get("devices").length ? "" : "none";
    const flow = model.get("flow_label");
    chip.innerHTML = "";
    if (flow) {
      chip.className = "chip";
      chip.textContent = `flow: ${flow} `;
      const x = document.createElement("a");
      x.textContent = "×";
      x.href = "#";
      x.onclick = (e) => {
        e.preventDefault();
        model.set("flow_label", "");
        model.save_changes();
      };
      chip.appendChild(x);
    } else chip.className = "";
    const total = model.get("total");
    const page = model.get("page");
    const size = model.get("page_size");
    const pages = Math.max(1, Math.ceil(total / size));
    info.textContent = `${total.toLocaleString()} rows · page ${page + 1} of ${pages}`;
    prev.disabled = page <= 0;
    next.disabled = page >= pages - 1;
    const selected = model.get("selected_key");
    const t = document.createElement("table");
    const head = document.createElement("tr");
    for (const c of cols) {
      const th = document.createElement("th");
      th.textContent = c.label + (c.key === sortKey ? (asc ? " ▲" : " ▼") : "");
      th.title = c.title || "sort by " + c.label;
      th.onclick = () => {
        model.set("sort", [c.key, c.key === sortKey ? !asc : c.fmt === "text"]);
        model.save_changes();
      };
      head.appendChild(th);
    }
    t.appendChild(head);
    const colors = model.get("colors");
    for (const r of rows) {
      const tr = document.createElement("tr");
      tr.className = "openreg-row" + (r._key === selected ? " openreg-selected" : "");
      tr.dataset.key = r._key;
      for (const c of cols) {
        const td = document.createElement("td");
        const v = r[c.key];
        if (c.fmt !== "text") td.className = "num";
        if (c.color && colors[v]) {
          const dot = document.createElement("span");
          dot.className = "dot";
          dot.style.background = colors[v];
          td.appendChild(dot);
        }
        td.appendChild(document.createTextNode(fmt(v, c.fmt)));
        tr.appendChild(td);
      }
      tr.onclick = () => {
        model.set("selected_key", r._key);
        model.save_changes();
      };
      t.appendChild(tr);
    }
    box.innerHTML = "";
    box.appendChild(t);
  }

  let timer = null;
  search.oninput = () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      model.set("name_filter", search.value);
      model.save_changes();
    }, 200);
  };
  kernel.onchange = () => {
    model.set("kernel_filter", kernel.value);
    model.save_changes();
  };
  device.onchange = () => {
    model.set("device_filter", device.value);
    model.save_changes();
  };
  prev.onclick = () => {
    model.set("page", Math.max(0, model.get("page") - 1));
    model.save_changes();
  };
  next.onclick = () => {
    model.set("page", model.get("page") + 1);
    model.save_changes();
  };
  for (const k of ["rows", "columns", "sort", "selected_key", "total", "page", "flow_label", "name_filter",
                   "kernel_filter", "device_filter", "kernels", "devices"]) {
    model.on("change:" + k, draw);
  }
  draw();
}

export default { render };
