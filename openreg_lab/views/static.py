"""Views as static HTML that reads with no kernel and no JavaScript (nbviewer, nbconvert, GitHub,
JupyterLab after the kernel is gone): tables, CSS bars and an SVG timeline, bounded in size.

This is the ``text/html`` beside each live widget in its mimebundle. The report (``report.py``)
adds interactive plotly charts on top of the same pieces.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import pandas as pd

from openreg_lab import theme
from openreg_lab.recording import analysis, breakdown, flow, steps
from openreg_lab.recording.kinds import Kinds
from openreg_lab.recording.lod import PALETTE, Pyramid
from openreg_lab.recording.verdict import Verdict
from openreg_lab.recording.verdict import verdict as verdict_of
from openreg_lab.views.timeline import opening, rows_of, steps_of

#: Rows of a static table at most; the rest are counted.
MAX_ROWS = 30

#: The columns of the static tables, ``(key, label, format)``: shared by text/html and the report.
OP_COLUMNS = [
    ("name", "op", "text"), ("device", "device", "text"), ("kernel", "ran", "text"),
    ("calls", "calls", "int"), ("fallback", "fell back", "int"), ("total_ns", "total", "ns"),
    ("self_ns", "self", "ns"), ("bytes_copied", "copied", "bytes"), ("path", "dispatch path", "text"),
]  # fmt: skip
FLOW_COLUMNS = [("source", "from", "text"), ("target", "to", "text"), ("calls", "calls", "int"),
                ("time_ns", "time", "ns")]  # fmt: skip
CAST_COLUMNS = [
    ("op", "op", "text"), ("from_dtype", "from", "text"), ("to_dtype", "to", "text"),
    ("casts", "casts", "int"), ("bytes", "bytes", "bytes"), ("cache_hits", "cache hits", "int"),
]  # fmt: skip
FIRST_COLUMNS = [
    ("rank", "#", "int"), ("name", "op", "text"), ("saves_ns", "would save", "ns"),
    ("share", "of the time", "pct"), ("calls", "calls", "int"), ("bytes_moved", "bytes moved", "bytes"),
    ("copy_ns", "copies", "ns"),
    ("cpu_ns", "CPU compute", "ns"), ("sources", "called from", "text"),
]  # fmt: skip
PEAK_COLUMNS = [("device", "device", "text"), ("peak_bytes", "peak", "bytes"), ("t_ns", "at", "ns"),
                ("op", "allocated by", "text")]  # fmt: skip
_TABLE = "border-collapse:collapse;font:12px system-ui,sans-serif;margin:4px 0 10px 0"
_TH = "text-align:left;background:#f4f5f7;padding:2px 6px;border-bottom:1px solid #ccc"
_TD = "padding:2px 6px;border-bottom:1px solid #eee"


def one_line(events: pd.DataFrame, dropped: int = 0) -> str:
    """The ``text/plain`` of a trace view: event counts and what fell back."""
    kinds = events["kind"].value_counts()
    fb = int(kinds.get("fallback", 0))
    lost = f", {dropped} DROPPED" if dropped else ""
    return (
        f"<openreg trace dashboard: {len(events)} events, {int(kinds.get('op', 0))} ops, "
        f"{fb} fallback calls{lost}>"
    )


def header_html(events: pd.DataFrame, v: Verdict, *, kinds: Kinds | None = None) -> str:
    """The dashboard's first lines: event counts by kind and span, then the verdict (``verdict_html``).
    ``kinds``: the events' kinds when the caller read them already (Note [Kinds read once])."""
    span = analysis.span(events)
    counts = ", ".join(f"{n:,} {k}" for k, n in Kinds.of(events, kinds).counts().items())
    return (
        f"<div style='font:13px system-ui,sans-serif'><b>openreg trace</b>: {len(events):,} events "
        f"over {theme.format_ns(span)} ({html.escape(counts) or 'nothing recorded'})</div>{verdict_html(v)}"
    )


