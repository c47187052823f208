"""The Perfetto export in Perfetto's protobuf format (``.pftrace``), read back
with the ``perfetto`` package's own descriptors: every event on its track, slices nested, names,
arguments and theme colours kept, strings of any kind intact, the sampled Python (host slices) on
a lane per thread in both exports."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
import torch

import openreg_lab
from openreg_lab import theme

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")

HOSTILE = 'a "quoted" </script><b>mark</b>\nline 2 \u00e9\u4e2d \U0001f600'
PYTHON_LANES = 1 << 20  # perfetto.py's first Python lane


def busy_python(seconds: float) -> int:
    """Python that runs long enough for the host sampler to see it (one sample a millisecond)."""
    end, n = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        n += 1
    return n


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    with openreg_lab.trace(stack=True, record_shapes=True) as t:
        x = torch.ones(4, device="openreg")
        openreg_lab.mark(HOSTILE)
        for _ in range(3):
            x = (x + 1).logcumsumexp(0)  # native ops and a fallback with its copies
        with torch.autocast("openreg", dtype=torch.bfloat16):
            torch.ones(2, 2, device="openreg") @ torch.ones(2, 2, device="openreg")
        x.cpu()
    path = tmp_path_factory.mktemp("perfetto") / "t.pftrace"
    t.export_chrome_trace(path)
    return t, pb.Trace.FromString(path.read_bytes())


def _decode(trace):
    interned = trace.packet[0].interned_data
    names = {e.iid: e.name for e in interned.event_names}
    cats = {e.iid: e.name for e in interned.event_categories}
    arg_names = {e.iid: e.name for e in interned.debug_annotation_names}
    strings = {e.iid: e.str.decode() for e in interned.debug_annotation_string_values}
    slices, instants, counters, stacks = [], [], [], {}
    for p in trace.packet[1:]:
        if p.HasField("track_descriptor"):
            continue
        if not p.HasField("track_event"):
            continue
        te = p.track_event
        if te.type == te.TYPE_SLICE_BEGIN:
            args = {
                arg_names[a.name_iid]: strings[a.string_value_iid]
                if a.HasField("string_value_iid")
                else a.int_value
                for a in te.debug_annotations
            }
            stacks.setdefault(te.track_uuid, []).append(
                (p.timestamp, names[te.name_iid], cats[te.category_iids[0]], args)
            )
        elif te.type == te.TYPE_SLICE_END:
            begin_ts, name, cat, args = stacks[te.track_uuid].pop()  # nests: ends the innermost
            slices.append((te.track_uuid, begin_ts, p.timestamp, name, cat, args))
        elif te.type == te.TYPE_INSTANT:
            instants.append(names[te.name_iid])
        elif te.type == te.TYPE_COUNTER:
            counters.append(te.counter_value)
    assert all(not s for s in stacks.values())
    return slices, instants, counters


def test_every_event_is_read_back_with_its_name_time_track_and_arguments(exported):
    t, trace = exported
    ev = t.events
    slices, instants, counters = _decode(trace)
    slices = [s for s in slices if s[0] < PYTHON_LANES]  # the host slices: the test below
    kinds = ("op", "backward", "fallback", "compiled", "compile", "collective", "copy", "cast")
    expected = ev[ev.kind.isin(kinds)]
    assert len(slices) == len(expected) > 20
    by_id = {s[5]["id"]: s for s in slices}
    assert sorted(by_id) == sorted(expected.id)
    for row in expected.itertuples():
        track, begin, end, name, cat, args = by_id[row.id]
        assert (name, begin, end) == (row.name, row.start_ns, row.start_ns + max(row.dur_ns, 0))
        assert track == {"copy": 2, "cast": 3}.get(row.kind, 1024 + row.thread)
        assert args.get("parent", -1) == row.parent
        for key in ("kernel", "dispatch", "source", "device", "src", "dst", "from_dtype", "to_dtype",
                    "argument", "fused", "graph", "reason", "shapes", "dtypes"):  # fmt: skip
            value = getattr(row, key)
            expected = value if isinstance(value, str) else str(value) if isinstance(value, list) else None
            assert args.get(key) == expected, (key, row)
        assert args.get("bytes", 0) == row.bytes
        assert args.get("seq", -1) == row.seq
        assert theme.CHROME_CNAMES.get(cat, "") == args.get("colour", "")
    fallback = next(s for s in slices if s[3] == "aten::_logcumsumexp" and s[4] == "fallback")
    assert fallback[5]["colour"] == theme.CHROME_CNAMES["fallback"]
    assert Counter(s[4] for s in slices if s[5].get("kernel") == "native")["native"] > 0
    assert {s[4] for s in slices if s[3] == "H2D"} <= {"H2D"}
    assert instants == [HOSTILE]  # the mark's text, byte for byte
    memory = ev[ev.kind.isin(["alloc", "free"])]
    assert counters == memory.sort_values("start_ns", kind="stable").total.tolist()


def test_json_is_still_written_for_other_names(exported, tmp_path):
    import json

    t, _ = exported
    t.export_chrome_trace(tmp_path / "t.json")
    data = json.loads((tmp_path / "t.json").read_text())
    assert any(e.get("name") == HOSTILE for e in data["traceEvents"])


def _tracks(trace):
    return {
        p.track_descriptor.uuid: p.track_descriptor for p in trace.packet if p.HasField("track_descriptor")
    }


@pytest.fixture(scope="module")
def with_host(tmp_path_factory):
    """A trace whose thread spends 150 ms in one Python function between two ops."""
    with openreg_lab.trace() as t:
        x = torch.ones(4, device="openreg") + 1
        busy_python(0.15)
        x = x * 2
    folder = tmp_path_factory.mktemp("host")
    t.export_chrome_trace(folder / "t.pftrace")
    t.export_chrome_trace(folder / "t.json")
    return (
        t,
        pb.Trace.FromString((folder / "t.pftrace").read_bytes()),
        json.loads((folder / "t.json").read_text()),
    )


def test_host_slices_are_a_python_lane_under_their_thread_in_the_perfetto_export(with_host):
    t, trace, _ = with_host
    host = t.host_events
    assert "busy_python" in set(host.function)  # the sampler saw the function (150 samples' worth)
    slices, _, _ = _decode(trace)
    python = sorted((s[1], s[2], s[3], s[5]["source"]) for s in slices if s[0] >= PYTHON_LANES)
    expected = sorted(
        (r.start_ns, r.start_ns + r.dur_ns, r.function, f"{r.file}:{r.line}") for r in host.itertuples()
    )
    assert python == expected  # every host slice, exactly, with its file:line
    assert len([s for s in slices if s[0] < PYTHON_LANES]) == t.events.kind.isin(["op", "copy"]).sum()
    tracks = _tracks(trace)
    lanes = {u: d for u, d in tracks.items() if u >= PYTHON_LANES}
    assert len(lanes) == host.os_thread.nunique() == 1
    (lane,) = lanes.values()
    thread = int(host.thread.iloc[0])
    assert lane.name == f"Python (openreg thread {thread})"
    assert lane.parent_uuid == 1024 + thread  # drawn under the thread's own track
    busy = [s for s in slices if s[3] == "busy_python"]
    assert len(busy) == (host.function == "busy_python").sum() >= 1
    assert all(s[4] == "host" and s[5]["colour"] == theme.CHROME_CNAMES["host"] for s in busy)


def test_host_slices_are_a_python_lane_in_the_chrome_export(with_host):
    t, _, data = with_host
    host = t.host_events
    events = data["traceEvents"]
    lanes = {
        e["tid"]: e["args"]["name"]
        for e in events
        if e["ph"] == "M" and e["args"]["name"].startswith("Python")
    }
    assert list(lanes.values()) == [f"Python (openreg thread {int(host.thread.iloc[0])})"]
    on_lanes = [e for e in events if e.get("tid") in lanes and e["ph"] == "X"]
    python = sorted((round(e["ts"] * 1000), e["name"], e["args"]["source"]) for e in on_lanes)
    assert python == sorted((r.start_ns, r.function, f"{r.file}:{r.line}") for r in host.itertuples())
    assert {e["cat"] for e in on_lanes} == {"host"}
