// The trace timeline: lanes of nested slices on a canvas, counters, marks, zoom, pan, hover, click.
// Drawn from payloads computed in Python (Note [Timeline level of detail] in lod.py): with a live
// kernel, a zoom asks Python for the window (the `view` trait) and a new `data` payload comes back;
// in static HTML, `levels` holds precomputed payloads over the whole trace and the finest fitting
// one is drawn. The same code serves both: `render({model, el})` is anywidget's contract.

const ROW_H = 18;
const COUNTER_H = 42;
const RULER_H = 22;
const GUTTER = 128;
const FONT = "11px system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";

function view(dv, Type) {
  if (!dv) return new Type(0);
  if (dv instanceof Type) return dv;
  const buf = dv.buffer ? dv.buffer : dv;
  const off = dv.byteOffset || 0;
  const len = (dv.byteLength !== undefined ? dv.byteLength : buf.byteLength) / Type.BYTES_PER_ELEMENT;
  // Copy when misaligned: typed arrays need aligned offsets.
  if (off % Type.BYTES_PER_ELEMENT) return new Type(buf.slice(off, off + len * Type.BYTES_PER_ELEMENT));
  return new Type(buf, off, len);
}

function decode(p) {
  if (!p || p._decoded) return p;
  const out = Object.assign({}, p);
  out.start = view(p.start, Float64Array);
  out.dur = view(p.dur, Float64Array);
  out.row = view(p.row, Int32Array);
  out.event = view(p.event, Int32Array);
  out.count = view(p.count, Int32Array);
  out.color = view(p.color, Uint8Array);
  out.name = view(p.name, Int32Array);
  out.info = view(p.info, Int32Array);
  out.counters = (p.counters || []).map((c) => ({
    device: c.device,
    t: view(c.t, Float64Array),
    min: view(c.min, Float64Array),
    max: view(c.max, Float64Array),
    last: view(c.last, Float64Array),
    op: c.op || [],
  }));
  out._decoded = true;
  return out;
}

export function fmtNs(ns) {
  const a = Math.abs(ns);
  if (a < 1e3) return `${ns.toFixed(0)} ns`;
  if (a < 1e6) return `${(ns / 1e3).toFixed(1)} µs`;
  if (a < 1e9) return `${(ns / 1e6).toFixed(2)} ms`;
  return `${(ns / 1e9).toFixed(3)} s`;
}

function fmtBytes(b) {
  const u = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (Math.abs(b) >= 1024 && i < u.length - 1) {
    b /= 1024;
    i++;
  }
  return i ? `${b.toFixed(1)} ${u[i]}` : `${b} B`;
}

// The step picker: "all steps", then one entry a step; picking one zooms to it.
function stepPicker(steps, zoom) {
  if (!steps.length) return null;
  const sel = document.createElement("select");
  sel.className = "openreg-step-picker";
  sel.title = "zoom to one training step";
  sel.style.cssText = "font:inherit;padding:1px 4px";
  const all = document.createElement("option");
  all.value = "-1";
  all.textContent = steps.length === 1 ? "the 1 step" : `all ${steps.length} steps`;
  sel.appendChild(all);
  steps.forEach((s, k) => {
    const o = document.createElement("option");
    o.value = String(k);
    o.textContent = `step ${s.step}: ${fmtNs(s.t1 - s.t0)}${s.complete ? "" : " (unfinished)"}`;
    sel.appendChild(o);
  });
  sel.addEventListener("change", () => {
    const k = Number(sel.value);
    if (k < 0) zoom(null, null);
    else zoom(steps[k].t0, steps[k].t1);
  });
  return sel;
}

// --- the page: toolbar, canvas, tooltip, legend ------------------------------------------------

function button(bar, label, title) {
  const b = document.createElement("button");
  b.textContent = label;
  b.title = title;
  b.style.cssText = "font:inherit;padding:1px 8px;border:1px solid #bbb;border-radius:3px;background:#f7f7f7;cursor:pointer";
  bar.appendChild(b);
  return b;
}

