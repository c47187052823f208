"""The memory view (views/memory_view.py) draws Trace.memory()'s tables: the
stacked areas are the timeline's bytes by category, the peak is peak()'s, a click lists live(t),
the report embeds each drawn moment's list, the merged report's row is peaks_by_rank's. The
browser half is tests/browser/test_browser_memory.py."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from types import SimpleNamespace

import pytest
import torch

import openreg_lab
from openreg_lab import theme
from openreg_lab.recording import memory_ranks
from openreg_lab.recording.observations import CATEGORIES
from openreg_lab.views import memory_view
from openreg_lab.views.report import report_html
from tests.support.views_data import mlp_step_trace


@pytest.fixture(scope="module")
def traced() -> openreg_lab.Trace:
    return mlp_step_trace()


class _Rows(HTMLParser):
    """The cells of every table row of a page (header rows included), as text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _table(page: str) -> list[list[str]]:
    p = _Rows()
    p.feed(page)
    return p.rows


def _expected_rows(live, top: int = memory_view.LIVE_ROWS) -> list[list[str]]:
    """What the list shows of ``Memory.live(t)``: its ``top`` largest, formatted."""
    text = lambda v: v if isinstance(v, str) else ""  # noqa: E731 (None or NaN: unknown)
    out = []
    for r in live.head(top).itertuples(index=False):
        size = theme.format_bytes(r.block_bytes)
        out.append([size, r.category, *map(text, (r.op, r.module, r.source)), f"{r.age_steps:,}"])
    return out


def _areas(fig) -> list:
    return [d for d in fig.data if isinstance(d.meta, dict) and "moment" not in d.meta]


def test_the_figure_stacks_the_memory_tables_and_marks_the_peak(traced):
    m = traced.memory()
    tables = memory_view.tables(m)
    fig = memory_view.figure(tables)
    full = m.timeline()
    k = full["category"].nunique()
    areas = _areas(fig)
    # One area a category the device held, in CATEGORIES order and colours, every moment drawn.
    assert [a.name for a in areas] == [c for c in CATEGORIES if c in set(full["category"].astype(str))]
    assert [a.fillcolor for a in areas] == [theme.MEMORY_CATEGORY_COLORS[a.name] for a in areas]
    for a in areas:
        mine = full[full["category"] == a.name]
        assert list(a.y) == mine["bytes"].tolist() and len(a.y) == len(full) // k
        assert list(a.x) == (mine["t_ns"] / 1e6).tolist()
    # At the peak, the stacked categories are peaks()'s, and sum to what peak() lists.
    peaks = m.peaks().iloc[0]
    i = tables.peak_moment("openreg:0")
    assert {a.name: a.y[i] for a in areas} == {a.name: int(peaks[a.name]) for a in areas}
    by_category = m.peak().groupby("category")["block_bytes"].sum()
    assert sum(a.y[i] for a in areas) == int(by_category.sum()) == int(peaks["peak_bytes"])
    (marker,) = [d for d in fig.data if d.name == "peak"]
    assert (marker.x[0], marker.y[0]) == (peaks["t_ns"] / 1e6, peaks["peak_bytes"])
    assert marker.meta == {"device": "openreg:0", "moment": i}
    label = f"peak {theme.format_bytes(peaks['peak_bytes'])} at {theme.format_ns(peaks['t_ns'])}"
    assert any(a.text.startswith(label) for a in fig.layout.annotations)
    # Each complete step's end is drawn, and labelled.
    steps = m.steps()
    (ends,) = [d for d in fig.data if d.name == "end of a step"]
    done = steps.loc[steps["complete"], "end_ns"] / 1e6
    assert [x for x in ends.x if x == x][::2] == done.tolist()  # NaN: a gap between the lines
    assert tables.peaks.equals(peaks_table := m.peaks()[tables.peaks.columns]), peaks_table
    assert {a.text for a in fig.layout.annotations} >= {"step 0", "step 1"}
    assert "incomplete" not in fig.layout.title.text


