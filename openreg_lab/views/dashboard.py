"""The trace dashboard (``Trace.show()``): timeline, op table, details, fallbacks, dispatch flow,
copies and casts, memory; one ``Selection`` that every panel follows.

Clicking a slice on the timeline or a row of the op table selects that op everywhere: the table
filters to its name, the details panel shows its dispatch path, children and source, the timeline
outlines it. Clicking a band of the dispatch flow (or picking it in the list beside it) filters the
op table to the calls that went that way.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ipywidgets as w
import pandas as pd
import traitlets

from openreg_lab.recording import analysis, breakdown, flow, lookup, steps
from openreg_lab.recording import host as _host
from openreg_lab.recording.kinds import Kinds
from openreg_lab.recording.lod import Pyramid
from openreg_lab.recording.verdict import Verdict
from openreg_lab.recording.verdict import verdict as verdict_of
from openreg_lab.views import charts, memory_view, png, static
from openreg_lab.views.details import details_html
from openreg_lab.views.table import Column, Table
from openreg_lab.views.timeline import Timeline, drawn_steps

if TYPE_CHECKING:
    from openreg_lab.recording.memory import Memory

OP_COLUMNS = [
    Column("name", "op"),
    Column("device", "device"),
    Column("kernel", "ran", color=True, title="the kernel kind most of its calls ran"),
    Column("calls", "calls", "int"),
    Column("fallback", "fell back", "int"),
    Column("total_ns", "total", "ns"),
    Column("self_ns", "self", "ns"),
    Column("bytes_copied", "copied", "bytes"),
    Column("path", "dispatch path"),
]
CHARTS = ("Fallbacks", "Dispatch flow", "Copies & casts", "Memory")


class Selection(traitlets.HasTraits):
    """What the user picked; every panel of a dashboard observes it."""

    event = traitlets.Int(-1)  #: the selected event's id, -1 for none
    name = traitlets.Unicode("")  #: the selected op's name
    flow = traitlets.Any(None)  #: a dispatch-flow link ``(source, target)``, or None


class Dashboard(w.VBox):
    """The dashboard of one trace, from its events table (``Trace.events``)."""

    def __init__(
        self,
        events: pd.DataFrame,
        *,
        dropped: int = 0,
        capacity: int | None = None,
        op_events: str = "all",
        verdict: Verdict | None = None,
        host: pd.DataFrame | None = None,
        host_library: Callable[[], pd.DataFrame] | None = None,
        memory: Memory | Callable[[], Memory] | None = None,
        step_table: pd.DataFrame | None = None,
    ) -> None:
        """``host``: the trace's host slices (``Trace.host_events``), drawn after the op lanes;
        ``host_library``: what gives them with the library frames (``Trace.host_slices``), drawn
        when the timeline's "library frames" toggle is set.
        ``memory``: the trace's ``Trace.memory()`` (or the method, called when the memory view is
        first drawn): the Memory chart is then the memory view (``views.memory_view``); without
        it, the allocator's count over time. ``step_table``: the trace's ``Trace.steps()`` when the
        caller has it (else computed here, once for the verdict and the timeline)."""
        self.events = events
        self._memory_source = memory
        self._memory: Memory | None = None
        self._memory_tables: memory_view.MemoryTables | None = None
        self._memory_at: tuple[str, int] | None = None  # the moment listed (device, index)
        self.dropped = dropped
        self.capacity = capacity
        self.op_events = op_events  # the trace's ops= ("all" or "kernels"), said in the header
        self.drawn = _host.with_events(events, host)  # the events and the host slices
        # The kinds and string columns read once for the timeline and the tables below (Note [Kinds
        # read once]); the host slices' rows are the timeline's only, hashed on their own.
        kinds = Kinds(events["kind"])
        drawn = kinds if self.drawn is events else kinds.extended(events, self.drawn)
        self.pyramid = Pyramid(self.drawn, kinds=drawn)
        self.selection = Selection()
        self.ops = analysis.summary(events, kinds=kinds)
        self.flows = flow.dispatch_flows(events, kinds=kinds)
        self.fallbacks = breakdown.fallback_costs(events, kinds=kinds)
        self.step_table = step_table if step_table is not None else steps.table(events, kinds=kinds)
        # The verdict first (Trace.verdict(): what falls back, what it costs, what to implement first).
        self.verdict = (
            verdict
            if verdict is not None
            else verdict_of(
                events,
                dropped=dropped,
                capacity=capacity,
                op_events=op_events,
                kinds=kinds,
                fallbacks=self.fallbacks,
                step_table=self.step_table,
            )
        )
        self.header = w.HTML(static.header_html(events, self.verdict, kinds=kinds))
        library = (lambda: _host.with_events(events, host_library())) if host_library is not None else None
        self.timeline = Timeline(
            self.drawn,
            self.pyramid,
            library=library,
            # The bands of the steps: the last, unfinished one ends with the host slices drawn too.
            step_table=drawn_steps(self.step_table, host),
            layout=w.Layout(width="100%"),
        )
        devices = sorted(d for d in self.ops["device"].unique() if d != "-")
        self.table = Table(
            self.ops,
            OP_COLUMNS,
            key=lambda r: f"{r['name']}|{r['device']}",
            filter=flow.filter_ops,
            kernels=analysis.KERNEL_KINDS,
            devices=devices,
            sort=("total_ns", False),
        )
        self.details = w.HTML(
            details_html(None),
            layout=w.Layout(width="38%", overflow="auto", max_height="420px", padding="0 0 0 8px"),
        )
        self.details.add_class("openreg-details")
        # With no fallback to rank, the signature view comes first.
        first = CHARTS[0] if len(self.fallbacks) else "Dispatch flow"
        self.chart_tabs = w.ToggleButtons(options=CHARTS, value=first, style={"button_width": "120px"})
        self.weight = w.ToggleButtons(
            options=["calls", "time"], value="calls", style={"button_width": "60px"}
        )
        self.weight.tooltips = ["Sankey weighted by number of calls", "Sankey weighted by time"]
        self.flow_pick = w.Dropdown(
            options=[("filter the op table by a flow…", None)]
            + [
                (f"{s} → {t} ({c:,} calls)", (s, t))
                for s, t, c in self.flows[["source", "target", "calls"]].itertuples(index=False)
            ],
            layout=w.Layout(width="420px"),
        )
        self.savings = w.HTML(
            f"<div class='openreg-savings'>{html.escape(breakdown.savings_sentence(self.fallbacks))}</div>"
        )
        self.figure = _figure_widget()
        self.figure.add_class("openreg-chart")
        self.memory_list = w.HTML("")  # what was live at the clicked moment (the memory view)
        self.memory_list.add_class("openreg-memory-live")
        self._show_chart(first)
        self._wire()
        self.table.layout = w.Layout(width="62%")
        top = w.HBox([self.table, self.details], layout=w.Layout(width="100%"))
        controls = w.HBox([self.chart_tabs, self.weight, self.flow_pick])
        super().__init__(
            [self.header, self.timeline, top, controls, self.savings, self.figure, self.memory_list]
        )
        self.add_class("openreg-dashboard")

    # -- linking ----------------------------------------------------------------
    def _wire(self) -> None:
        self.timeline.observe(lambda c: self.select_event(c["new"]), "selected")
        self.table.observe(self._row_clicked, "selected_key")
        self.chart_tabs.observe(lambda c: self._show_chart(c["new"]), "value")
        self.weight.observe(lambda c: self._show_chart(self.chart_tabs.value), "value")
        self.flow_pick.observe(lambda c: self.select_flow(c["new"]), "value")
        self.selection.observe(self._selection_changed, ["event", "flow"])

    def select_event(self, event_id: int) -> None:
        """Select the event ``event_id`` (an op, backward node, copy ...) everywhere."""
        if event_id < 0 or event_id >= len(self.events):
            return
        self.selection.name = str(self.events["name"].iat[event_id])
        self.selection.event = int(event_id)

    def select_op(self, name: str, device: str | None = None) -> None:
        """Select the longest call of the op ``name`` (what a click on its table row does)."""
        self.select_event(lookup.representative(self.events, name, device))

    def select_flow(self, flow: tuple[str, str] | None) -> None:
        """Filter the op table to calls whose dispatch went along ``flow`` (None: clear)."""
        self.selection.flow = tuple(flow) if flow is not None else None

    def _row_clicked(self, change: dict[str, Any]) -> None:
        if not change["new"]:
            return
        name, _, device = change["new"].partition("|")
        self.select_op(name, device)

    def _selection_changed(self, change: dict[str, Any]) -> None:
        if change["name"] == "flow":
            flow = self.selection.flow
            if flow is not None:
                self.table.name_filter = ""  # a flow spans many ops: show them all
            self.table.set_flow(flow, " → ".join(flow) if flow else "")
            return
        i = self.selection.event
        d = lookup.details(self.events, i)
        note = ""
        if d["kind"] == "op":
            calls = int((self.events["name"] == d["name"]).sum())
            note = f"one of {calls} calls of this op" if calls > 1 else ""
        self.details.value = details_html(d, note)
        self.timeline.highlight = d["name"] if d["kind"] == "op" else ""
        if self.timeline.selected != i:
            self.timeline.selected = i
        if d["kind"] == "op":
            self.table.name_filter = "=" + d["name"]

    # -- charts -------------------------------------------------------------------
    def figure_for(self, chart: str) -> Any:
        """The plotly figure of one of ``CHARTS`` (what the chart area shows when it is picked)."""
        if chart == "Fallbacks":
            return charts.fallbacks(self.fallbacks)
        if chart == "Dispatch flow":
            return charts.dispatch_flow(self.flows, self.weight.value)
        if chart == "Copies & casts":
            return charts.copies_and_casts(self.events)
        if chart == "Memory":
            if self.memory_tables is None:
                return charts.memory(self.events, self.pyramid)
            return memory_view.figure(self.memory_tables)
        raise ValueError(f"no chart named {chart!r}; the charts are {', '.join(CHARTS)}")

    def _show_chart(self, chart: str) -> None:
        fig = self.figure_for(chart)
        self.weight.layout.display = "" if chart == "Dispatch flow" else "none"
        self.flow_pick.layout.display = "" if chart == "Dispatch flow" else "none"
        self.savings.layout.display = "" if chart == "Fallbacks" else "none"
        self.memory_list.layout.display = "" if chart == "Memory" else "none"
        with self.figure.batch_update():
            self.figure.data = []
            self.figure.layout = fig.layout
            self.figure.add_traces(list(fig.data))
        trace = self.figure.data[0] if self.figure.data else None
        if chart == "Dispatch flow" and trace is not None:
            trace.on_click(self._sankey_clicked)
        elif chart == "Fallbacks":
            for t in self.figure.data:
                t.on_click(self._fallback_clicked)
        elif chart == "Memory" and self.memory_tables is not None:
            for t in self.figure.data:
                if isinstance(t.meta, dict) and "device" in t.meta:
                    t.on_click(self._memory_clicked)
            if not self.memory_list.value:
                device = self.memory_tables.devices[0] if self.memory_tables.devices else None
                if device is not None:
                    when, _, _ = self.memory_tables.moments(device)
                    self.show_memory_at(int(when[self.memory_tables.peak_moment(device)]), device, link=False)

    # -- memory ---------------------------------------------------------------------
    @property
    def memory(self) -> Memory | None:
        """The trace's memory tables (``Trace.memory()``), None when the dashboard was given none."""
        if self._memory is None and self._memory_source is not None:
            source = self._memory_source
            self._memory = source() if callable(source) else source
        return self._memory

    @property
    def memory_tables(self) -> memory_view.MemoryTables | None:
        """What the memory view draws (``memory_view.tables``), None without memory tables."""
        if self._memory_tables is None and self.memory is not None:
            self._memory_tables = memory_view.tables(self.memory)
        return self._memory_tables

    def show_memory_at(self, t_ns: int, device: str, *, link: bool = True) -> None:
        """List what was live on ``device`` at ``t_ns`` under the memory view (``Memory.live``) and,
        with ``link``, put the timeline's cursor there, zoomed around it (what a click does)."""
        memory, tables = self.memory, self.memory_tables
        if memory is None or tables is None:
            return
        self.memory_list.value = memory_view.note_html(tables) + memory_view.live_html(
            memory.live(t_ns, device), device, t_ns
        )
        if link:
            t0, t1 = self.timeline.view
            width = t1 - t0 if t1 - t0 < 0.99 * self.timeline.span_ns else self.timeline.span_ns / 8
            self.timeline.cursor = float(t_ns)
            self.timeline.view = [t_ns - width / 2, t_ns + width / 2]

    def _memory_clicked(self, trace: Any, points: Any, state: Any) -> None:
        if not points.point_inds or self.memory_tables is None:
            return
        device = trace.meta["device"]
        i = trace.meta.get("moment", points.point_inds[0])
        when, _, _ = self.memory_tables.moments(device)
        if (device, i) != self._memory_at:  # one click calls each category's area
            self._memory_at = (device, i)
            self.show_memory_at(int(when[i]), device)

    def _sankey_clicked(self, trace: Any, points: Any, state: Any) -> None:
        for i in points.point_inds:
            if 0 <= i < len(self.flows):
                row = self.flows.iloc[i]
                self.select_flow((row["source"], row["target"]))
                return

    def _fallback_clicked(self, trace: Any, points: Any, state: Any) -> None:
        shown = charts.shown_fallbacks(self.fallbacks)
        for i in points.point_inds:
            name = shown["name"].iat[i]
            fb = self.events[(self.events["kind"] == "fallback") & (self.events["name"] == name)]
            if len(fb):
                longest = fb.loc[fb["dur_ns"].idxmax()]
                self.select_event(int(longest["parent"]) if longest["parent"] >= 0 else int(longest["id"]))
            return

    # -- display ------------------------------------------------------------------
    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = super()._repr_mimebundle_(**kwargs) or {}
        bundle["text/html"] = static.dashboard_html(
            self.events,
            dropped=self.dropped,
            capacity=self.capacity,
            op_events=self.op_events,
            pyramid=self.pyramid,
            ops=self.ops,
            flows=self.flows,
            fallbacks=self.fallbacks,
            verdict=self.verdict,
            step_table=self.step_table,
        )
        if self.memory_tables is not None and self.memory is not None:
            bundle["text/html"] += memory_view.static_html(self.memory, self.memory_tables)
        bundle["text/plain"] = static.one_line(self.events, self.dropped)
        return png.add_png(bundle, self.figure_for(self.chart_tabs.value) if png.enabled() else None)


def _figure_widget() -> Any:
    import plotly.graph_objects as go  # FigureWidget pulls in anywidget's plotly bundle: only when drawn

    return go.FigureWidget()  # its layout is the first chart's (_show_chart)


def dashboard(trace: Any) -> Dashboard:
    """The dashboard of a ``Trace`` (what ``Trace.show()`` returns)."""
    return Dashboard(
        trace.events,
        dropped=trace.dropped,
        capacity=trace.capacity,
        op_events=trace.ops,
        verdict=trace.verdict(),
        host=trace.host_events,
        host_library=lambda: trace.host_slices(library=True),
        memory=trace.memory,
        step_table=trace.steps(),
    )