// The timeline's elements, appended to `el`; the buttons and picker call `zoom(a, b)` (null: all).
function buildDom(el, model, zoom) {
  el.classList.add("openreg-timeline");
  const root = document.createElement("div");
  root.style.cssText = "position:relative;font:" + FONT + ";user-select:none";
  const bar = document.createElement("div");
  bar.style.cssText = "display:flex;gap:6px;align-items:center;margin:2px 0 4px 0";
  const zoomIn = button(bar, "+", "zoom in (or scroll on the timeline)");
  const zoomOut = button(bar, "−", "zoom out");
  const reset = button(bar, "reset", "show the whole trace (or double-click)");
  const opening = model.get("opening") || {};
  const stepsButton =
    (model.get("steps") || []).length > 0 ? button(bar, "steps", "show the steps (where the timeline opens)") : null;
  let apartButton = null;
  if (opening.apart) {
    apartButton = button(bar, `step ${opening.apart.step}`, opening.apart.text);
    apartButton.className = "openreg-step-apart";
  }
  const picker = stepPicker(model.get("steps") || [], zoom);
  if (picker) bar.appendChild(picker);
  let libraryBox = null;
  if (model.get("has_library")) {
    const label = document.createElement("label");
    label.title = "draw the host's Python with the frames of the standard library and installed packages";
    label.style.cssText = "display:flex;gap:3px;align-items:center;cursor:pointer";
    libraryBox = document.createElement("input");
    libraryBox.type = "checkbox";
    libraryBox.className = "openreg-library-frames";
    libraryBox.checked = !!model.get("library");
    label.append(libraryBox, document.createTextNode("library frames"));
    bar.appendChild(label);
  }
  const status = document.createElement("span");
  status.className = "openreg-timeline-status";
  status.style.cssText = "color:#555;margin-left:8px";
  bar.appendChild(status);
  const canvas = document.createElement("canvas");
  canvas.style.cssText = "display:block;cursor:grab;border:1px solid #e3e3e3";
  const tip = document.createElement("div");
  tip.className = "openreg-timeline-tip";
  tip.style.cssText =
    "position:absolute;pointer-events:none;display:none;background:rgba(255,255,255,.97);border:1px solid #999;" +
    "border-radius:3px;padding:4px 6px;font:11px ui-monospace,Menlo,monospace;white-space:pre;z-index:10;max-width:640px;overflow:hidden";
  const legend = document.createElement("div");
  legend.style.cssText = "display:flex;flex-wrap:wrap;gap:10px;margin-top:4px;color:#333";
  const palette = model.get("palette");
  model.get("color_names").forEach((n, i) => {
    // Built node by node, never from markup: every string stays text (Note [Strings reaching a page]).
    const item = document.createElement("span");
    const swatch = document.createElement("span");
    swatch.style.cssText = "display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle";
    swatch.style.background = palette[i];
    item.append(swatch, document.createTextNode(String(n)));
    legend.appendChild(item);
  });
  root.append(bar, canvas, tip, legend);
  el.appendChild(root);
  return { zoomIn, zoomOut, reset, stepsButton, apartButton, libraryBox, status, canvas, tip };
}

// --- the view: which time window is drawn, at what width ----------------------------------------

function makeView(model, el) {
  const v = {
    span: Math.max(model.get("span_ns"), 1),
    t0: 0,
    t1: 0,
    width: Math.max(el.clientWidth || 900, 400),
    x(t) {
      return GUTTER + ((t - v.t0) / (v.t1 - v.t0)) * (v.width - GUTTER - 4);
    },
    tAt(px) {
      return v.t0 + ((px - GUTTER) / (v.width - GUTTER - 4)) * (v.t1 - v.t0);
    },
  };
  v.t1 = v.span;
  const initial = model.get("view");
  if (initial && initial.length === 2 && initial[1] > initial[0]) {
    v.t0 = initial[0];
    v.t1 = initial[1];
  }
  return v;
}

// The rows drawn (Note [The timeline opens on the steps] in timeline.py): each Python lane
// folded to its first rows (those not marked `folded`) unless its lane is in `expanded`.
// `y[r]` is row r's display index, -1 when hidden; `at[k]` the row at display index k.
function layoutRows(rows, expanded) {
  const y = new Int32Array(rows.length);
  const at = [];
  const hidden = {};
  rows.forEach((r, i) => {
    if (r.folded && !expanded.has(r.lane)) {
      y[i] = -1;
      hidden[r.lane] = (hidden[r.lane] || 0) + 1;
    } else {
      y[i] = at.length;
      at.push(i);
    }
  });
  return { rows, y, at, hidden, count: at.length };
}

