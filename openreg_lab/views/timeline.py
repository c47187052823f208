"""The timeline: one lane per thread with nested slices, copy and cast lanes, memory counters and
marks, drawn on a canvas by ``timeline.js`` (an anywidget) from level-of-detail payloads.

``payload(pyramid, events, t0, t1, px)`` is what the browser gets for a window: bounded in size
(Note [Timeline level of detail]), numbers as binary float64 / int32 arrays, strings once each.
``Timeline`` is the live widget: zooming sets its ``view`` and Python answers with a new ``data``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anywidget
import numpy as np
import pandas as pd
import traitlets

from openreg_lab import theme
from openreg_lab.recording import hover, steps
from openreg_lab.recording.lod import COLOR_KEYS, PALETTE, Pyramid, Query

_ESM = Path(__file__).with_name("timeline.js")
#: Names shown in the legend, one per palette colour.
COLOR_NAMES = [
    "native",
    "fallback",
    "composite",
    "generic",
    "other op",
    "backward",
    "copy H2D",
    "copy D2H",
    "copy D2D",
    "cast",
    "compiled",
    "compile",
    "collective",
    "collective wait",
    "host Python",
    "host waiting",
]
assert len(COLOR_NAMES) == len(COLOR_KEYS) == len(PALETTE)


# Note [The timeline opens on the steps]
# A trace often starts with seconds of one-off work (imports, compilation, the first step's
# warm-up) before the steps a user tunes, and the host's Python lane, a flame of the sampled
# stacks, can be a hundred rows deep. So a timeline (the dashboard's, the report's) opens on
# what matters:
#
# * The window of the steps (``opening``): from the first step to the last one's end. Step 0 is
#   shown apart when it took over ``APART`` times the median of the later steps (it is then mostly
#   one-off work): the window starts at step 1, and step 0 is a marked band one click away (the
#   toolbar's "step 0" button; "steps" comes back, "reset" shows the whole trace). No step: the
#   whole trace.
# * Op lanes first: ``Pyramid`` puts every host row after the op, copy, cast and collective rows
#   (``Pyramid.host_row``), so rows before it are the same whatever host slices are drawn (the
#   report's library toggle swaps only the rows from there).
# * Each Python lane folded (``rows_of``): it shows its rows down to two below the first depth
#   where its stacks branch (at least ``HOST_ROWS``, at most ``HOST_ROWS_MAX``; all of them when
#   that would hide a single row); clicking its label expands (and folds back) the rest.
# * Host frames in the user's terms (``Trace.host_slices()``, Note [Folding host frames]); a
#   "library frames" toggle draws ``host_slices(library=True)`` instead.

#: Step 0 is shown apart when it took over this many times the median later step.
APART = 3.0
#: Rows a folded Python lane shows at least, and at most.
HOST_ROWS = 3
HOST_ROWS_MAX = 8


def rows_of(pyramid: Pyramid) -> list[dict[str, Any]]:
    """The timeline's rows as the browser sees them: ``lane``, ``depth``, and for a Python lane's
    rows ``host: True`` and ``folded: True`` on those its folded lane hides (Note [The timeline
    opens on the steps])."""
    out: list[dict[str, Any]] = [{"lane": r.lane, "depth": r.depth} for r in pyramid.rows]
    raw = pyramid.levels[0]
    per_row = np.diff(raw.offsets)  # real slices a row
    lanes: dict[str, list[int]] = {}
    for i in range(pyramid.host_row, len(out)):
        lanes.setdefault(out[i]["lane"], []).append(i)
    for members in lanes.values():
        branching = [k for k, i in enumerate(members) if per_row[i] > 1]
        shown = (branching[0] + 2) if branching else HOST_ROWS
        shown = min(max(shown, HOST_ROWS), HOST_ROWS_MAX)
        if len(members) - shown < 2:  # folding away one row saves nothing
            shown = len(members)
        for k, i in enumerate(members):
            out[i]["host"] = True
            if k >= shown:
                out[i]["folded"] = True
    return out


def opening(
    steps_list: list[dict[str, Any]], span: float, drawn: pd.DataFrame | None = None
) -> dict[str, Any]:
    """Where the timeline opens (Note [The timeline opens on the steps]): ``view`` ``[t0, t1]`` ns
    and ``apart``, step 0 shown apart (``{"step", "t0", "t1", "text"}``) or None. ``drawn`` (the
    events with the host slices) names what step 0's time went to: imports and compilation."""
    span = float(max(span, 1))
    if not steps_list:
        return {"view": [0.0, span], "apart": None}
    first, last = steps_list[0], steps_list[-1]
    later = [s["t1"] - s["t0"] for s in steps_list[1:]]
    d0 = first["t1"] - first["t0"]
    if not later or d0 <= APART * max(float(np.median(later)), 1.0):
        return {"view": [float(first["t0"]), float(last["t1"])], "apart": None}
    text = f"step {first['step']}: {theme.format_ns(d0)}, {d0 / float(np.median(later)):.0f}x the median step"
    one_off = steps.one_off_work(drawn, first["t0"], first["t1"])  # (they may overlap)
    one_off.sort(key=lambda p: -p[1])
    parts = [f"{what} {theme.format_ns(ns)}" for what, ns in one_off if ns]
    text += " (" + ", ".join(parts) + ")" if parts else " (one-off work)"
    t1 = float(last["t1"]) if len(steps_list) > 1 else span
    apart = {"step": int(first["step"]), "t0": float(first["t0"]), "t1": float(first["t1"]), "text": text}
    return {"view": [float(steps_list[1]["t0"]), t1], "apart": apart}


