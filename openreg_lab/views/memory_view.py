"""The memory view: bytes live over time stacked by category, the training steps, the peak and any
out of memory marked; a click at a moment lists what was live then (``Trace.memory()``'s tables).

::

    m = t.memory()
    tables = memory_view.tables(m)        # timeline(buckets=...), peaks(), steps(), ooms()
    memory_view.figure(tables)            # the plotly figure: a stacked area a device
    memory_view.live_html(m.live(t_ns, "openreg:0"), ...)  # what the dashboard lists at a click
    memory_view.report_section(m, tables)  # the report's: the chart, the list, each moment's list
    memory_view.rank_peaks_html(memory_ranks.peaks_by_rank(traces))  # the merged report's row

Level of detail: the chart draws ``Memory.timeline(buckets=MAX_MOMENTS)`` (each time bucket's
highest moment, the peak always among them), so a trace of a million allocations draws a few
thousand points. The dashboard asks ``Memory.live`` at the clicked moment; the report, which has
no kernel, embeds the ``LIVE_ROWS`` largest allocations live at each moment it draws
(``Memory.live_many``) and says under the list how many more there were. Every string of a trace
(ops, modules, lines) reaches the page as text (Note [Strings reaching a page]).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from openreg_lab import theme
from openreg_lab.recording import lookup
from openreg_lab.recording.observations import CATEGORIES
from openreg_lab.views import static
from openreg_lab.views._embed import plotly_text, script_json

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from openreg_lab.recording.memory import Memory

_JS = Path(__file__).with_name("memory_view.js")
#: Moments a device the chart draws at most (``Memory.timeline(buckets=...)``).
MAX_MOMENTS = 1500
#: Moments a device the report embeds (its chart is drawn from these) and rows listed at each.
REPORT_MOMENTS = 600
LIVE_ROWS = 20
#: Step boundaries are labelled when a trace has at most this many steps (always drawn).
LABELLED_STEPS = 12
#: What the chart says for a trace with no memory event on an openreg device.
NO_MEMORY = "No allocation or free on an openreg device in this trace: no memory to draw"
#: The columns of the list of what was live, ``(key, label, format)`` (``static.table_html``).
LIVE_TABLE_COLUMNS = [
    ("block_bytes", "size", "bytes"), ("category", "category", "text"), ("op", "op", "text"),
    ("module", "module", "text"), ("source", "line", "text"), ("age_steps", "age (steps)", "int"),
]  # fmt: skip


@dataclass
class MemoryTables:
    """What the memory view draws, from ``Trace.memory()``: tables only."""

    timeline: pd.DataFrame  #: ``Memory.timeline(buckets=...)``
    step_ends: pd.DataFrame  #: ``Memory.step_ends()``
    ooms: pd.DataFrame  #: ``Memory.ooms()``
    complete: bool
    problems: list[str]
    _moments: dict[str, tuple[np.ndarray, list[str], np.ndarray]] = field(default_factory=dict, repr=False)

    @property
    def devices(self) -> list[str]:
        """The devices with memory events, in the tables' order."""
        return [str(d) for d in self.timeline["device"].unique()]

    def moments(self, device: str) -> tuple[np.ndarray, list[str], np.ndarray]:
        """The chart's moments on ``device``: their ``t_ns``, the categories that device held, and
        the bytes live per category at each (a row a moment, a column a category)."""
        if device not in self._moments:
            tl = self.timeline[self.timeline["device"] == device]
            codes = np.unique(tl["category"].cat.codes.to_numpy())  # the codes index CATEGORIES
            cats = [CATEGORIES[c] for c in codes.tolist()]
            k = max(len(cats), 1)
            self._moments[device] = (tl["t_ns"].to_numpy()[::k], cats, tl["bytes"].to_numpy().reshape(-1, k))
        return self._moments[device]

    def peak_moment(self, device: str) -> int:
        """The index of the peak among ``moments(device)``: the first moment holding the most (the
        timeline keeps it among its moments, so it is ``Memory.peaks()``' moment)."""
        _, _, b = self.moments(device)
        return int(np.argmax(b.sum(axis=1))) if len(b) else 0

    def step_of(self, t_ns: np.ndarray) -> np.ndarray:
        """The training step each trace-relative time ran in (``Memory.steps()``' numbering)."""
        ends = self.step_ends["end_ns"].to_numpy()
        steps = self.step_ends["step"].to_numpy()
        numbers = np.r_[steps, steps[-1] + 1] if len(steps) else np.zeros(1, dtype=np.int64)
        return numbers[np.searchsorted(ends, np.asarray(t_ns), side="left")]

    @property
    def peaks(self) -> pd.DataFrame:
        """Each device's peak (a row a device: ``device``, ``peak_bytes``, ``t_ns``, ``step`` and
        the bytes of each category then, as ``Memory.peaks()``), read from the timeline's moments."""
        rows = []
        for device in self.devices:
            when, cats, b = self.moments(device)
            i = self.peak_moment(device)
            at = dict(zip(cats, b[i].tolist(), strict=True))
            rows.append({"device": device, "peak_bytes": int(b[i].sum()), "t_ns": int(when[i]),
                         "step": int(self.step_of(when[i : i + 1])[0]),
                         **{c: int(at.get(c, 0)) for c in CATEGORIES}})  # fmt: skip
        return pd.DataFrame(rows, columns=["device", "peak_bytes", "t_ns", "step", *CATEGORIES])


