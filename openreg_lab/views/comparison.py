"""Compare two traces (``openreg_lab.views.compare(a, b, labels=...)``): per op, the difference in
calls, kernel kinds, time, bytes copied and casts, ops that fall back in one and not the other at
the top, and both timelines on one shared, aligned time axis. It draws the tables of
``openreg_lab.recording.comparison`` (``compare_table``, ``totals``).
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w
import pandas as pd
import traitlets

from openreg_lab.recording.comparison import compare_table, totals
from openreg_lab.recording.lod import Pyramid
from openreg_lab.views import static
from openreg_lab.views.table import Column, Table
from openreg_lab.views.timeline import Timeline

COLUMNS = [
    Column("name", "op"),
    Column("change", "change"),
    Column("kernel_a", "ran (a)", color=True),
    Column("kernel_b", "ran (b)", color=True),
    Column("calls_a", "calls a", "int"),
    Column("calls_b", "calls b", "int"),
    Column("fused_a", "fused a", "int"),
    Column("fused_b", "fused b", "int"),
    Column("time_ns_a", "time a", "ns"),
    Column("time_ns_b", "time b", "ns"),
    Column("d_time_ns", "Δ time", "ns"),
    Column("d_bytes_copied", "Δ copied", "bytes"),
    Column("d_casts", "Δ casts", "int"),
]


class CompareView(w.VBox):
    """Two traces compared: headline totals, the per-op table, and both timelines on one axis."""

    def __init__(self, a: pd.DataFrame, b: pd.DataFrame, labels: tuple[str, str] = ("a", "b")) -> None:
        if len(labels) != 2 or not all(isinstance(x, str) for x in labels):
            raise ValueError(f"compare(labels=...) takes two strings, got {labels!r}")
        self.labels = labels
        self.table_data = compare_table(a, b)
        # Say "only in autocast on", not "only in b".
        self.table_data["change"] = self.table_data["change"].str.replace(
            r"in (a|b)$", lambda m: f"in {labels[0] if m.group(1) == 'a' else labels[1]}", regex=True
        )
        self.totals = (totals(a), totals(b))
        cols = [_relabel(c, labels) for c in COLUMNS]
        self.table = Table(self.table_data, cols, kernels=(), devices=(), page_size=20)
        pa, pb = Pyramid(a), Pyramid(b)
        span = float(max(pa.span, pb.span, 1))
        self.timelines = (Timeline(a, pa, span=span), Timeline(b, pb, span=span))
        # One axis: zooming or panning either timeline moves the other.
        self._links = [traitlets.link((self.timelines[0], "view"), (self.timelines[1], "view"))]
        self.header = w.HTML(self.header_html())
        boxes = [
            w.VBox([w.HTML(f"<b>{html.escape(label)}</b>"), tl])
            for label, tl in zip(labels, self.timelines, strict=True)
        ]
        super().__init__([self.header, self.table, *boxes])
        self.add_class("openreg-compare")

    def header_html(self) -> str:
        """The headline numbers of both traces and their ratio."""
        rows = []
        for key in self.totals[0]:
            va, vb = self.totals[0][key], self.totals[1][key]
            fmt = (
                static._fmt(va, "ns" if key == "time_ns" else "int"),
                static._fmt(vb, "ns" if key == "time_ns" else "int"),
            )
            ratio = f"{vb / va:.2f}x" if va else "-"
            rows.append(
                f"<tr><td>{key.replace('_ns', '')}</td><td>{fmt[0]}</td><td>{fmt[1]}</td>"
                f"<td>{ratio}</td></tr>"
            )
        la, lb = (html.escape(x) for x in self.labels)
        flips = int(self.table_data["change"].str.startswith("falls back").sum())
        return (
            f"<div style='font:12px system-ui,sans-serif'><b>{la}</b> vs <b>{lb}</b>: "
            f"{flips} ops fall back in "
            f"one and not the other (at the top of the table)<table style='border-collapse:collapse'>"
            f"<tr><th></th><th>{la}</th><th>{lb}</th><th>{lb} / {la}</th></tr>{''.join(rows)}</table></div>"
        )

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = super()._repr_mimebundle_(**kwargs) or {}
        cols = [(c.key, c.label, c.fmt) for c in (_relabel(c, self.labels) for c in COLUMNS)]
        bundle["text/html"] = self.header_html() + static.table_html(self.table_data, cols)
        bundle["text/plain"] = (
            f"<openreg compare {self.labels[0]!r} vs {self.labels[1]!r}: {len(self.table_data)} ops>"
        )
        return bundle


def _relabel(c: Column, labels: tuple[str, str]) -> Column:
    label = c.label.replace("(a)", f"({labels[0]})").replace("(b)", f"({labels[1]})")
    label = label.replace(" a", f" {labels[0]}") if label.endswith(" a") else label
    label = label.replace(" b", f" {labels[1]}") if label.endswith(" b") else label
    return Column(c.key, label, c.fmt, c.color, c.title)


def compare(a: Any, b: Any, labels: tuple[str, str] = ("a", "b")) -> CompareView:
    """Compare two traces (``Trace`` objects or their ``events`` tables); see the module docstring."""
    return CompareView(_events(a), _events(b), labels)


def _events(t: Any) -> pd.DataFrame:
    if isinstance(t, pd.DataFrame):
        return t
    events = getattr(t, "events", None)
    if not isinstance(events, pd.DataFrame):
        raise TypeError(
            f"compare takes traces (openreg_lab.trace()) or their events tables, got {type(t).__name__}"
        )
    return events