def verdict_html(v: Verdict) -> str:
    """The verdict (``Trace.verdict()``): a headline, the time shares as bars, the median step, the
    ops to implement first with calls, bytes moved and source lines, and the warnings."""
    colors = {
        "CPU fallbacks": theme.kernel_color("fallback"),
        "copies": theme.COPY_COLORS["D2H"],
        "autocast casts": theme.CAST_COLOR,
    }
    bars = "".join(
        f"<div class='openreg-share' data-label='{html.escape(sh.label)}' data-share='{sh.share:.6f}'>"
        f"<span style='display:inline-block;width:120px'>{html.escape(sh.label)}</span>"
        f"<span style='display:inline-block;width:{max(sh.share, 0) * 240:.1f}px;height:10px;"
        f"background:{colors.get(sh.label, theme.DISPATCH_KEY_COLOR)}'></span> <b>{sh.share:.1%}</b> "
        f"<span style='color:#555'>{html.escape(theme.format_ns(sh.ns) + sh.detail)}</span></div>"
        for sh in v.shares
    )
    step = f"<div class='openreg-step-verdict'>{html.escape(v.step)}</div>" if v.step else ""
    if v.iterations:
        step += f"<div class='openreg-iterations'>{html.escape(v.iterations)}</div>"
    step += wall_time_html(v)
    first = ""
    if v.first:
        rows = pd.DataFrame(v.first)
        rows["rank"] = range(1, len(rows) + 1)
        first = (
            "<div style='margin-top:4px'><b>Implement first</b> "
            "(by the time a native kernel would save)</div>"
            + table_html(rows, FIRST_COLUMNS, max_rows=len(rows))
            + (f"<div style='color:#555'>… and {v.more} more ops that fell back</div>" if v.more else "")
        )
    warns = "".join(
        f"<div class='openreg-warning' style='color:{theme.WARNING_COLOR};font-weight:600'>"
        f"{html.escape(w)}</div>"
        for w in v.warnings
    )
    return (
        "<div class='openreg-verdict' style='font:12px system-ui,sans-serif;margin:4px 0 8px 0'>"
        "<div class='openreg-headline' style='font-size:14px;margin-bottom:4px'>"
        f"<b>{html.escape(v.headline())}</b></div>{warns}{bars}{step}{first}</div>"
    )


#: The colour of each part of the wall time (``recording/accounting.PARTS``).
PART_COLORS = {
    "device ops": theme.kernel_color("native"),
    "compilation": theme.COMPILE_COLOR,
    "host Python": theme.HOST_COLOR,
    "waiting": theme.HOST_WAIT_COLOR,
    "not sampled": "#eeeeee",
}


def wall_time_html(v: Verdict) -> str:
    """Where the wall time of step 0 and the median step went (``Verdict.time``): a bar split into
    device ops, compilation, host Python and waiting, and the functions and waits that took it."""
    if not v.time:
        return ""
    out = ["<div class='openreg-wall-time' style='margin-top:4px'><b>Where the wall time went</b>"]
    for w in v.time:
        bar = "".join(
            f"<span class='openreg-part' data-part='{html.escape(p)}' data-ns='{ns}' "
            f"title='{html.escape(p)}: {html.escape(theme.format_ns(ns))}' style='display:inline-block;"
            f"width:{(ns / w.wall_ns if w.wall_ns else 0) * 360:.1f}px;height:10px;"
            f"background:{PART_COLORS[p]}'></span>"
            for p, ns in w.parts.items()
            if ns > 0
        )
        out.append(f"<div class='openreg-step-time'><div>{html.escape(w.summary())}</div><div>{bar}</div>")
        for title, named in (("host Python", w.python), ("waiting", w.waiting)):
            if named:
                items = "; ".join(html.escape(n.text()) for n in named)
                out.append(f"<div style='color:#555;margin-left:12px'>{title}: {items}</div>")
        out.append("</div>")
    return "".join(out) + "</div>"