def marks_of(pyramid: Pyramid) -> list[dict[str, Any]]:
    """The user's marks (``openreg_lab.mark``) as ``{"t": ns, "name": ...}``."""
    return [{"t": float(t), "name": str(n)} for t, n in pyramid.marks]


def steps_of(events: pd.DataFrame, table: pd.DataFrame | None = None) -> list[dict[str, Any]]:
    """The training steps as bands: ``{"step": n, "t0": ns, "t1": ns, "complete": bool}`` each
    (``Trace.steps()``; empty when no step ended in the trace). ``table``: ``steps.table(events)``
    when the caller has it (the dashboard's verdict read it too)."""
    table = steps.table(events) if table is None else table
    return [
        {
            "step": int(r.step),
            "t0": float(r.start_ns),
            "t1": float(r.start_ns + r.dur_ns),
            "complete": bool(r.complete),
        }
        for r in table.itertuples(index=False)
    ]


def drawn_steps(step_table: pd.DataFrame, host: pd.DataFrame | None) -> pd.DataFrame:
    """The steps the timeline draws as bands: ``step_table`` (``steps.table(events)``), its last,
    unfinished step stretched to the end of any host slice (``host``) after it
    (``steps.stretched``): the steps of the events and host slices drawn together."""
    if host is None or host.empty:
        return step_table
    return steps.stretched(step_table, host["start_ns"].to_numpy(), host["dur_ns"].to_numpy())


def payload(pyramid: Pyramid, events: pd.DataFrame, q: Query) -> dict[str, Any]:
    """The browser's data for query ``q``: items as binary arrays, the strings they use, counters."""
    ids = q.event.astype(np.int64)
    name_idx, info_idx, strings = hover.item_strings(events, ids)  # Note [Hover texts by value]
    counters = []
    for c in q.counters:
        counters.append(
            {
                "device": c["device"],
                "t": _f64(c["t"]),
                "min": _f64(c["min"]),
                "max": _f64(c["max"]),
                "last": _f64(c["last"]),
            }
        )
    return {
        "t0": float(q.t0),
        "t1": float(q.t1),
        "level": int(q.level),
        "bucket_ns": float(q.bucket_ns),
        "start": _f64(q.start),
        "dur": _f64(q.dur),
        "row": memoryview(np.ascontiguousarray(q.row, dtype=np.int32)),
        "event": memoryview(np.ascontiguousarray(ids, dtype=np.int32)),
        "count": memoryview(np.ascontiguousarray(q.count, dtype=np.int32)),
        "color": memoryview(np.ascontiguousarray(pyramid.color[ids], dtype=np.uint8)),
        "name": memoryview(name_idx),
        "info": memoryview(info_idx),
        "strings": strings,
        "counters": counters,
    }


def _f64(a: Any) -> memoryview:
    return memoryview(np.ascontiguousarray(a, dtype=np.float64))


