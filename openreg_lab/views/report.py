"""The HTML report (``Trace.to_html``): one self-contained file that works offline and needs no server.

It opens on the verdict (``Trace.verdict()``: what falls back, what it costs, what to implement
first). Then plotly.js once (inline, no CDN), the timeline's JavaScript with precomputed levels of
detail (Note [Timeline level of detail]: zooming works without a kernel down to the finest level
kept, whose size is bounded), the dashboard's charts, the static tables, the coverage of the ops
that ran and, collapsed at the end, what was run. Events are aggregated, never embedded one by
one, so a million-event trace makes a report of bounded size; the report says so.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from openreg_lab import theme
from openreg_lab.recording import analysis, atomic, breakdown, flow, steps
from openreg_lab.recording import host as _host
from openreg_lab.recording.lod import Pyramid
from openreg_lab.recording.memory import Memory
from openreg_lab.recording.verdict import Verdict
from openreg_lab.recording.verdict import verdict as verdict_of
from openreg_lab.views import charts, memory_view, static
from openreg_lab.views._embed import plain_text, script_json
from openreg_lab.views.op_explorer import JS as EXPLORER_JS
from openreg_lab.views.op_explorer import explorer_data
from openreg_lab.views.timeline import (
    COLOR_NAMES,
    PALETTE,
    drawn_steps,
    marks_of,
    opening,
    payload,
    rows_of,
    steps_of,
)

#: The report keeps pyramid levels of the timeline while their items stay under this many in all.
MAX_TIMELINE_ITEMS = 60_000


def report_html(
    events: pd.DataFrame,
    *,
    title: str | None = None,
    run_info: Mapping[str, str] | None = None,
    dropped: int = 0,
    capacity: int | None = None,
    coverage: pd.DataFrame | None = None,
    op_events: str = "all",
    verdict: Verdict | None = None,
    host: pd.DataFrame | None = None,
    host_library: pd.DataFrame | None = None,
    memory: Memory | None = None,
) -> str:
    """The report as one HTML string (see the module's docstring): the verdict first, then the
    timeline, the op table and the charts; what was run last, collapsed. ``memory``
    (``Trace.memory()``): the memory view (``views.memory_view``) instead of the allocator's line."""
    import plotly.io as pio
    import plotly.offline

    drawn = _host.with_events(events, host)  # the timeline draws the host slices too
    pyramid = Pyramid(drawn)
    step_table = steps.table(events)  # the bands' and (when not given) the verdict's
    step_bands = steps_of(events, drawn_steps(step_table, host))
    opens = opening(step_bands, pyramid.span, drawn)
    title = title or "openreg-lab trace report"
    info = {
        "torch": torch.__version__,
        "events": f"{len(events):,}",
        "dropped events": f"{dropped:,}" + (" (totals miss them)" if dropped else ""),
        "op events": "every op call" if op_events == "all" else "openreg's kernels only",
        **dict(run_info or {}),
    }
    fallbacks = breakdown.fallback_costs(events)  # the chart's, and (when not given) the verdict's
    if verdict is None:
        verdict = verdict_of(
            events,
            dropped=dropped,
            capacity=capacity,
            op_events=op_events,
            step_table=step_table,
            fallbacks=fallbacks,
        )
    figs = [
        ("Fallbacks", charts.fallbacks(fallbacks)),
        ("Dispatch flow", charts.dispatch_flow(flow.dispatch_flows(events))),
        ("Copies and casts", charts.copies_and_casts(events)),
    ]
    if memory is None:
        figs.append(("Memory", charts.memory(events, pyramid)))
    chart_html = []
    fb = fallbacks
    for i, (name, fig) in enumerate(figs):
        div = pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=f"chart{i}")
        chart_html.append(f"<section><h2>{html.escape(name)}</h2>{div}</section>")
        if name == "Fallbacks":
            chart_html.append(static.fallback_bars_html(fb, breakdown.savings_sentence(fb)))
    if memory is not None:
        chart_html.append(
            memory_view.report_section(memory, memory_view.tables(memory, memory_view.REPORT_MOMENTS))
        )
    levels, kept = _timeline_levels(pyramid, drawn)
    model = {
        "rows": rows_of(pyramid),
        "palette": PALETTE,
        "color_names": COLOR_NAMES,
        "memory_color": theme.MEMORY_COLOR,
        "mark_color": theme.MARK_COLOR,
        "marks": marks_of(pyramid),
        "steps": step_bands,
        "step_color": theme.STEP_BAND_COLOR,
        "opening": opens,
        "span_ns": float(max(pyramid.span, 1)),
        "view": list(opens["view"]),
        "width": 900,
        "data": {},
        "levels": levels,
        "selected": -1,
        "highlight": "",
        **library_model(events, pyramid, host_library),
    }
    plotly_js = plotly.offline.get_plotlyjs()
    ops = analysis.summary(events)
    explorer = explorer_data(events, ops)
    cov = ""
    if coverage is not None:
        ran = coverage[coverage["hits"] > 0].sort_values("time_ns", ascending=False)
        cov = (
            "<section><h2>Coverage of the ops that ran</h2>"
            + static.table_html(
                ran,
                [
                    ("name", "op", "text"),
                    ("resolution", "resolution", "text"),
                    ("kernel", "kernel", "text"),
                    ("hits", "calls", "int"),
                    ("time_ns", "time", "ns"),
                ],
                max_rows=200,
            )
            + "</section>"
        )
    finest = "every slice" if any(lvl["level"] == -1 for lvl in levels) else "no finer level"
    detail_note = (
        f"The timeline keeps {len(levels)} levels of detail ({kept:,} drawn items in all) for "
        f"{pyramid.slice_count:,} slices: zoomed out, events are aggregated per time bucket and row "
        f"(the longest slice of each is drawn); zooming in draws finer levels, down to {finest}."
    )
    casts = static.table_html(breakdown.cast_table(events), static.CAST_COLUMNS, max_rows=100)
    info_rows = "".join(
        f"<tr><th style='{static._TH}'>{html.escape(k)}</th>"
        f"<td style='{static._TD}'>{html.escape(str(v))}</td></tr>"
        for k, v in info.items()
    )
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font:13px system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:18px;
color:{theme.TEXT_COLOR}}}
h1{{font-size:20px}} h2{{font-size:15px;margin-top:22px}} section{{margin-bottom:12px}}</style>
<script>{plotly_js}</script></head>
<body><h1>{html.escape(title)}</h1>
<section id="verdict">{static.header_html(events, verdict)}</section>
<section><h2>Timeline</h2><div id="timeline" style="width:100%"></div>
<div style="color:{theme.MUTED_TEXT_COLOR}">{html.escape(detail_note)}</div></section>
<section><h2>Ops</h2><div id="op-explorer">{static.table_html(ops, static.OP_COLUMNS, max_rows=200)}</div>
</section>
{"".join(chart_html)}
<section><h2>Autocast casts</h2>{casts}</section>
{cov}
<details id="run-info"><summary><b>What was run</b> (torch, command, policy, trace settings)</summary>
<table style="{static._TABLE}">{info_rows}</table></details>
{_mount_script(model, explorer)}
</body></html>
"""


def _timeline_levels(
    pyramid: Pyramid, events: pd.DataFrame, first_row: int = 0
) -> tuple[list[dict[str, Any]], int]:
    """Whole-trace payloads from the coarsest level down, while their items fit the budget; only
    the items of rows from ``first_row`` on."""
    out: list[dict[str, Any]] = []
    kept = 0
    span = max(pyramid.span, 1)
    for level in range(len(pyramid.levels) - 1, -1, -1):
        lvl = pyramid.levels[level]
        mine = len(lvl) - int(lvl.offsets[first_row])
        if out and kept + mine > MAX_TIMELINE_ITEMS:
            break
        q = pyramid.query_level(level, 0, span)
        if first_row:
            keep = q.row >= first_row
            q = replace(q, **{c: getattr(q, c)[keep] for c in ("start", "dur", "row", "event", "count")})
        out.append(_base64(payload(pyramid, events, q)))
        kept += len(q.start)
    return out, kept


def library_model(
    events: pd.DataFrame, pyramid: Pyramid, host_library: pd.DataFrame | None
) -> dict[str, Any]:
    """The static timeline's "library frames" toggle (Note [The timeline opens on the steps]): the
    rows and the host rows' payloads of the events drawn with ``host_library``
    (``Trace.host_slices(library=True)``); none without host slices."""
    if host_library is None or host_library.empty:
        return {"has_library": False, "library": False}
    drawn = _host.with_events(events, host_library)
    lib = Pyramid(drawn)
    assert lib.host_row == pyramid.host_row  # the op rows do not depend on the host slices
    levels, _ = _timeline_levels(lib, drawn, lib.host_row)
    return {
        "has_library": True,
        "library": False,
        "host_row": lib.host_row,
        "library_rows": rows_of(lib),
        "library_levels": levels,
    }


def _base64(p: dict[str, Any]) -> dict[str, Any]:
    def enc(v: Any) -> Any:
        if isinstance(v, memoryview):
            return {"b64": base64.b64encode(v.tobytes()).decode()}
        if isinstance(v, list):
            return [enc(x) for x in v]
        if isinstance(v, dict):
            return {k: enc(x) for k, x in v.items()}
        if isinstance(v, np.generic):
            return v.item()
        return v

    return enc(p)


def _mount_script(model: Any, explorer: Any) -> str:
    """The page's module script: the timeline drawn from ``model`` into ``#timeline`` and the op
    explorer from ``explorer`` into ``#op-explorer``, linked (the single-rank and the merged report)."""
    js = Path(__file__).with_name("timeline.js").read_text()
    return f"""<script type="module">
{_static_model_js()}
const load = (text) => import(URL.createObjectURL(new Blob([text], {{type: "text/javascript"}})));
const timeline = staticModel({script_json(model)});
window.openregReport = {{timeline}};
(await load({script_json(js)})).default.render({{model: timeline, el: document.getElementById("timeline")}});
(await load({script_json(EXPLORER_JS.read_text())})).mountOpExplorer(
  document.getElementById("op-explorer"), {script_json(explorer)}, timeline);
</script>"""