def tables(memory: Memory, buckets: int = MAX_MOMENTS) -> MemoryTables:
    """The tables the memory view draws, with at most ``buckets`` moments a device."""
    return MemoryTables(
        memory.timeline(buckets=buckets),
        memory.step_ends(),
        memory.ooms(),
        memory.complete,
        list(memory.problems),
    )


def incomplete_note(t: MemoryTables) -> str:
    """The sentence a view shows above the chart when the memory tables are incomplete ("" if not)."""
    if t.complete:
        return ""
    return "Memory incomplete: " + " ".join(t.problems)


def figure(t: MemoryTables) -> go.Figure:
    """Bytes live over time by category (stacked, one area a category in ``CATEGORIES`` order, a
    panel a device), the ends of the training steps, the peak (value and time) and each out of
    memory marked. Each area's ``meta`` is ``{"device": ...}``: a click's point index is the moment."""
    from plotly.subplots import make_subplots

    devices = t.devices
    n = max(len(devices), 1)
    fig = make_subplots(rows=n, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=[plotly_text(d) for d in devices] if n > 1 else None)  # fmt: skip
    shown: set[str] = set()
    for r, device in enumerate(devices, start=1):
        when, cats, b = t.moments(device)
        x = when / 1e6
        for j, cat in enumerate(cats):
            color = theme.MEMORY_CATEGORY_COLORS[cat]
            fig.add_scatter(
                x=x, y=b[:, j], mode="lines", line={"shape": "hv", "width": 0.5, "color": color},
                fillcolor=color, stackgroup=f"memory{r}", name=cat, legendgroup=cat,
                showlegend=cat not in shown, meta={"device": device},
                customdata=np.array([theme.format_bytes(v) for v in b[:, j].tolist()], dtype=object),
                hovertemplate=f"{cat}: %{{customdata}}<extra></extra>", row=r, col=1,
            )  # fmt: skip
            shown.add(cat)
        top = float(b.sum(axis=1).max()) if len(b) else 0.0
        _steps(fig, t.step_ends, top, r, first=r == 1)
        _peak(fig, t, device, r)
        _ooms(fig, t.ooms[t.ooms["device"] == device], r)
    if not devices:
        fig.add_annotation(text=NO_MEMORY, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    title = "Device memory by category"
    if not t.complete:
        title += " · <span style='color:" + theme.WARNING_COLOR + "'>incomplete: see the note</span>"
    fig.update_layout(
        **theme.plotly_layout(
            title={"text": title, "x": 0},
            height=340 + 240 * (n - 1),
            hovermode="x unified",
            hoverdistance=-1,  # the nearest moment, however far: moments are sparse where little happens
            legend={"orientation": "h", "y": -0.18, "traceorder": "normal"},
            margin={"l": 10, "r": 10, "t": 60, "b": 10},
        )
    )
    fig.update_xaxes(hoverformat=",.3f", ticksuffix=" ms")  # the unified hover's title says "ms" too
    for r, device in enumerate(devices, start=1):
        _, _, b = t.moments(device)
        vals = _byte_ticks(float(b.sum(axis=1).max()) if len(b) else 0.0)
        fig.update_yaxes(tickvals=vals, ticktext=[theme.format_bytes(v) for v in vals], row=r, col=1)
    fig.update_yaxes(title_text="bytes live", rangemode="tozero")
    return fig


def _byte_ticks(top: float) -> list[float]:
    """About five round ticks from 0 to ``top`` in binary units (KiB, MiB, GiB), as the labels say."""
    unit = 1.0
    while top >= 1024 * unit and unit < 1024**3:
        unit *= 1024
    raw = max(top / unit / 5, 1e-9)
    step = next(
        m * 10 ** np.floor(np.log10(raw)) for m in (1, 2, 5, 10) if m * 10 ** np.floor(np.log10(raw)) >= raw
    )
    return [float(k * step * unit) for k in range(int(top / unit / step) + 2)]


def _steps(fig: go.Figure, ends: pd.DataFrame, top: float, row: int, *, first: bool) -> None:
    """Each step's end (``Memory.step_ends()``) as a dotted line (one trace, gaps between the
    lines), labelled "step n" above the panel when there are few steps."""
    if not len(ends):
        return
    end = ends["end_ns"].to_numpy() / 1e6
    xs = np.repeat(end, 3)
    xs[2::3] = np.nan
    ys = np.tile([0.0, top * 1.08, np.nan], len(end))
    fig.add_scatter(x=xs, y=ys, mode="lines", name="end of a step", hoverinfo="skip", showlegend=first,
                    connectgaps=False, line={"color": "#5c677d", "width": 1, "dash": "dot"}, row=row,
                    col=1)  # fmt: skip
    if len(ends) <= LABELLED_STEPS:  # above the panel, clear of the areas and the peak's label
        axis = "" if row == 1 else str(row)
        begin = np.r_[0.0, end[:-1]]
        for step, a, b in zip(ends["step"].tolist(), begin.tolist(), end.tolist(), strict=True):
            fig.add_annotation(x=(a + b) / 2, y=1.0, xref=f"x{axis}", yref=f"y{axis} domain",
                               text=f"step {int(step)}", showarrow=False, yanchor="bottom",
                               font={"size": 10, "color": "#5c677d"})  # fmt: skip


def _peak(fig: go.Figure, t: MemoryTables, device: str, row: int) -> None:
    p = t.peaks[t.peaks["device"] == device].iloc[0]
    label = f"peak {theme.format_bytes(p['peak_bytes'])} at {theme.format_ns(p['t_ns'])}" + (
        f" (step {int(p['step'])})" if p["step"] >= 0 else ""
    )
    fig.add_scatter(
        x=[p["t_ns"] / 1e6], y=[int(p["peak_bytes"])], mode="markers", name="peak", showlegend=False,
        marker={"color": theme.MARK_COLOR, "size": 10, "symbol": "diamond"},
        meta={"device": device, "moment": t.peak_moment(device)}, hoverinfo="skip", row=row, col=1,
    )  # fmt: skip
    when, _, _ = t.moments(device)
    right = p["t_ns"] < (float(when[-1]) if len(when) else 0.0) / 2  # the label on the roomier side
    fig.add_annotation(x=p["t_ns"] / 1e6, y=int(p["peak_bytes"]), text=plotly_text(label), showarrow=True,
                       arrowhead=2, ax=60 if right else -60, ay=0, xanchor="left" if right else "right",
                       font={"color": theme.MARK_COLOR, "size": 11}, bgcolor="rgba(255,255,255,0.85)",
                       row=row, col=1)  # fmt: skip


def _ooms(fig: go.Figure, ooms: pd.DataFrame, row: int) -> None:
    if not len(ooms):
        return
    text = [f"out of memory asking {theme.format_bytes(o.requested)}" for o in ooms.itertuples(index=False)]
    fig.add_scatter(
        x=(ooms["t_ns"] / 1e6).tolist(), y=ooms["allocated"].tolist(), mode="markers+text",
        name="out of memory", text=text, textposition="top left", hoverinfo="skip",
        textfont={"color": theme.WARNING_COLOR},
        marker={"color": theme.WARNING_COLOR, "size": 12, "symbol": "x"}, row=row, col=1,
    )  # fmt: skip


def caption(device: str, t_ns: float, step: int, allocations: int, nbytes: int, shown: pd.DataFrame) -> str:
    """What the list of what was live says above it: where, when, how much; and, when the list is
    cut, how much it leaves out."""
    out = (
        f"Live on {device} at {theme.format_ns(t_ns)} (step {step}): {allocations:,} allocations, "
        f"{theme.format_bytes(nbytes)}."
    )
    if allocations > len(shown):
        left = nbytes - int(shown["block_bytes"].sum())
        out += (
            f" The {len(shown):,} largest are listed, the other {allocations - len(shown):,} "
            f"({theme.format_bytes(left)}) left out (Trace.memory().live(t_ns) lists all)."
        )
    return out


def live_html(live: pd.DataFrame, device: str, t_ns: float, top: int = LIVE_ROWS) -> str:
    """What was live at a moment (``Memory.live(t_ns, device)``) as the list under the chart: a
    caption saying how much, then its ``top`` largest allocations."""
    shown = live.head(top).assign(source=[_line(s) for s in live["source"].head(top)])
    step = int((live["step"] + live["age_steps"]).max()) if len(live) else 0
    text = caption(device, t_ns, step, len(live), int(live["block_bytes"].sum()), shown)
    return f"<div class='openreg-memory-caption'>{html.escape(text)}</div>" + static.table_html(
        shown, LIVE_TABLE_COLUMNS, max_rows=top
    )


def note_html(t: MemoryTables) -> str:
    """The incomplete note as HTML ("" when the tables are complete)."""
    note = incomplete_note(t)
    if not note:
        return ""
    return (
        f"<div class='openreg-memory-note openreg-warning' style='color:{theme.WARNING_COLOR};"
        f"font-weight:600'>{html.escape(note)}</div>"
    )


#: The columns of the peaks by category in the static view, ``(key, label, format)``.
PEAK_COLUMNS = [("device", "device", "text"), ("peak_bytes", "peak", "bytes"), ("t_ns", "at", "ns"),
                ("step", "step", "int"), *[(c, c, "bytes") for c in CATEGORIES]]  # fmt: skip


def static_html(memory: Memory, t: MemoryTables, top: int = LIVE_ROWS) -> str:
    """The memory view with no JavaScript (the dashboard's ``text/html``): the incomplete note, each
    device's peak by category, the out-of-memory errors and what was live at the first device's peak."""
    out = ["<h4>Memory by category</h4>", note_html(t), static.table_html(t.peaks, PEAK_COLUMNS)]
    if len(t.ooms):
        out.append(
            f"<div style='color:{theme.WARNING_COLOR}'>{len(t.ooms):,} out of memory in the trace</div>"
        )
    for device in t.devices[:1]:
        when, _, _ = t.moments(device)
        i = t.peak_moment(device)
        out.append(live_html(memory.live(int(when[i]), device), device, float(when[i]), top))
    return "<div class='openreg-memory-static'>" + "".join(out) + "</div>"


def report_section(
    memory: Memory, t: MemoryTables, div_id: str = "memory-chart", top: int = LIVE_ROWS
) -> str:
    """The report's memory view: the incomplete note, the chart, the list of what was live at the
    peak (a click on the chart lists another moment, from data embedded for each moment drawn,
    and moves the timeline's cursor there) and the script that links them."""
    import plotly.io as pio

    fig = figure(t)
    div = pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id)
    strings: dict[str, int] = {"": 0}

    def sid(s: Any) -> int:
        return strings.setdefault("" if s is None or s != s else str(s), len(strings))

    data: dict[str, Any] = {"devices": {}, "categories": list(CATEGORIES), "top": top, "strings": []}
    first = ""
    for device in t.devices:
        when, _, _ = t.moments(device)
        rows, totals = memory.live_many(when, device, top=top)
        src = [_line(s) for s in rows["source"]]
        cells = zip(rows["moment"].tolist(), rows["block_bytes"].tolist(), rows["category"].tolist(),
                    rows["op"].tolist(), rows["module"].tolist(), src, rows["age_steps"].tolist(),
                    strict=True)  # fmt: skip
        per: list[list[list[int]]] = [[] for _ in range(len(when))]
        for m, size, cat, op, module, source, age in cells:
            per[m].append([size, CATEGORIES.index(cat), sid(op), sid(module), sid(source), age])
        data["devices"][device] = {
            "t": when.tolist(), "step": totals["step"].tolist(), "rows": per,
            "totals": totals[["allocations", "bytes"]].to_numpy().tolist(),
        }  # fmt: skip
        if not first:
            i = t.peak_moment(device)
            first = live_html(memory.live(int(when[i]), device), device, float(when[i]), top)
    data["strings"] = list(strings)
    warn = note_html(t)
    hint = (
        f"<div style='color:{theme.MUTED_TEXT_COLOR}'>Each category's bytes live over time, stacked; "
        f"{_detail(t)} Click the chart at a moment to list what was live then (the timeline's cursor "
        "moves there); below, what was live at the peak.</div>"
    )
    return (
        f"<section id='memory'><h2>Memory</h2>{warn}{hint}{div}"
        f"<div id='memory-live' class='openreg-memory-live'>{first}</div>"
        f"<script>{_JS.read_text()}\nopenregMemoryView({script_json(div_id)}, {script_json(data)});</script>"
        "</section>"
    )


