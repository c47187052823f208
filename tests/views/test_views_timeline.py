"""The timeline's level of detail (recording/lod.py) and payloads (views/timeline.py): exact against the
trace, bounded in size, and never losing an event from its totals."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from openreg_lab import theme
from openreg_lab.recording import hover, lookup
from openreg_lab.recording.lod import COLOR_KEYS, RAW_LIMIT, Pyramid
from openreg_lab.views.timeline import Timeline, payload, payload_size
from tests.support.views_data import tile, training_trace


@pytest.fixture(scope="module")
def trace():
    return training_trace()


def test_rows_are_thread_depths_then_copy_and_cast_lanes(trace):
    ev = trace.events
    p = Pyramid(ev)
    lanes = [r.lane for r in p.rows]
    threads = sorted(ev.loc[ev["kind"].isin(["op", "backward", "fallback"]), "thread"].unique())
    assert [x for x in dict.fromkeys(lanes) if x.startswith("thread")] == [f"thread {t}" for t in threads]
    assert [x for x in lanes if not x.startswith("thread")] == [
        "copies H2D",
        "copies D2H",
        "copies D2D",
        "casts",
    ]
    # A child is one row deeper than its parent slice.
    slices = ev[ev["kind"].isin(["op", "backward", "fallback"])]
    raw = p.levels[0]
    row_of = dict(zip(raw.event.tolist(), raw.row.tolist(), strict=True))
    for r in slices.itertuples(index=False):
        if r.parent >= 0 and r.parent in row_of:
            assert p.rows[row_of[r.id]].depth == p.rows[row_of[r.parent]].depth + 1


def test_every_slice_is_drawn_once_with_its_kernel_colour(trace):
    ev = trace.events
    p = Pyramid(ev)
    q = p.query(0, p.span, 1000)
    assert q.level == -1 and not q.aggregated  # a small trace is sent whole
    drawn = ev[ev["kind"].isin(["op", "backward", "fallback", "copy", "cast"])]
    assert sorted(q.event.tolist()) == sorted(drawn["id"].tolist())
    colors = [COLOR_KEYS[c] for c in p.color[q.event]]
    ops = ev.loc[q.event]
    for kernel in ("native", "composite", "fallback"):
        expected = int(((ops["kind"] == "op") & (ops["kernel"] == kernel)).sum())
        expected += int((ops["kind"] == "fallback").sum()) if kernel == "fallback" else 0
        assert colors.count(kernel) == expected, kernel
    assert colors.count("cast") == int((ev["kind"] == "cast").sum())
    for d in ("H2D", "D2H", "D2D"):
        assert colors.count(d) == int(((ev["kind"] == "copy") & (ev["name"] == d)).sum())
    assert [name for _, name in p.marks] == ["step 0", "step 1"]


def test_collectives_have_a_lane_of_their_own_and_waits_their_colour(trace):
    ev = trace.events
    n = len(ev)
    extra = ev.iloc[:3].copy()
    extra["id"] = np.arange(n, n + 3)
    extra["parent"] = [0, -1, 0]  # issued inside an op, which returns before they complete
    extra["kind"] = "collective"
    extra["name"] = ["allreduce", "wait allreduce", "broadcast"]
    extra["dur_ns"] = 1000
    both = pd.concat([ev, extra], ignore_index=True)
    p = Pyramid(both)
    assert [r.lane for r in p.rows][-1] == "collectives"
    raw = p.levels[0]
    row_of = dict(zip(raw.event.tolist(), raw.row.tolist(), strict=True))
    assert {row_of[i] for i in range(n, n + 3)} == {len(p.rows) - 1}
    assert [COLOR_KEYS[p.color[i]] for i in range(n, n + 3)] == [
        "collective",
        "collective wait",
        "collective",
    ]
    assert theme.event_color("collective", name="wait allreduce") == theme.COLLECTIVE_WAIT_COLOR
    assert theme.event_color("collective", name="allreduce") == theme.COLLECTIVE_COLOR
    assert [r.lane for r in Pyramid(ev).rows] == [r.lane for r in p.rows][:-1]  # the rest is unchanged


def test_the_pyramid_never_loses_a_slice_and_stays_bounded(trace):
    big = tile(trace.events, 60)  # ~150k events
    p = Pyramid(big)
    assert len(p.levels) > 2
    assert p.slice_count == int(big["kind"].isin(["op", "backward", "fallback", "copy", "cast"]).sum())
    per_row = np.bincount(p.levels[0].row, minlength=len(p.rows))
    for lvl in p.levels:
        # Every level accounts for every slice, row by row.
        assert np.array_equal(np.bincount(lvl.row, weights=lvl.count, minlength=len(p.rows)), per_row)
    rng = np.random.default_rng(0)
    for _ in range(20):
        a, b = sorted(rng.uniform(0, p.span, 2))
        q = p.query(a, b, 800)
        assert len(q.start) <= max(RAW_LIMIT, 2 * 800 * len(p.rows) + len(p.rows))
        assert ((q.start < b) & (q.start + np.maximum(q.dur, 1) > a)).all()  # only what overlaps
        if q.level == -1:
            assert int(q.count.sum()) == len(q.start) == p.slices_in(a, b)
    whole = p.query(0, p.span, 800)
    assert whole.aggregated and whole.level >= 1
    assert int(whole.count.sum()) == p.slice_count
    # Zoomed in far enough, the real slices come back.
    q = p.query(0, p.span / 200, 800)
    assert q.level == -1 and not q.aggregated


def test_memory_counters_keep_min_max_and_last(trace):
    ev = trace.events
    big = tile(ev, 30)
    p = Pyramid(big)
    (c,) = p.counters
    mem = big[big["kind"].isin(["alloc", "free"])]
    assert c.device == "openreg:0" and len(c.time) == len(mem)
    q = p.query(0, p.span, 100)
    (w,) = q.counters
    assert len(w["t"]) <= 200
    assert int(np.max(w["max"])) == int(mem["total"].max())
    assert int(np.min(w["min"])) == int(mem["total"].min())
    assert int(w["last"][-1]) == int(mem["total"].iloc[-1])


def test_payload_is_binary_and_hover_names_kernel_path_shapes_and_source(trace):
    ev = trace.events
    p = Pyramid(ev)
    data = payload(p, ev, p.query(0, p.span, 900))
    assert isinstance(data["start"], memoryview) and data["start"].format == "d"
    assert isinstance(data["event"], memoryview) and data["event"].format == "i"
    names = [data["strings"][i] for i in np.frombuffer(data["name"], dtype=np.int32)]
    assert names == ev.loc[np.frombuffer(data["event"], dtype=np.int32), "name"].tolist()
    mm = ev[(ev["name"] == "aten::mm") & (ev["kind"] == "op")].iloc[0]
    k = int(np.flatnonzero(np.frombuffer(data["event"], dtype=np.int32) == mm["id"])[0])
    info = data["strings"][int(np.frombuffer(data["info"], dtype=np.int32)[k])]
    assert "kernel: native" in info and f"dispatch: {mm['dispatch']}" in info
    assert ("args: " in info and "float32[" in info) or "bfloat16[" in info
    assert payload_size(data) < 200_000


def test_the_live_timeline_answers_a_zoom_with_a_new_payload(trace):
    big = tile(trace.events, 40)
    tl = Timeline(big)
    assert tl.data["level"] >= 1  # zoomed out: aggregated
    tl.view = [0.0, tl.span_ns / 300]
    assert tl.data["level"] == -1
    assert tl.data["t1"] == pytest.approx(tl.span_ns / 300)
    tl.width = 400
    assert tl.data["t0"] == 0.0


def test_a_coarser_level_keeps_each_buckets_longest_item_the_last_of_ties():
    # _coarsen finds each group's longest item without sorting; a sort by (group, dur) taking each
    # group's last is the plain rule it must equal, ties (many equal durations) included.
    from openreg_lab.recording.lod import _coarsen, _level

    rng = np.random.default_rng(1)
    n, nrows = 5000, 7
    row = np.sort(rng.integers(0, nrows, n))
    start = np.concatenate([np.sort(rng.integers(0, 10**6, int((row == r).sum()))) for r in range(nrows)])
    dur = rng.integers(0, 4, n) * 1000  # few distinct durations: ties in most buckets
    prev = _level(0.0, start, dur, row, np.arange(n), rng.integers(1, 3, n), nrows)
    got = _coarsen(prev, 20_000.0, nrows)
    b = start // 20_000
    change = np.r_[True, (b[1:] != b[:-1]) | (row[1:] != row[:-1])]
    group = np.cumsum(change) - 1
    order = np.lexsort((dur, group))
    pick = order[np.flatnonzero(np.r_[group[order][1:] != group[order][:-1], True])]
    assert np.array_equal(got.event, pick) and np.array_equal(got.dur, dur[pick])
    assert np.array_equal(got.count, np.add.reduceat(prev.count, np.flatnonzero(change)))
    assert int(got.count.sum()) == int(prev.count.sum())


def _one_item_at_a_time(events: pd.DataFrame, ids: np.ndarray) -> tuple[list[int], list[int], list[str]]:
    """The payload's names, hover texts and strings as they were built before Note [Hover texts by
    value]: a Python string an item, interned in the order name, text, name, text ... (a kernel or
    dispatch path that is NaN is no line: it had been "kernel: nan")."""
    col = {
        c: events[c].to_numpy() for c in ("name", "kernel", "dispatch", "shapes", "dtypes", "source", "bytes")
    }
    strings: dict[str, int] = {}
    names, infos = [], []
    for i in ids.tolist():
        lines = []
        if isinstance(col["kernel"][i], str) and col["kernel"][i]:  # None or NaN: unknown, no line
            lines.append(f"kernel: {col['kernel'][i]}")
        if isinstance(col["dispatch"][i], str) and col["dispatch"][i]:
            lines.append(f"dispatch: {col['dispatch'][i]}")
        if col["shapes"][i] is not None:
            args = ", ".join(f"{d}{list(s)}" for s, d in zip(col["shapes"][i], col["dtypes"][i], strict=True))
            lines.append(f"args: {args}")
        if col["bytes"][i]:
            lines.append(f"bytes: {theme.format_bytes(int(col['bytes'][i]))}")
        if isinstance(col["source"][i], str):
            lines.append(f"source: {lookup.cell_source(col['source'][i])}")
        names.append(strings.setdefault(str(col["name"][i]), len(strings)))
        infos.append(strings.setdefault("\n".join(lines), len(strings)))
    return names, infos, list(strings)


def test_hover_texts_by_value_are_the_item_at_a_time_texts(trace):
    """Each column's line is formatted once per distinct value (Note [Hover texts by value]): every
    level's payload holds the same names, texts and strings table, in the same order, as one text an
    item gave; missing values (None and NaN are no line), empty strings, zero bytes, no
    arguments, names that are no string, a name equal to a text and an empty text included."""
    ev = trace.events
    nan = np.nan
    odd = ev.iloc[:12].copy()
    odd["kind"], odd["parent"], odd["thread"] = "op", -1, 0
    odd["start_ns"], odd["dur_ns"] = np.arange(12) * 100, 50
    text1 = "dispatch: A > B\nbytes: 4.0 KiB\nsource: a.py:3"
    columns = {  # kernel, dispatch, shapes, dtypes, bytes, name, source; a row each
        "kernel": ["native", None, nan, "", "native", None, nan, "fallback", "", None, "native", nan],
        "dispatch": [None, "A > B", nan, "", "A > B", None, "", nan, "C", None, "A > B", nan],
        "shapes": [[[2, 3]], None, [], [(4,)], None, [[1], [2]], None, [], [[2, 3]], None, None, [[5]]],
        "dtypes": [
            ["float32"],
            None,
            [],
            ["int64"],
            None,
            ["bfloat16", None],
            None,
            [],
            ["float32"],
            None,
            None,
            ["x"],
        ],
        "bytes": [0, 4096, 0, 12, 0, 4096, 1 << 31, 0, 12, 0, 0, 7],
        "name": ["aten::mm", None, nan, "", "aten::mm", text1, "aten::add", None, 3, "", 3.0, nan],
        "source": [nan, "a.py:3", None, "a.py:3", "", nan, "b.py:9", None, 5, None, nan, None],
    }
    for col, values in columns.items():
        odd[col] = pd.Series(values, index=odd.index, dtype=object if col != "bytes" else np.int64)
    for events in (tile(ev, 10), odd):  # 4 levels
        p = Pyramid(events)
        for level in range(len(p.levels)):
            data = payload(p, events, p.query_level(level, 0, p.span, 900))
            ids = np.frombuffer(data["event"], dtype=np.int32).astype(np.int64)
            names, infos, strings = _one_item_at_a_time(events, ids)
            assert data["strings"] == strings
            assert np.frombuffer(data["name"], dtype=np.int32).tolist() == names
            assert np.frombuffer(data["info"], dtype=np.int32).tolist() == infos
    assert len(ids) == 12 and "3.0" in strings and "3" in strings and "" in strings
    assert hover.hover_text(odd, 1) == text1 and strings.count(text1) == 1  # a name and a text
    assert hover.hover_text(odd, 2) == "args: "  # a NaN kernel and dispatch path: unknown, no line
    assert hover.hover_text(odd, 5) == "args: bfloat16[1], None[2]\nbytes: 4.0 KiB"


def test_rows_are_ordered_and_nested_as_lexsort_and_the_parent_chain_say():
    # The pyramid orders a start-sorted table by a stable sort of its rows, and counts a slice's
    # depth climbing all events at once: the plain rules, lexsort and a walk up each parent chain.
    from openreg_lab.recording.lod import _by_row_then_start, _depth

    rng = np.random.default_rng(2)
    n = 4000
    row = rng.integers(0, 9, n)
    start = np.sort(rng.integers(0, 500, n))  # sorted, with many ties
    # Host slices after the events, in rows of their own: each row in start order, the table not.
    host_row = np.r_[row, rng.integers(9, 12, 300)]
    host_start = np.r_[start, np.sort(rng.integers(0, 500, 300))]
    # A row out of order in a table whose other rows are in order: lexsorted too.
    swapped = host_start.copy()
    swapped[[n, n + 299]] = swapped[[n + 299, n]]
    assert not np.array_equal(np.argsort(host_row, kind="stable"), np.lexsort((swapped, host_row)))
    cases = [(row, start), (row, rng.permutation(start)), (host_row, host_start), (host_row, swapped)]
    for r, s in cases:
        assert np.array_equal(_by_row_then_start(r, s, 12), np.lexsort((s, r)))
    parent = np.array([-1 if i == 0 or rng.random() < 0.1 else int(rng.integers(0, i)) for i in range(n)])
    is_slice = rng.random(n) < 0.7

    def walk(i: int) -> int:
        d, up = 0, parent[i]
        while up >= 0:
            d, up = d + int(is_slice[up]), parent[up]
        return d

    assert _depth(parent, is_slice).tolist() == [walk(i) for i in range(n)]
    among = rng.random(n) < 0.5
    assert _depth(parent, is_slice, among).tolist() == [walk(i) if among[i] else 0 for i in range(n)]


def test_the_host_lane_is_drawn_the_same_from_the_columns_the_timeline_reads(monkeypatch):
    """host.with_events copies only DRAWN_COLUMNS of the events: the report (the timeline's rows,
    payloads, hover texts, step bands and opening, with and without library frames) and the
    dashboard's timeline are what copying every column gives."""
    from openreg_lab.recording import host as _host
    from openreg_lab.views.dashboard import Dashboard
    from openreg_lab.views.report import report_html

    t = training_trace(samples=3)
    events, slices, library = t.events, t.host_events, t.host_slices(library=True)
    assert slices is not None and len(slices) and len(library)
    drawn = _host.with_events(events, slices)
    assert list(drawn.columns) == [c for c in _host.DRAWN_COLUMNS if c in events.columns]
    assert len(drawn.columns) < len(events.columns)

    def outputs() -> tuple[str, dict]:
        html = report_html(events, host=slices, host_library=library, title="same")
        timeline = Dashboard(events, host=slices).timeline
        return html, {"rows": timeline.rows, "steps": timeline.steps, "data": timeline.data}

    subset = outputs()
    monkeypatch.setattr(_host, "DRAWN_COLUMNS", tuple(events.columns))
    assert list(_host.with_events(events, slices).columns) == list(events.columns)
    every = outputs()
    assert subset[0] == every[0]
    assert _plain(subset[1]) == _plain(every[1])