def table_html(
    frame: pd.DataFrame, columns: Sequence[tuple[str, str, str]], *, max_rows: int = MAX_ROWS
) -> str:
    """``frame`` as an HTML table of ``(key, label, fmt)`` columns; long tables say how many rows are cut."""
    head = "".join(f"<th style='{_TH}'>{html.escape(label)}</th>" for _, label, _ in columns)
    body = []
    for r in frame.head(max_rows).itertuples(index=False):
        row = r._asdict()
        cells = "".join(f"<td style='{_TD}'>{html.escape(_fmt(row[k], f))}</td>" for k, _, f in columns)
        body.append(f"<tr>{cells}</tr>")
    more = ""
    if len(frame) > max_rows:
        cut = len(frame) - max_rows
        more = f"<div style='color:#666'>… {cut:,} more rows (open the live view or the report)</div>"
    return f"<table style='{_TABLE}'><tr>{head}</tr>{''.join(body)}</table>{more}"


def _fmt(v: object, f: str) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return ""
    if f == "ns":
        return theme.format_ns(float(v))  # type: ignore[arg-type]
    if f == "bytes":
        return theme.format_bytes(float(v))  # type: ignore[arg-type]
    if f == "int":
        return f"{int(v):,}"  # type: ignore[call-overload]
    if f == "pct":
        return f"{float(v):.1%}"  # type: ignore[arg-type]
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v))
    return str(v)


def fallback_bars_html(fb: pd.DataFrame, sentence: str) -> str:
    """Fallbacks as CSS stacked bars (copy to CPU, CPU compute, copy back) with bytes and sources."""
    if fb.empty:
        return f"<p>{html.escape(sentence)}</p>"
    top = float(fb["total_ns"].max()) or 1.0
    rows = [f"<p><b>{html.escape(sentence)}</b></p>"]
    for r in fb.head(MAX_ROWS).itertuples(index=False):
        segs = "".join(
            f"<span title='{label}: {theme.format_ns(v)}' style='display:inline-block;height:12px;"
            f"width:{max(v / top * 360, 0):.1f}px;background:{theme.FALLBACK_PART_COLORS[label]}'></span>"
            for label, v in (
                ("copy to CPU", r.copy_to_cpu_ns),
                ("CPU compute", r.cpu_ns),
                ("copy back", r.copy_back_ns),
            )
        )
        src = html.escape(", ".join(r.sources) or "source unknown (trace with stack=True)")
        rows.append(
            f"<div style='font:12px system-ui,sans-serif;margin:2px 0'><code>{html.escape(r.name)}</code> "
            f"{int(r.calls)} calls, {theme.format_ns(r.total_ns)}, "
            f"{theme.format_bytes(r.bytes_to_cpu + r.bytes_back)} "
            f"moved<br>{segs} <span style='color:#666'>{src}</span></div>"
        )
    legend = " ".join(
        f"<span style='display:inline-block;width:10px;height:10px;background:{c}'></span> {k}"
        for k, c in theme.FALLBACK_PART_COLORS.items()
    )
    return "".join(rows) + f"<div style='font:11px system-ui'>{legend}</div>"


