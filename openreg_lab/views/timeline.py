"""The timeline: one lane per thread with nested slices, copy and cast lanes, memory counters and
marks, drawn on a canvas by ``timeline.js`` (an anywidget) from level-of-detail payloads.

``payload(pyramid, events, t0, t1, px)`` is what the browser gets for a window: bounded in size
(Note [Timeline level of detail]), numbers as binary float64 / int32 arrays, strings once each.
``Timeline`` is the live widget: zooming sets its ``view`` and Python answers with a new ``data``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anywidget
import numpy as np
import pandas as pd
import traitlets

from openreg_lab import theme
from openreg_lab.recording import lookup, steps
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


def rows_of(pyramid: Pyramid) -> list[dict[str, Any]]:
    """The timeline's rows as the browser sees them."""
    return [{"lane": r.lane, "depth": r.depth} for r in pyramid.rows]


def marks_of(pyramid: Pyramid) -> list[dict[str, Any]]:
    """The user's marks (``openreg_lab.mark``) as ``{"t": ns, "name": ...}``."""
    return [{"t": float(t), "name": str(n)} for t, n in pyramid.marks]


def steps_of(events: pd.DataFrame) -> list[dict[str, Any]]:
    """The training steps as bands: ``{"step": n, "t0": ns, "t1": ns, "complete": bool}`` each
    (``Trace.steps()``; empty when no step ended in the trace)."""
    table = steps.table(events)
    return [
        {
            "step": int(r.step),
            "t0": float(r.start_ns),
            "t1": float(r.start_ns + r.dur_ns),
            "complete": bool(r.complete),
        }
        for r in table.itertuples(index=False)
    ]


def payload(pyramid: Pyramid, events: pd.DataFrame, q: Query) -> dict[str, Any]:
    """The browser's data for query ``q``: items as binary arrays, the strings they use, counters."""
    ids = q.event.astype(np.int64)
    cols = {
        c: events[c].to_numpy() for c in ("name", "kernel", "dispatch", "shapes", "dtypes", "source", "bytes")
    }
    strings: dict[str, int] = {}

    def intern(s: str) -> int:
        return strings.setdefault(s, len(strings))

    name_idx = np.empty(len(ids), dtype=np.int32)
    info_idx = np.empty(len(ids), dtype=np.int32)
    for k, i in enumerate(ids.tolist()):
        name_idx[k] = intern(str(cols["name"][i]))
        info_idx[k] = intern(_info(cols, i))
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
        "strings": list(strings),
        "counters": counters,
    }


def _f64(a: Any) -> memoryview:
    return memoryview(np.ascontiguousarray(a, dtype=np.float64))


def _info(cols: dict[str, np.ndarray], i: int) -> str:
    lines = []
    if cols["kernel"][i]:
        lines.append(f"kernel: {cols['kernel'][i]}")
    if cols["dispatch"][i]:
        lines.append(f"dispatch: {cols['dispatch'][i]}")
    shapes = cols["shapes"][i]
    if shapes is not None:
        args = ", ".join(f"{d}{list(s)}" for s, d in zip(shapes, cols["dtypes"][i], strict=True))
        lines.append(f"args: {args}")
    if cols["bytes"][i]:
        lines.append(f"bytes: {theme.format_bytes(int(cols['bytes'][i]))}")
    if isinstance(cols["source"][i], str):
        lines.append(f"source: {lookup.cell_source(cols['source'][i])}")
    return "\n".join(lines)


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
    training steps are shaded bands, and the step picker zooms to one."""

    _esm = _ESM
    rows = traitlets.List().tag(sync=True)
    palette = traitlets.List(PALETTE).tag(sync=True)
    color_names = traitlets.List(COLOR_NAMES).tag(sync=True)
    memory_color = traitlets.Unicode(theme.MEMORY_COLOR).tag(sync=True)
    mark_color = traitlets.Unicode(theme.MARK_COLOR).tag(sync=True)
    marks = traitlets.List().tag(sync=True)
    steps = traitlets.List().tag(sync=True)  # training steps: bands and the step picker
    step_color = traitlets.Unicode(theme.STEP_BAND_COLOR).tag(sync=True)
    span_ns = traitlets.Float(0.0).tag(sync=True)
    view = traitlets.List([0.0, 0.0]).tag(sync=True)
    width = traitlets.Int(900).tag(sync=True)
    data = traitlets.Dict().tag(sync=True)
    levels = traitlets.List().tag(sync=True)  # static payloads (none in a live widget)
    selected = traitlets.Int(-1).tag(sync=True)
    highlight = traitlets.Unicode("").tag(sync=True)
    cursor = traitlets.Float(-1.0).tag(sync=True)  # a moment another view points at (ns), -1: none

    def __init__(
        self,
        events: pd.DataFrame,
        pyramid: Pyramid | None = None,
        *,
        span: float | None = None,
        **kwargs: Any,
    ) -> None:
        """``span``: the length of the time axis in ns (default: the trace's), to align timelines."""
        pyramid = pyramid if pyramid is not None else Pyramid(events)
        self._pyramid = pyramid
        self._events = events
        span = float(span if span is not None else max(pyramid.span, 1))
        super().__init__(
            rows=rows_of(pyramid),
            marks=marks_of(pyramid),
            steps=steps_of(events),
            span_ns=span,
            view=[0.0, span],
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
