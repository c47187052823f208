"""Streams and events (see Note [Synchronous execution] in csrc/runtime/Stream.h)."""

import threading
import time

import pytest
import torch


def test_default_and_current_stream():
    s = torch.openreg.current_stream()
    assert s.stream_id == 0 and s.device_index == 0
    assert s == torch.openreg.default_stream()
    assert torch.openreg.default_stream(1).device_index == 1


def test_new_streams_are_distinct_and_keep_priority():
    a, b = torch.openreg.Stream(), torch.openreg.Stream(priority=-1)
    assert a.stream_id != b.stream_id and a.stream_id > 0
    assert a.priority == 0 and b.priority == -1
    assert torch.openreg.Stream(device=1).device_index == 1


def test_bad_priority_is_rejected():
    with pytest.raises(ValueError, match="priority must be 0"):
        torch.openreg.Stream(priority=3)


def test_stream_context_sets_and_restores_stream_and_device():
    s1 = torch.openreg.Stream(device=1)
    with torch.openreg.stream(s1):
        assert torch.openreg.current_device() == 1
        assert torch.openreg.current_stream(1) == s1
        assert torch.accelerator.current_stream() == s1
        x = torch.ones(3, device="openreg")
        assert x.device == torch.device("openreg", 1)
    assert torch.openreg.current_device() == 0
    assert torch.openreg.current_stream(1).stream_id == 0
    with torch.openreg.stream(None):
        assert torch.openreg.current_stream().stream_id == 0


def test_current_stream_is_per_thread():
    s = torch.openreg.Stream()
    torch.openreg.set_stream(s)
    seen = []
    t = threading.Thread(target=lambda: seen.append(torch.openreg.current_stream().stream_id))
    t.start()
    t.join()
    assert seen == [0]
    assert torch.openreg.current_stream() == s
    torch.openreg.set_stream(torch.openreg.default_stream())


def test_stream_query_synchronize_wait():
    s = torch.openreg.Stream()
    with torch.openreg.stream(s):
        y = torch.randn(100, device="openreg") * 3
    assert s.query()
    s.synchronize()
    other = torch.openreg.Stream()
    other.wait_stream(s)
    e = s.record_event()
    other.wait_event(e)
    assert e.query()
    assert y.device.type == "openreg"


def test_event_elapsed_time_measures_host_time():
    start = torch.openreg.Event(enable_timing=True)
    end = torch.openreg.Event(enable_timing=True)
    start.record()
    time.sleep(0.02)
    end.record()
    end.synchronize()
    assert 15.0 <= start.elapsed_time(end) < 2000.0
    assert isinstance(start, torch.openreg.Event)
    assert not isinstance(torch.Event(device="cpu"), torch.openreg.Event)


def test_elapsed_time_needs_timing_and_recording():
    a, b = torch.openreg.Event(), torch.openreg.Event()
    a.record()
    b.record()
    with pytest.raises(ValueError, match="enable_timing=True"):
        a.elapsed_time(b)
    c, d = torch.openreg.Event(enable_timing=True), torch.openreg.Event(enable_timing=True)
    c.record()
    with pytest.raises(ValueError, match="must be recorded"):
        c.elapsed_time(d)


def test_event_binds_to_device_of_first_record():
    # As on CUDA: an event belongs to the device of the stream it was first recorded on.
    e = torch.openreg.Event()
    e.record(torch.openreg.Stream(device=1))
    assert e.device == torch.device("openreg", 1)
    e.record(torch.openreg.Stream(device=1))
    with pytest.raises(RuntimeError, match="openreg:1"):
        e.record(torch.openreg.Stream(device=0))


def test_accelerator_stream_and_event_api():
    s = torch.Stream(device="openreg:1")
    torch.accelerator.set_stream(s)
    assert torch.accelerator.current_device_index() == 1
    assert torch.accelerator.current_stream(1) == s
    torch.accelerator.synchronize()
    e1 = torch.Event(device="openreg", enable_timing=True)
    e2 = torch.Event(device="openreg", enable_timing=True)
    e1.record(s)
    e2.record(s)
    assert e1.elapsed_time(e2) >= 0
    torch.accelerator.set_stream(torch.openreg.default_stream(1))