def timeline_svg(
    pyramid: Pyramid,
    width: int = 900,
    events: pd.DataFrame | None = None,
    step_table: pd.DataFrame | None = None,
) -> str:
    """The timeline at one level of detail, as SVG (at most ~2 items per pixel per row): the whole
    trace, or with ``events`` (the trace's) where the live timeline opens, on the steps with each
    Python lane folded (Note [The timeline opens on the steps]); ``step_table``: ``steps.table(events)``
    when the caller has it."""
    gutter, row_h = 110, 14
    span = max(pyramid.span, 1)
    t0, t1 = 0.0, float(span)
    rows = rows_of(pyramid)
    if events is not None:
        t0, t1 = opening(steps_of(events, step_table), span)["view"]
    shown = np.cumsum([not r.get("folded") for r in rows]) - 1  # per row, its drawn index
    drawn = [i for i, r in enumerate(rows) if not r.get("folded")]
    q = pyramid.query(t0, t1, width - gutter)
    h = 18 + row_h * len(drawn)
    scale = (width - gutter) / max(t1 - t0, 1)
    keep = np.array([not rows[r].get("folded") for r in q.row.tolist()], dtype=bool)
    xs = gutter + np.maximum(q.start - t0, 0) * scale
    ws = np.maximum((np.minimum(q.start + q.dur, t1) - np.maximum(q.start, t0)) * scale, 0.6)
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{h}' style='font:10px sans-serif'>"
    ]
    for k, i in enumerate(drawn):
        r = rows[i]
        if r["depth"] == 0:
            more = sum(1 for x in rows if x["lane"] == r["lane"] and x.get("folded"))
            label = r["lane"] + (f" (+{more} rows)" if more else "")
            parts.append(f"<text x='2' y='{18 + k * row_h + 10}'>{html.escape(label)}</text>")
    colors = pyramid.color[q.event]
    for x, wd, row, c, kept in zip(
        xs.tolist(), ws.tolist(), q.row.tolist(), colors.tolist(), keep, strict=True
    ):
        if not kept:
            continue
        parts.append(
            f"<rect x='{x:.1f}' y='{18 + int(shown[row]) * row_h + 1}' width='{wd:.1f}' height='{row_h - 2}' "
            f"fill='{PALETTE[c]}'/>"
        )
    for t, name in pyramid.marks:
        if not t0 <= t <= t1:
            continue
        x = gutter + (t - t0) * scale
        parts.append(
            f"<line x1='{x:.1f}' x2='{x:.1f}' y1='0' y2='{h}' stroke='{theme.MARK_COLOR}' "
            "stroke-dasharray='3 2'/>"
        )
        parts.append(f"<text x='{x + 2:.1f}' y='10' fill='{theme.MARK_COLOR}'>{html.escape(name)}</text>")
    parts.append(
        f"<text x='{gutter}' y='10' fill='#555'>{theme.format_ns(t0) if t0 else 0}</text>"
        f"<text x='{width - 60}' y='10' fill='#555'>{theme.format_ns(t1)}</text>"
    )
    parts.append("</svg>")
    note = ""
    if q.aggregated:
        note = (
            f"<div style='color:#555;font:11px sans-serif'>Aggregated: {len(q.start):,} marks stand for "
            f"{int(q.count.sum()):,} slices (the longest per {theme.format_ns(q.bucket_ns)} and row).</div>"
        )
    return "".join(parts) + note


def dashboard_html(
    events: pd.DataFrame,
    *,
    dropped: int = 0,
    capacity: int | None = None,
    op_events: str = "all",
    pyramid: Pyramid | None = None,
    ops: pd.DataFrame | None = None,
    flows: pd.DataFrame | None = None,
    fallbacks: pd.DataFrame | None = None,
    verdict: Verdict | None = None,
    step_table: pd.DataFrame | None = None,
) -> str:
    """The dashboard without a kernel: header, timeline, op table, fallbacks, dispatch flow, casts, memory.

    A live dashboard passes the tables it already computed (``pyramid``, ``ops``, ``flows``,
    ``fallbacks``, ``verdict``, ``step_table``) so that displaying it does not compute them twice.
    """
    pyramid = pyramid if pyramid is not None else Pyramid(events)
    ops = ops if ops is not None else analysis.summary(events)
    flows = flows if flows is not None else flow.dispatch_flows(events)
    fb = fallbacks if fallbacks is not None else breakdown.fallback_costs(events)
    casts = breakdown.cast_table(events)
    peaks = breakdown.memory_peaks(events)
    table = step_table if step_table is not None else steps.table(events)  # the verdict's and the bands'
    if verdict is None:
        verdict = verdict_of(
            events, dropped=dropped, capacity=capacity, op_events=op_events, step_table=table
        )
    sections = [
        header_html(events, verdict),
        timeline_svg(pyramid, events=events, step_table=table),
        "<h4>Ops</h4>",
        table_html(ops, OP_COLUMNS),
        "<h4>Fallbacks</h4>",
        fallback_bars_html(fb, breakdown.savings_sentence(fb)),
        "<h4>Dispatch flow</h4>",
        table_html(flows, FLOW_COLUMNS),
        "<h4>Autocast casts</h4>",
        table_html(casts, CAST_COLUMNS),
        "<h4>Memory</h4>",
        table_html(peaks, PEAK_COLUMNS),
    ]
    return (
        "<div class='openreg-static' style='font:12px system-ui,sans-serif'>" + "".join(sections) + "</div>"
    )