def test_the_level_of_detail_bounds_the_moments_and_keeps_the_peak(traced):
    m = traced.memory()
    tables = memory_view.tables(m, buckets=6)
    when, _, b = tables.moments("openreg:0")
    assert len(when) <= 7  # six buckets and the trace's start
    assert all(len(a.x) == len(when) for a in _areas(memory_view.figure(tables)))
    assert int(b.sum(axis=1)[tables.peak_moment("openreg:0")]) == int(m.peaks()["peak_bytes"].iat[0])
    assert len(memory_view.tables(m).moments("openreg:0")[0]) > len(when)


def test_a_click_in_the_dashboard_lists_what_was_live_and_moves_the_timeline(traced):
    m = traced.memory()
    d = traced.show()
    d.chart_tabs.value = "Memory"
    # Drawn on first showing: what was live at the peak.
    peak_t = int(m.peaks()["t_ns"].iat[0])
    assert _table(d.memory_list.value)[1:] == _expected_rows(m.live(peak_t, 0))
    when, _, _ = d.memory_tables.moments("openreg:0")
    area = _areas(d.figure)[0]
    for i in (3, len(when) // 2):
        d._memory_clicked(area, SimpleNamespace(point_inds=[i]), None)  # what plotly's click calls
        t = int(when[i])
        live = m.live(t, "openreg:0")
        rows = _table(d.memory_list.value)
        assert rows[0] == ["size", "category", "op", "module", "line", "age (steps)"]
        assert rows[1:] == _expected_rows(live)
        total = f"{len(live):,} allocations, {theme.format_bytes(live['block_bytes'].sum())}"
        assert total in d.memory_list.value
        assert d.timeline.cursor == t and d.timeline.view[0] < t < d.timeline.view[1]
    # The mimebundle's text/html (no JavaScript) has the peaks by category and the live list.
    page = d._repr_mimebundle_()["text/html"]
    assert "Memory by category" in page
    peaks_row = [theme.format_bytes(m.peaks()[c].iat[0]) for c in CATEGORIES]
    assert any(row[-len(CATEGORIES) :] == peaks_row for row in _table(page))


def _embedded(page: str) -> dict:
    start = page.index("\nopenregMemoryView(")
    start += 1
    text = page[start + len("openregMemoryView(") :]
    dec = json.JSONDecoder()
    _, end = dec.raw_decode(text)
    data, _ = dec.raw_decode(text[end + 2 :])
    return data


def test_the_report_embeds_what_was_live_at_each_moment_drawn(traced):
    m = traced.memory()
    page = report_html(traced.events, memory=m)
    assert "id='memory'" in page and 'id="memory-chart"' in page and "openreg-memory-live" in page
    data = _embedded(page)
    d = data["devices"]["openreg:0"]
    s = data["strings"]
    tables = memory_view.tables(m, memory_view.REPORT_MOMENTS)
    assert d["t"] == tables.moments("openreg:0")[0].tolist()
    for i, t in enumerate(d["t"]):
        live = m.live(t, "openreg:0")
        shown = [[theme.format_bytes(r[0]), CATEGORIES[r[1]], s[r[2]], s[r[3]], s[r[4]], f"{r[5]:,}"]
                 for r in d["rows"][i]]  # fmt: skip
        assert shown == _expected_rows(live, data["top"])
        assert d["totals"][i] == [len(live), int(live["block_bytes"].sum())]
    # Under the chart at first: what was live at the peak (the 20 largest), in the page itself.
    peak_t = int(m.peaks()["t_ns"].iat[0])
    assert _expected_rows(m.live(peak_t, 0)) == [r for r in _table(page) if len(r) == 6][1:21]


def test_a_cut_list_says_what_it_leaves_out(traced):
    m = traced.memory()
    tables = memory_view.tables(m)
    section = memory_view.report_section(m, tables, top=3)
    peak_t = int(m.peaks()["t_ns"].iat[0])
    live = m.live(peak_t, 0)
    left = int(live["block_bytes"].sum() - live["block_bytes"].head(3).sum())
    cut = f"The 3 largest are listed, the other {len(live) - 3:,} ({theme.format_bytes(left)}) left out"
    assert cut in section
    assert max(len(rows) for rows in _embedded(section)["devices"]["openreg:0"]["rows"]) == 3


def test_incomplete_memory_and_an_out_of_memory_are_marked():
    x = torch.randn(64, device="openreg")
    with pytest.warns(openreg_lab.TraceDroppedEventsWarning), openreg_lab.trace(capacity=30) as t:
        for _ in range(20):
            y = x * 2
            del y
    m = t.memory()
    tables = memory_view.tables(m)
    assert "incomplete" in memory_view.figure(tables).layout.title.text
    page = report_html(t.events, memory=m)
    assert "openreg-memory-note" in page and f"{t.dropped:,} events were dropped" in page
    # An allocation that failed: a cross where it failed, at the bytes allocated then. The cache is
    # emptied first: a cached block left by an earlier test in this process would serve the request.
    torch.openreg.empty_cache()
    torch.openreg.set_memory_limit(torch.openreg.memory_allocated() + 64 * 1024)
    try:
        with pytest.raises(torch.OutOfMemoryError), openreg_lab.trace() as t:
            keep = torch.empty(16 * 1024, device="openreg")
            torch.empty(64 * 1024, device="openreg")
    finally:
        torch.openreg.set_memory_limit(None)
    del keep
    ooms = t.memory().ooms()
    fig = memory_view.figure(memory_view.tables(t.memory()))
    (cross,) = [d for d in fig.data if d.name == "out of memory"]
    assert list(cross.x) == (ooms["t_ns"] / 1e6).tolist() and list(cross.y) == ooms["allocated"].tolist()
    assert cross.text[0] == "out of memory asking 256.0 KiB"


def test_the_ranks_row_is_each_ranks_peak_by_category(traced):
    other = mlp_step_trace(steps=1)
    peaks = memory_ranks.peaks_by_rank([traced, other])
    page = memory_view.rank_peaks_html(peaks)
    rows = _table(page)
    cats = [c for c in CATEGORIES if int(peaks[c].sum())]
    assert rows[0] == ["rank", "device", "peak", "at", "step", "by category", *cats]
    live = memory_ranks.peak_by_rank([traced, other])
    for row, p in zip(rows[1:], peaks.itertuples(index=False), strict=True):
        assert row[:5] == [str(p.rank), p.device, theme.format_bytes(p.peak_bytes), theme.format_ns(p.t_ns),
                           str(p.step)]  # fmt: skip
        assert row[6:] == [theme.format_bytes(getattr(p, c)) for c in cats]
        assert int(live.loc[live["rank"] == p.rank, "block_bytes"].sum()) == p.peak_bytes
    for p in peaks.itertuples(index=False):  # each bar's parts are the peak's categories
        for c in cats:
            if getattr(p, c):
                assert f"data-category='{c}' data-bytes='{getattr(p, c)}'" in page


def test_a_trace_without_device_memory_says_so():
    x = torch.ones(3)
    with openreg_lab.trace() as t:
        x * 2  # on the CPU: no allocation on openreg
    m = t.memory()
    fig = memory_view.figure(memory_view.tables(m))
    assert fig.data == () and [a.text for a in fig.layout.annotations] == [memory_view.NO_MEMORY]
    assert "id='memory'" in report_html(t.events, memory=m)


def test_each_device_has_its_panel_and_its_lists():
    with openreg_lab.trace() as t:
        a = torch.ones(64, device="openreg:0")
        b = torch.ones(256, device="openreg:1")
        del a
    m = t.memory()
    tables = memory_view.tables(m)
    assert tables.devices == ["openreg:0", "openreg:1"]
    assert tables.peaks.equals(m.peaks()[tables.peaks.columns])
    axes = {d.meta["device"]: d.xaxis for d in memory_view.figure(tables).data if isinstance(d.meta, dict)}
    assert axes == {"openreg:0": "x", "openreg:1": "x2"}  # a panel a device
    data = _embedded(report_html(t.events, memory=m))
    for device, d in data["devices"].items():
        assert d["totals"][-1] == [
            len(m.live(d["t"][-1], device)),
            int(m.live(d["t"][-1], device)["block_bytes"].sum()),
        ]
    assert data["devices"]["openreg:1"]["totals"][-1] == [1, 1024]
    del b