def payload_size(p: dict[str, Any]) -> int:
    """Bytes a payload puts on the wire (binary arrays plus strings)."""
    size = sum(v.nbytes for v in p.values() if isinstance(v, memoryview))
    size += sum(len(s.encode()) + 3 for s in p["strings"])
    for c in p["counters"]:
        size += sum(v.nbytes for v in c.values() if isinstance(v, memoryview))
    return size


class Timeline(anywidget.AnyWidget):
    """The live timeline of one trace. Zoom with the wheel or the buttons, drag to pan,
    double-click to reset, hover for details, click to select (``selected`` is the event id);
    training steps are shaded bands, and the step picker zooms to one. It opens on the steps, op
    lanes first, each Python lane folded (Note [The timeline opens on the steps])."""

    _esm = _ESM
    rows = traitlets.List().tag(sync=True)
    palette = traitlets.List(PALETTE).tag(sync=True)
    color_names = traitlets.List(COLOR_NAMES).tag(sync=True)
    memory_color = traitlets.Unicode(theme.MEMORY_COLOR).tag(sync=True)
    mark_color = traitlets.Unicode(theme.MARK_COLOR).tag(sync=True)
    marks = traitlets.List().tag(sync=True)
    steps = traitlets.List().tag(sync=True)  # training steps: bands and the step picker
    step_color = traitlets.Unicode(theme.STEP_BAND_COLOR).tag(sync=True)
    opening = traitlets.Dict().tag(sync=True)  # opening(): the steps' window, step 0 apart
    span_ns = traitlets.Float(0.0).tag(sync=True)
    view = traitlets.List([0.0, 0.0]).tag(sync=True)
    width = traitlets.Int(900).tag(sync=True)
    data = traitlets.Dict().tag(sync=True)
    levels = traitlets.List().tag(sync=True)  # static payloads (none in a live widget)
    selected = traitlets.Int(-1).tag(sync=True)
    highlight = traitlets.Unicode("").tag(sync=True)
    cursor = traitlets.Float(-1.0).tag(sync=True)  # a moment another view points at (ns), -1: none
    has_library = traitlets.Bool(False).tag(sync=True)  # whether the "library frames" toggle shows
    library = traitlets.Bool(False).tag(sync=True)  # the toggle: host slices with library frames

    def __init__(
        self,
        events: pd.DataFrame,
        pyramid: Pyramid | None = None,
        *,
        span: float | None = None,
        library: Callable[[], pd.DataFrame] | None = None,
        step_table: pd.DataFrame | None = None,
        **kwargs: Any,
    ) -> None:
        """``span``: the length of the time axis in ns (default: the trace's), to align timelines.
        ``library``: the events with the host slices of ``Trace.host_slices(library=True)``
        (``host.with_events``), made when the "library frames" toggle is first set.
        ``step_table``: the trace's ``steps.table`` when the caller has it."""
        pyramid = pyramid if pyramid is not None else Pyramid(events)
        self._pyramid = pyramid
        self._events = events
        self._folded = (events, pyramid)
        self._library_source = library
        self._library: tuple[pd.DataFrame, Pyramid] | None = None
        span = float(span if span is not None else max(pyramid.span, 1))
        step_bands = steps_of(events, step_table)
        opens = opening(step_bands, span, events)
        super().__init__(
            rows=rows_of(pyramid),
            marks=marks_of(pyramid),
            steps=step_bands,
            opening=opens,
            span_ns=span,
            view=list(opens["view"]),
            has_library=library is not None,
            **kwargs,
        )
        self.add_class("openreg-timeline")  # setting `view` above made the first payload

    def query_view(self) -> Query:
        """Answer the current ``view`` and ``width`` with a new payload in ``data``."""
        t0, t1 = self.view
        q = self._pyramid.query(t0, t1, self.width)
        self.data = payload(self._pyramid, self._events, q)
        return q

    @traitlets.observe("view", "width")
    def _on_view(self, change: dict[str, Any]) -> None:
        self.query_view()

    @traitlets.observe("library")
    def _on_library(self, change: dict[str, Any]) -> None:
        if change["new"] and self._library_source is not None:
            if self._library is None:
                drawn = self._library_source()
                self._library = (drawn, Pyramid(drawn))
            self._events, self._pyramid = self._library
        else:
            self._events, self._pyramid = self._folded
        with self.hold_sync():
            self.rows = rows_of(self._pyramid)
            self.query_view()