def _static_model_js() -> str:
    """A stand-in for anywidget's model in a page with no kernel: traits in a dict, events local."""
    return """
function unb64(v) {
  if (v && typeof v === "object" && "b64" in v) {
    const s = atob(v.b64); const a = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) a[i] = s.charCodeAt(i);
    return new DataView(a.buffer);
  }
  if (Array.isArray(v)) return v.map(unb64);
  if (v && typeof v === "object") { const o = {}; for (const k in v) o[k] = unb64(v[k]); return o; }
  return v;
}
function staticModel(state) {
  state = unb64(state);
  const handlers = {};
  return {
    get: (k) => state[k],
    set: (k, v) => { state[k] = v; (handlers["change:" + k] || []).forEach((f) => f()); },
    on: (name, f) => { (handlers[name] = handlers[name] || []).push(f); },
    save_changes: () => {},
  };
}
"""


def write_report(
    events: pd.DataFrame,
    path: str,
    *,
    title: str | None = None,
    run_info: Mapping[str, str] | None = None,
    dropped: int = 0,
    capacity: int | None = None,
    coverage: pd.DataFrame | None = None,
    op_events: str = "all",
    verdict: Verdict | None = None,
    host: pd.DataFrame | None = None,
    host_library: pd.DataFrame | None = None,
    memory: Memory | None = None,
) -> None:
    """Write ``report_html(...)`` to ``path``; a path that cannot be written raises ``OSError``
    naming it."""
    atomic.check(path)  # a path no output may go to, refused before the report is drawn
    text = report_html(
        events,
        title=title,
        run_info=run_info,
        dropped=dropped,
        capacity=capacity,
        coverage=coverage,
        op_events=op_events,
        verdict=verdict,
        host=host,
        host_library=host_library,
        memory=memory,
    )
    try:
        with atomic.replacing(path, "w", encoding="utf-8") as f:
            f.write(plain_text(text))
    except OSError as e:
        raise OSError(f"cannot write the report to {path!r}: {e.strerror or e}") from None
