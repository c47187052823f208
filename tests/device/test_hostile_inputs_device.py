"""Hostile inputs: device indices and memory limits out of range.

Indices are range-checked before they are narrowed to c10::DeviceIndex (int8), so 257 never
selects device 1, and every out-of-range value gets CUDA's error for it (``torch.AcceleratorError``, a
RuntimeError: "openreg error: invalid device ordinal") or our ValueError, naming the valid range,
instead of pybind's "incompatible function arguments".
"""

from __future__ import annotations

import pytest
import torch

from openreg_lab import _C
from tests.support.processes import run_python

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
def test_out_of_range_device_index_raises_cudas_error_naming_the_range(call, index):
    with pytest.raises(
        torch.AcceleratorError,
        match=rf"^openreg error: invalid device ordinal \(openreg device index {index} is out of range: "
        r"valid indices are 0 to 1; 2 devices",
    ):
        call(index)
    assert torch.openreg.current_device() == 0
    assert torch.openreg.get_memory_limit(1) is None


def test_issue_example_index_257_does_not_select_device_1():
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        torch.openreg.set_device(257)
    assert torch.openreg.current_device() == 0
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
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


# OPENREG_MEMORY_LIMIT's parser: whole bytes from 1 to 2**63 - 1, never a wrapped negative.
@pytest.mark.parametrize(
    ("text", "nbytes"),
    [
        ("4096", 4096),
        ("4096B", 4096),
        ("9223372036854775807", 2**63 - 1),
        ("1e3", 1000),
        ("1.5K", 1536),
        ("512M", 512 << 20),
        ("2GiB", 2 << 30),
        ("1.5G", 3 << 29),
    ],
)
def test_memory_sizes_parse_to_exact_byte_counts(text, nbytes):
    assert _C._parse_memory_size(text) == nbytes


@pytest.mark.parametrize(
    "text",
    [
        "1e19",
        "9223372036854775808",
        "99999999999999999999999",
        "8589934592G",
        "-1",
        "abc",
        "1.5",
        "",
        "inf",
        "nan",
        "12 MB",
        "1T",
    ],
)
def test_memory_sizes_out_of_range_or_malformed_are_refused(text):
    assert _C._parse_memory_size(text) is None


def test_issue_example_memory_limit_1e19_fails_import_naming_the_range():
    result = run_python("import openreg_lab", OPENREG_MEMORY_LIMIT="1e19")
    assert result.returncode != 0
    assert (
        "OPENREG_MEMORY_LIMIT='1e19' is not a memory size: use a whole number of bytes from 1 to 2**63 - 1"
        in result.stderr
    )
