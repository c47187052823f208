"""Trace files: lossless save/load, clear errors for bad files, and the Chrome trace export."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pandas as pd
import pytest
import torch

import openreg_lab
from openreg_lab import _C
from openreg_lab.recording import chrome, files
from openreg_lab.recording.events import EVENT_DTYPE


@pytest.fixture
def rich_trace() -> openreg_lab.Trace:
    w = torch.randn(8, 8, device="openreg", requires_grad=True)
    x = torch.randn(4, 8, device="openreg")
    with openreg_lab.trace(record_shapes=True, stack=True) as t:
        with torch.autocast("openreg", dtype=torch.bfloat16):
            y = torch.mm(x, w)
        torch.logcumsumexp(y.float(), 0).sum().backward()
        y.cpu()
    return t


def test_save_and_load_round_trip_losslessly(rich_trace, tmp_path):
    path = tmp_path / "run.trace"
    rich_trace.save(path)
    back = openreg_lab.load_trace(path)
    pd.testing.assert_frame_equal(back.events, rich_trace.events)
    for name, column in rich_trace.columns.fields.items():
        np.testing.assert_array_equal(back.columns.fields[name], column)
    assert back.dropped == rich_trace.dropped and back.capacity == rich_trace.capacity
    assert back.record_shapes and back.stack
    pd.testing.assert_frame_equal(back.summary(), rich_trace.summary())
    pd.testing.assert_frame_equal(back.fallbacks(), rich_trace.fallbacks())
    assert set(rich_trace.events["kind"]) >= {"op", "backward", "fallback", "copy", "cast", "alloc", "free"}


def test_numpy_reads_events_with_the_cpp_layout():
    # openreg_lab/recording/events.py mirrors struct Event (csrc/trace/Event.h) field for field.
    assert _C._trace_event_size() == EVENT_DTYPE.itemsize == 64


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        openreg_lab.load_trace(tmp_path / "nope.trace")


@pytest.mark.parametrize(
    "content",
    [b"", b"hello, not a trace", b"PK\x03\x04" + b"\x00" * 40],
    ids=["empty", "text", "broken-zip"],
)
def test_foreign_or_corrupt_files_give_a_clear_error(tmp_path, content):
    path = tmp_path / "bad.trace"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="is not an openreg-lab trace: "):
        openreg_lab.load_trace(path)


def test_other_numpy_archives_are_refused(tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, a=np.arange(3))
    with pytest.raises(ValueError, match="is not an openreg-lab trace: "):
        openreg_lab.load_trace(path)


def test_truncated_file_is_refused(rich_trace, tmp_path):
    path = tmp_path / "run.trace"
    rich_trace.save(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="is not an openreg-lab trace: "):
        openreg_lab.load_trace(path)


def test_newer_versions_name_the_fix(rich_trace, tmp_path, monkeypatch):
    path = tmp_path / "future.trace"
    monkeypatch.setattr(files, "VERSION", 99)
    rich_trace.save(path)
    monkeypatch.undo()
    with pytest.raises(ValueError, match=r"format version 99.*upgrade openreg-lab"):
        openreg_lab.load_trace(path)


def test_damaged_columns_are_refused(rich_trace, tmp_path):
    path = tmp_path / "run.trace"
    rich_trace.save(path)
    damaged = tmp_path / "damaged.trace"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(damaged, "w") as dst:
        for item in src.namelist():
            data = src.read(item)
            if item == "f_kind.npy":
                arr = np.load(src.open(item))[:-1]
                buf = io.BytesIO()
                np.save(buf, arr)
                data = buf.getvalue()
            dst.writestr(item, data)
    with pytest.raises(ValueError, match="damaged"):
        openreg_lab.load_trace(damaged)


def test_chrome_trace_follows_the_trace_event_format(rich_trace, tmp_path):
    path = tmp_path / "run.json"
    rich_trace.export_chrome_trace(path)
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    complete = [e for e in events if e["ph"] == "X" and e["cat"] != "host"]
    ev = rich_trace.events
    durable = ev[ev["kind"].isin(["op", "backward", "fallback", "copy", "cast"])]
    assert len(complete) == len(durable)
    host = [e for e in events if e["ph"] == "X" and e["cat"] == "host"]
    assert len(host) == len(rich_trace.host_events)  # the sampled Python, if a sample fell in the trace
    for e in complete:
        assert {"name", "cat", "ts", "dur", "pid", "tid", "args"} <= e.keys()
    names = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert {"copies", "autocast casts"} <= names
    assert sum(n.startswith("openreg thread") for n in names) == ev["thread"].nunique()
    copies = [e for e in complete if e["cat"] == "copy"]
    assert {e["tid"] for e in copies} == {chrome._COPY_TRACK}
    assert sorted(e["args"]["bytes"] for e in copies) == sorted(ev.loc[ev["kind"] == "copy", "bytes"])
    casts = [e for e in complete if e["cat"] == "cast"]
    assert {e["tid"] for e in casts} == {chrome._CAST_TRACK} and casts
    mm = next(e for e in complete if e["name"] == "aten::mm" and e["cat"] == "op")
    assert mm["args"]["kernel"] == "native"
    assert mm["args"]["dispatch"].startswith("AutocastPrivateUse1 > ")
    assert mm["args"]["shapes"] == [[4, 8], [8, 8]]
    counters = [e for e in events if e["ph"] == "C"]
    assert len(counters) == int(ev["kind"].isin(["alloc", "free"]).sum())