function layoutHeight(lay, payload) {
  const counters = (payload && payload.counters) || [];
  return RULER_H + lay.count * ROW_H + counters.length * COUNTER_H + 6;
}

// The payload to draw: the coarsest one fine enough for the zoom, else the finest there is. A live
// widget has `data` (for the current window); the static report has whole-trace `levels`.

// What to draw: the rows and the payloads, each with the rows it may draw (`below`). The static
// report's "library frames" toggle draws the op rows of `levels` and the host rows of
// `library_levels` (Note [The timeline opens on the steps]); a live widget's Python swaps `rows`
// and `data` itself.
function current(model, v) {
  const lib = model.get("library") && model.get("library_levels");
  const main = pickPayload(model.get("data"), model.get("levels") || [], v);
  if (!lib) return { rows: model.get("rows"), parts: main ? [{ p: main, below: Infinity }] : [] };
  const parts = [];
  if (main) parts.push({ p: main, below: model.get("host_row") });
  const host = pickPayload(null, lib, v);
  if (host) parts.push({ p: host, below: Infinity });
  return { rows: model.get("library_rows"), parts };
}
function pickPayload(live, levels, v) {
  const all = [];
  if (live && live.start) all.push(live);
  for (const l of levels) all.push(l);
  const target = (v.t1 - v.t0) / (2 * (v.width - GUTTER));
  const covering = all.filter((p) => p.t0 <= v.t0 + 1 && p.t1 >= v.t1 - 1);
  const pool = covering.length ? covering : all;
  let best = null;
  for (const p of pool) {
    const fine = p.bucket_ns <= target;
    if (fine && (!best || !best._fine || p.bucket_ns > best.bucket_ns)) best = Object.assign(p, { _fine: true });
    else if (!fine && (!best || (!best._fine && p.bucket_ns < best.bucket_ns))) best = Object.assign(p, { _fine: false });
  }
  return best ? decode(best) : null;
}

// --- drawing: one function a layer, back to front ------------------------------------------------

function drawRuler(ctx, v, h) {
  ctx.fillStyle = "#fafafa";
  ctx.fillRect(0, 0, v.width, RULER_H);
  const raw = (v.t1 - v.t0) / 8;
  const pow = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * pow).find((s) => s >= raw) || raw;
  ctx.fillStyle = "#555";
  ctx.strokeStyle = "#e6e6e6";
  for (let t = Math.ceil(v.t0 / step) * step; t <= v.t1; t += step) {
    const px = v.x(t);
    ctx.fillText(fmtNs(t), px + 2, 14);
    ctx.beginPath();
    ctx.moveTo(px, RULER_H - 4);
    ctx.lineTo(px, h);
    ctx.stroke();
  }
}

// Training steps (Trace.steps()): a shaded band every other step, its number at the bottom.
function drawStepBands(ctx, v, h, model) {
  const apart = (model.get("opening") || {}).apart;
  (model.get("steps") || []).forEach((s, k) => {
    const xa = Math.max(v.x(s.t0), GUTTER);
    const xb = Math.min(v.x(s.t1), v.width);
    if (xb <= xa) return;
    if (apart && k === 0) {
      // Step 0 shown apart: one-off work (imports, compilation), hatched, its time said.
      ctx.fillStyle = "rgba(230,159,0,0.10)";
      ctx.fillRect(xa, RULER_H, xb - xa, h - RULER_H);
      ctx.strokeStyle = "rgba(230,159,0,0.25)";
      ctx.beginPath();
      for (let x = xa - (h - RULER_H); x < xb; x += 14) {
        ctx.moveTo(Math.max(x, xa), RULER_H + Math.max(xa - x, 0));
        ctx.lineTo(Math.min(x + h - RULER_H, xb), RULER_H + Math.min(xb - x, h - RULER_H));
      }
      ctx.stroke();
      if (xb - xa > 60) {
        ctx.fillStyle = "#8a5a00";
        ctx.fillText(apart.text, xa + 3, h - 4);
      }
      return;
    }
    if (k % 2 === 0) {
      ctx.fillStyle = model.get("step_color") || "rgba(29,53,87,0.07)";
      ctx.fillRect(xa, RULER_H, xb - xa, h - RULER_H);
    }
    if (xb - xa > 36) {
      ctx.fillStyle = "#1d3557";
      ctx.fillText(`step ${s.step}${s.complete ? "" : " (unfinished)"}`, xa + 3, h - 4);
    }
  });
}