def _line(source: Any) -> str | None:
    """A source line as the user knows it (a notebook cell's as ``In[7], line 3``), None if unknown."""
    return lookup.cell_source(source) if isinstance(source, str) else None


def _detail(t: MemoryTables) -> str:
    """What the chart's level of detail is, in words."""
    n = sum(len(t.moments(d)[0]) for d in t.devices)
    return f"{n:,} moments drawn (the highest of each time bucket, the peak among them)."


def rank_peaks_html(peaks: pd.DataFrame) -> str:
    """The merged report's per-rank memory row (``memory_ranks.peaks_by_rank``): each rank's peak,
    when (merged clock), its step, a bar split by category and the bytes of each category."""
    if peaks.empty:
        return "<div>No memory event in these traces.</div>"
    cats = [c for c in CATEGORIES if int(peaks[c].sum())]
    top = float(peaks["peak_bytes"].max()) or 1.0
    th = "".join(
        f"<th style='{static._TH}'>{html.escape(h)}</th>"
        for h in ["rank", "device", "peak", "at", "step", "by category", *cats]
    )
    body = []
    for r in peaks.itertuples(index=False):
        row = r._asdict()
        bar = "".join(
            f"<span class='openreg-memory-part' data-category='{c}' data-bytes='{int(row[c])}' "
            f"title='{c}: {theme.format_bytes(row[c])}' style='display:inline-block;height:10px;"
            f"width:{row[c] / top * 240:.1f}px;background:{theme.MEMORY_CATEGORY_COLORS[c]}'></span>"
            for c in cats
            if row[c]
        )
        warn = "" if row["complete"] else " <b style='color:" + theme.WARNING_COLOR + "'>incomplete</b>"
        cells = [
            str(row["rank"]), html.escape(str(row["device"])), theme.format_bytes(row["peak_bytes"]) + warn,
            theme.format_ns(row["t_ns"]), str(row["step"]), bar, *[theme.format_bytes(row[c]) for c in cats],
        ]  # fmt: skip
        tds = "".join(f"<td style='{static._TD}'>{c}</td>" for c in cells)
        body.append(f"<tr class='openreg-memory-rank' data-rank='{int(row['rank'])}'>{tds}</tr>")
    legend = " ".join(
        f"<span style='display:inline-block;width:10px;height:10px;"
        f"background:{theme.MEMORY_CATEGORY_COLORS[c]}'></span> {c}"
        for c in cats
    )
    return (
        f"<table class='openreg-memory-ranks' style='{static._TABLE}'><tr>{th}</tr>{''.join(body)}</table>"
        f"<div style='font:11px system-ui'>{legend}</div>"
    )
