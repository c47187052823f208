"""Hostile inputs: device indices and memory limits out of range (issue 13, item 3).

Indices are range-checked before they are narrowed to c10::DeviceIndex (int8), so 257 never
selects device 1, and every out-of-range value gets our own IndexError / ValueError naming the
valid range instead of pybind's "incompatible function arguments".
"""

from __future__ import annotations

import pytest
import torch

BAD_INDICES = [256, 257, 2**31, 2**63, 2**64, -2]


@pytest.mark.parametrize("index", BAD_INDICES)
@pytest.mark.parametrize(
    "call",
    [
        torch.openreg.set_device,
        torch.openreg.memory_allocated,
        torch.openreg.memory_stats,
        torch.openreg.get_memory_limit,
        torch.openreg.synchronize,
        lambda i: torch.openreg.set_memory_limit(1 << 20, device=i),
        lambda i: torch.openreg.reset_peak_memory_stats(i),
    ],
    ids=[
        "set_device",
        "memory_allocated",
        "memory_stats",
        "get_memory_limit",
        "synchronize",
        "set_memory_limit",
        "reset_peak",
    ],
)
def test_out_of_range_device_index_raises_index_error_naming_the_range(call, index):
    with pytest.raises(
        IndexError, match=rf"openreg device index {index} is out of range: valid indices are 0 to 1"
    ):
        call(index)
    assert torch.openreg.current_device() == 0
    assert torch.openreg.get_memory_limit(1) is None


def test_issue_example_index_257_does_not_select_device_1():
    with pytest.raises(IndexError):
        torch.openreg.set_device(257)
    assert torch.openreg.current_device() == 0
    with pytest.raises(IndexError):
        torch.openreg.set_memory_limit(1000, device=257)
    assert torch.openreg.get_memory_limit(1) is None


@pytest.mark.parametrize("nbytes", [2**63, 2**64, 0, -1])
def test_memory_limit_out_of_range_raises_value_error_naming_the_range(nbytes):
    with pytest.raises(ValueError, match=r"positive number of bytes up to 2\*\*63 - 1, or None"):
        torch.openreg.set_memory_limit(nbytes)
    assert torch.openreg.get_memory_limit() is None


def test_largest_memory_limit_is_accepted():
    torch.openreg.set_memory_limit(2**63 - 1)
    assert torch.openreg.get_memory_limit() == 2**63 - 1