// Lane labels; a Python lane's says whether it is folded (click the label to expand it).
function drawLanes(ctx, v, lay, expanded) {
  lay.at.forEach((i, k) => {
    const r = lay.rows[i];
    const y = RULER_H + k * ROW_H;
    if (r.depth !== 0) return;
    ctx.fillStyle = "#f1f3f5";
    ctx.fillRect(0, y, v.width, 1);
    ctx.fillStyle = "#333";
    if (!r.host) {
      ctx.fillText(r.lane, 4, y + 13);
      return;
    }
    const more = lay.hidden[r.lane] || 0;
    const open = expanded.has(r.lane);
    if (!more && !open) {
      ctx.fillText(r.lane, 4, y + 13);
      return;
    }
    ctx.fillText(`${open ? "▾" : "▸"} ${r.lane}`, 4, y + 13);
    ctx.fillStyle = "#1d3557";
    ctx.fillText(open ? "fold" : `+${more} rows`, 14, y + 13 + ROW_H);
  });
}

// The slices, one pass per colour as Perfetto draws; then labels on slices wide enough to hold
// them, and outlines for the selected event and the highlighted op name.
function drawSlices(ctx, v, part, model, lay) {
  const p = part.p;
  const palette = model.get("palette");
  const n = p.start.length;
  const shown = (i) => p.row[i] < part.below && lay.y[p.row[i]] >= 0;
  for (let c = 0; c < palette.length; c++) {
    ctx.fillStyle = palette[c];
    for (let i = 0; i < n; i++) {
      if (p.color[i] !== c || !shown(i)) continue;
      const xa = Math.max(v.x(p.start[i]), GUTTER);
      const xb = Math.min(v.x(p.start[i] + p.dur[i]), v.width);
      if (xb < GUTTER || xa > v.width) continue;
      ctx.fillRect(xa, RULER_H + lay.y[p.row[i]] * ROW_H + 2, Math.max(xb - xa, 1), ROW_H - 3);
    }
  }
  const selected = model.get("selected");
  const highlight = model.get("highlight");
  const names = p.strings || [];
  for (let i = 0; i < n; i++) {
    if (!shown(i)) continue;
    const xa = Math.max(v.x(p.start[i]), GUTTER);
    const xb = Math.min(v.x(p.start[i] + p.dur[i]), v.width);
    const y = RULER_H + lay.y[p.row[i]] * ROW_H;
    const label = names[p.name[i]] || "";
    if (xb - xa > 40) {
      ctx.save();
      ctx.beginPath();
      ctx.rect(xa, y, xb - xa, ROW_H);
      ctx.clip();
      ctx.fillStyle = "white";
      ctx.fillText((p.count[i] > 1 ? `${p.count[i]}× ` : "") + label.replace(/^aten::/, ""), xa + 3, y + 13);
      ctx.restore();
    }
    const isSel = p.event[i] === selected;
    const isHi = highlight && label === highlight;
    if (isSel || isHi) {
      ctx.strokeStyle = isSel ? "#000" : "#1d3557";
      ctx.lineWidth = isSel ? 2 : 1;
      ctx.strokeRect(xa, y + 1.5, Math.max(xb - xa, 2), ROW_H - 2);
    }
  }
}

