"""Hostile inputs to streams and events: CUDA idioms work, misuse raises as on CUDA."""

from __future__ import annotations

import pytest
import torch


def test_record_stream_is_accepted_on_any_openreg_stream():
    x = torch.randn(16, device="openreg")
    for stream in (torch.openreg.Stream(), torch.openreg.current_stream(), torch.openreg.Stream(device=1)):
        x.record_stream(stream)
    y = x * 2
    torch.testing.assert_close(y.cpu(), x.cpu() * 2)


def test_record_stream_then_free_and_reuse_is_safe():
    # The CUDA idiom: a tensor made on a side stream, used on the main one, freed, its block reused.
    side = torch.openreg.Stream()
    with torch.openreg.stream(side):
        x = torch.full((1024,), 3.0, device="openreg")
    x.record_stream(torch.openreg.current_stream())
    total = x.sum().item()
    del x
    y = torch.zeros(1024, device="openreg")
    assert total == 3072.0
    assert y.sum().item() == 0.0


def test_record_stream_refuses_a_stream_of_another_device_type():
    x = torch.randn(4, device="openreg")
    with pytest.raises(RuntimeError, match="expected an openreg stream"):
        x.record_stream(torch.Stream(device="cpu"))


def test_record_stream_on_a_cpu_tensor_still_raises_as_in_pytorch():
    with pytest.raises(NotImplementedError, match="record_stream"):
        torch.randn(4).record_stream(torch.openreg.Stream())


def test_elapsed_time_between_two_devices_raises():
    start = torch.openreg.Event(enable_timing=True)
    end = torch.openreg.Event(enable_timing=True)
    start.record(torch.openreg.Stream(device=0))
    end.record(torch.openreg.Stream(device=1))
    with pytest.raises(RuntimeError, match="different devices, openreg:0 and openreg:1"):
        start.elapsed_time(end)
    with pytest.raises(RuntimeError, match="different devices, openreg:1 and openreg:0"):
        end.elapsed_time(start)


def test_elapsed_time_on_one_device_other_than_0_still_works():
    start = torch.openreg.Event(enable_timing=True)
    end = torch.openreg.Event(enable_timing=True)
    s = torch.openreg.Stream(device=1)
    start.record(s)
    end.record(torch.openreg.Stream(device=1))
    assert start.elapsed_time(end) >= 0.0
