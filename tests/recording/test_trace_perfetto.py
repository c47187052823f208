"""Issue 30, point 7: the Perfetto export in Perfetto's protobuf format (``.pftrace``), read back
with the ``perfetto`` package's own descriptors: every event on its track, slices nested, names,
arguments and theme colours kept, strings of any kind intact."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

import openreg_lab
from openreg_lab import theme

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")

HOSTILE = 'a "quoted" </script><b>mark</b>\nline 2 \u00e9\u4e2d \U0001f600'


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    with openreg_lab.trace(stack=True, record_shapes=True) as t:
        x = torch.ones(4, device="openreg")
        openreg_lab.mark(HOSTILE)
        for _ in range(3):
            x = (x + 1).cumsum(0)  # native ops and a fallback with its copies
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
        for key in ("kernel", "dispatch", "source"):
            assert args.get(key) == (getattr(row, key) if isinstance(getattr(row, key), str) else None)
        assert theme.CHROME_CNAMES.get(cat, "") == args.get("colour", "")
    fallback = next(s for s in slices if s[3] == "aten::cumsum.out" and s[4] == "fallback")
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