function drawCounters(ctx, v, p, model, lay) {
  const base = RULER_H + lay.count * ROW_H;
  (p.counters || []).forEach((c, k) => {
    const y0 = base + k * COUNTER_H;
    ctx.fillStyle = "#333";
    ctx.fillText(`memory ${c.device}`, 4, y0 + 14);
    let peak = 1;
    for (let i = 0; i < c.max.length; i++) peak = Math.max(peak, c.max[i]);
    const yOf = (val) => y0 + COUNTER_H - 4 - (val / peak) * (COUNTER_H - 10);
    ctx.fillStyle = "rgba(38,70,83,0.35)";
    ctx.strokeStyle = model.get("memory_color");
    ctx.beginPath();
    let prevV = c.last.length ? c.last[0] : 0;
    ctx.moveTo(GUTTER, yOf(prevV));
    for (let i = 0; i < c.t.length; i++) {
      const px = Math.max(v.x(c.t[i]), GUTTER);
      ctx.lineTo(px, yOf(prevV));
      ctx.fillRect(px, yOf(c.max[i]), 1, yOf(c.min[i]) - yOf(c.max[i]) + 1);
      ctx.lineTo(px, yOf(c.last[i]));
      prevV = c.last[i];
    }
    ctx.lineTo(v.width, yOf(prevV));
    ctx.stroke();
    ctx.fillStyle = "#555";
    ctx.fillText(`peak in view ${fmtBytes(peak)}`, v.width - 150, y0 + 12);
  });
}

function drawMarks(ctx, v, h, model) {
  ctx.strokeStyle = model.get("mark_color");
  ctx.fillStyle = model.get("mark_color");
  for (const m of model.get("marks")) {
    const px = v.x(m.t);
    if (px < GUTTER || px > v.width) continue;
    ctx.beginPath();
    ctx.setLineDash([4, 3]);
    ctx.moveTo(px, RULER_H - 6);
    ctx.lineTo(px, h);
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.fillText(m.name, px + 3, 9);
  }
}

// The moment another view points at (the memory view's click): a solid line across the lanes.
function drawCursor(ctx, v, h, model) {
  const t = model.get("cursor");
  const px = t === undefined || t === null || t < 0 ? -1 : v.x(t);
  if (px < GUTTER || px > v.width) return;
  ctx.fillStyle = model.get("memory_color");
  ctx.fillRect(px - 1, RULER_H - 6, 2, h);
}

// Several ranks (the merged report): a rule above each rank's lane group, and each collective drawn
// across the ranks at its completion, from the first rank's collectives lane to the last's, with a
// dot on the lane of the rank the others waited for. `links` is absent for one trace.
function drawRankLinks(ctx, v, h, model, lay) {
  const links = model.get("links");
  if (!links) return;
  let group = null;
  lay.at.forEach((i, k) => {
    const r = lay.rows[i];
    const g = r.lane.split(" · ")[0];
    if (g !== group && r.depth === 0) {
      group = g;
      ctx.fillStyle = "#5c677d";
      ctx.fillRect(0, RULER_H + k * ROW_H, v.width, 2);
    }
  });
  const color = model.get("link_color") || "#6d597a";
  for (const l of links) {
    const px = v.x(l.t);
    if (px < GUTTER || px > v.width || !l.rows.length) continue;
    const ys = l.rows.map((r) => lay.y[r]).filter((k) => k >= 0);
    if (!ys.length) continue;
    const ya = RULER_H + Math.min(...ys) * ROW_H + 2;
    const yb = RULER_H + Math.max(...ys) * ROW_H + ROW_H - 2;
    ctx.strokeStyle = color;
    ctx.globalAlpha = 0.55;
    ctx.beginPath();
    ctx.moveTo(px, ya);
    ctx.lineTo(px, yb);
    ctx.stroke();
    ctx.globalAlpha = 1;
    if (l.late >= 0 && lay.y[l.late] >= 0) {
      const lx = Math.max(v.x(l.arrived), GUTTER);
      ctx.fillStyle = color;
      ctx.beginPath();
      ctx.arc(lx, RULER_H + lay.y[l.late] * ROW_H + ROW_H / 2, 3, 0, 2 * Math.PI);
      ctx.fill();
    }
  }
}

// What the status line says: how many items are in view and whether they stand for more slices.
function showStatus(status, v, parts) {
  let shown = 0;
  let total = 0;
  for (const { p, below } of parts) {
    for (let i = 0; i < p.start.length; i++) {
      if (p.row[i] < below && p.start[i] < v.t1 && p.start[i] + Math.max(p.dur[i], 1) > v.t0) {
        shown++;
        total += p.count[i];
      }
    }
  }
  const p = parts[0].p;
  status.textContent =
    p.level >= 0
      ? `aggregated: ${shown.toLocaleString()} marks stand for ${total.toLocaleString()} slices in view ` +
        `(the longest per ${fmtNs(p.bucket_ns)} bucket and row); zoom in for real slices`
      : `${shown.toLocaleString()} slices in view, none aggregated`;
  status.dataset.aggregated = p.level >= 0 ? "1" : "0";
  status.dataset.items = String(shown);
  status.dataset.slices = String(total);
}