def test_the_step_bands_with_host_slices_are_the_steps_of_the_events_and_slices_together():
    """drawn_steps stretches the events' step table as steps.table of the events and the host
    slices drawn after them gives it (without hashing the events' kinds again): the same table when
    every step ended or no slice ends later, the unfinished step ended by the latest slice after it;
    and the host rows take the events' column types (a missing integer is -1)."""
    from openreg_lab.recording import host as _host
    from openreg_lab.recording import steps
    from openreg_lab.views.timeline import drawn_steps

    t = training_trace(samples=3)
    events, slices = t.events, t.host_events
    assert slices is not None and len(slices)
    every_step_ended = steps.table(events)
    assert every_step_ended["complete"].all()
    assert drawn_steps(every_step_ended, slices) is every_step_ended
    # An op after the last step: an unfinished step, which host slices may outlast.
    last = int(events.loc[events["kind"] == "step", "start_ns"].max())
    op = events[events["kind"] == "op"].iloc[:1].copy()
    op["id"], op["parent"], op["start_ns"], op["dur_ns"] = len(events), -1, last + 10, 5
    with_op = pd.concat([events, op], ignore_index=True)
    unfinished = steps.table(with_op)
    assert not unfinished["complete"].iloc[-1] and int(unfinished["dur_ns"].iloc[-1]) >= 15
    late = slices.copy()
    late.loc[late.index[-1], ["parent", "start_ns", "dur_ns"]] = [-1, last + 20, 10**9]
    before = slices[slices["start_ns"] + slices["dur_ns"] <= last]
    for h in (slices, late, before):
        drawn = _host.with_events(with_op, h)
        expected = steps.table(drawn)
        pd.testing.assert_frame_equal(drawn_steps(unfinished, h), expected)
        assert drawn.dtypes.to_dict() == with_op[list(drawn.columns)].dtypes.to_dict()
        assert (drawn["seq"].to_numpy()[len(with_op) :] == -1).all()
    assert int(drawn_steps(unfinished, late)["dur_ns"].iloc[-1]) == 20 + 10**9
    assert drawn_steps(unfinished, before) is unfinished


def _plain(value: object) -> object:
    """A payload with its binary arrays as bytes, comparable with ==."""
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