// --- pointing: which item is under the mouse, and what its tooltip says --------------------------

// The item under (px, py): {p, i}, or null.
function itemAt(v, parts, lay, px, py) {
  if (!parts || px < GUTTER) return null;
  const k = Math.floor((py - RULER_H) / ROW_H);
  if (k < 0 || k >= lay.count) return null;
  const r = lay.at[k];
  const t = v.tAt(px);
  const slack = ((v.t1 - v.t0) / (v.width - GUTTER)) * 2;
  let best = null;
  for (const { p, below } of parts) {
    if (r >= below) continue;
    for (let i = 0; i < p.start.length; i++) {
      if (p.row[i] !== r) continue;
      if (p.start[i] - slack <= t && t <= p.start[i] + p.dur[i] + slack) {
        if (!best || p.dur[i] < best.p.dur[best.i]) best = { p, i };
      }
    }
  }
  return best;
}

// The Python lane whose label (or its "+N rows" line under it) is at (px, py), or null.
function laneLabelAt(lay, px, py) {
  if (px >= GUTTER) return null;
  const k = Math.floor((py - RULER_H) / ROW_H);
  for (const j of [k, k - 1]) {
    if (j < 0 || j >= lay.count) continue;
    const r = lay.rows[lay.at[j]];
    if (r.host && r.depth === 0) return r.lane;
  }
  return null;
}

function tipText(p, i) {
  const lines = [(p.strings || [])[p.name[i]] || "?"];
  const info = (p.strings || [])[p.info[i]];
  if (info) lines.push(info);
  lines.push(`duration: ${fmtNs(p.dur[i])}   start: ${fmtNs(p.start[i])}`);
  if (p.count[i] > 1) lines.push(`stands for ${p.count[i]} slices in this bucket (the longest shown): zoom in`);
  return lines.join("\n");
}

// --- render: anywidget's contract; wires the parts above together --------------------------------

function render({ model, el }) {
  let v = null;
  let parts = null;
  let lay = null;
  let pending = null;
  const expanded = new Set(); // Python lanes unfolded by a click on their label
  const dom = buildDom(el, model, (a, b) => (a === null ? setView(0, v.span) : setView(a, b)));
  const { status, canvas, tip } = dom;
  v = makeView(model, el);

  function draw() {
    const cur = current(model, v);
    parts = cur.parts;
    lay = layoutRows(cur.rows || [], expanded);
    const payload = parts.length ? parts[0].p : null;
    const dpr = window.devicePixelRatio || 1;
    const h = layoutHeight(lay, payload);
    canvas.width = v.width * dpr;
    canvas.height = h * dpr;
    canvas.style.width = v.width + "px";
    canvas.style.height = h + "px";
    const ctx = canvas.getContext("2d");
    ctx.scale(dpr, dpr);
    ctx.font = FONT;
    ctx.fillStyle = "white";
    ctx.fillRect(0, 0, v.width, h);
    drawRuler(ctx, v, h);
    drawStepBands(ctx, v, h, model);
    drawLanes(ctx, v, lay, expanded);
    canvas.dataset.rows = String(lay.count);
    canvas.dataset.folded = String(Object.values(lay.hidden).reduce((a, b) => a + b, 0));
    if (!payload) return;
    for (const part of parts) drawSlices(ctx, v, part, model, lay);
    drawCounters(ctx, v, payload, model, lay);
    drawMarks(ctx, v, h, model);
    drawCursor(ctx, v, h, model);
    drawRankLinks(ctx, v, h, model, lay);
    showStatus(status, v, parts);
  }

  // Show [a, b) (at least 1 µs, within the trace), then tell Python (a live widget) the window.
  function setView(a, b) {
    const minSpan = 1000;
    if (b - a < minSpan) {
      const mid = (a + b) / 2;
      a = mid - minSpan / 2;
      b = mid + minSpan / 2;
    }
    const len = Math.min(b - a, v.span * 1.02);
    a = Math.max(Math.min(a, v.span - len * 0.98), -len * 0.02);
    v.t0 = a;
    v.t1 = a + len;
    draw();
    if (pending) clearTimeout(pending);
    pending = setTimeout(() => {
      model.set("view", [v.t0, v.t1]);
      model.set("width", Math.round(v.width - GUTTER));
      model.save_changes();
    }, 120);
  }

  canvas.addEventListener(
    "wheel",
    (e) => {
      e.preventDefault();
      const t = v.tAt(e.offsetX);
      const f = e.deltaY < 0 ? 0.8 : 1.25;
      setView(t - (t - v.t0) * f, t + (v.t1 - t) * f);
    },
    { passive: false },
  );
  let drag = null;
  canvas.addEventListener("mousedown", (e) => {
    drag = { x: e.offsetX, t0: v.t0, t1: v.t1, moved: false };
    canvas.style.cursor = "grabbing";
  });
  window.addEventListener("mouseup", () => {
    drag = null;
    canvas.style.cursor = "grab";
  });
  canvas.addEventListener("mousemove", (e) => {
    if (drag) {
      const dt = ((e.offsetX - drag.x) / (v.width - GUTTER)) * (drag.t1 - drag.t0);
      if (Math.abs(e.offsetX - drag.x) > 2) drag.moved = true;
      if (drag.moved) setView(drag.t0 - dt, drag.t1 - dt);
      return;
    }
    const hit = itemAt(v, parts, lay, e.offsetX, e.offsetY);
    canvas.style.cursor = laneLabelAt(lay, e.offsetX, e.offsetY) ? "pointer" : "grab";
    if (!hit) {
      tip.style.display = "none";
      return;
    }
    tip.textContent = tipText(hit.p, hit.i);
    tip.style.display = "block";
    tip.style.left = Math.min(e.offsetX + 12, v.width - 300) + "px";
    tip.style.top = e.offsetY + 40 + "px";
  });
  canvas.addEventListener("mouseleave", () => (tip.style.display = "none"));
  canvas.addEventListener("click", (e) => {
    if (drag && drag.moved) return;
    const lane = laneLabelAt(lay, e.offsetX, e.offsetY);
    if (lane !== null) {
      if (expanded.has(lane)) expanded.delete(lane);
      else expanded.add(lane);
      draw();
      return;
    }
    const hit = itemAt(v, parts, lay, e.offsetX, e.offsetY);
    if (!hit) return;
    model.set("selected", hit.p.event[hit.i]);
    model.save_changes();
    draw();
  });
  canvas.addEventListener("dblclick", () => setView(0, v.span));
  dom.zoomIn.onclick = () => setView(v.t0 + (v.t1 - v.t0) * 0.25, v.t1 - (v.t1 - v.t0) * 0.25);
  dom.zoomOut.onclick = () => setView(v.t0 - (v.t1 - v.t0) * 0.5, v.t1 + (v.t1 - v.t0) * 0.5);
  dom.reset.onclick = () => setView(0, v.span);
  const opening = model.get("opening") || {};
  if (dom.stepsButton && opening.view) dom.stepsButton.onclick = () => setView(opening.view[0], opening.view[1]);
  if (dom.apartButton) dom.apartButton.onclick = () => setView(opening.apart.t0, opening.apart.t1);
  if (dom.libraryBox) {
    dom.libraryBox.addEventListener("change", () => {
      model.set("library", dom.libraryBox.checked);
      model.save_changes();
      draw();
    });
  }

  // A window set from outside (another view, or Python): adopt it; our own echo changes nothing.
  model.on("change:view", () => {
    const w = model.get("view");
    const moved = w && w.length === 2 && (Math.abs(w[0] - v.t0) > 1 || Math.abs(w[1] - v.t1) > 1);
    if (moved && w[1] > w[0]) setView(w[0], w[1]);
  });
  model.on("change:cursor", draw);
  model.on("change:data", draw);
  model.on("change:selected", draw);
  model.on("change:highlight", draw);
  model.on("change:rows", draw);
  if (typeof ResizeObserver !== "undefined") {
    new ResizeObserver(() => {
      const w = Math.max(el.clientWidth || v.width, 400);
      if (Math.abs(w - v.width) > 4) {
        v.width = w;
        draw();
      }
    }).observe(el);
  }
  draw();
}

export default { render };
