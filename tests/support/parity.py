"""Run one function on CPU and on openreg: both raise the same error, or both give the same values
(``assert_native_as_cpu``: and openreg runs natively, warning as the CPU does)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

import openreg_lab


def outcome(fn: Callable[[str], Any], device: str) -> tuple[str, Any]:
    try:
        result = fn(device)
    except Exception as e:  # the error is the outcome being compared
        return "raise", e
    return "ok", [t.cpu() if isinstance(t, torch.Tensor) else t for t in tree_flatten(result)[0]]


def assert_same_as_cpu(fn: Callable[[str], Any], **close: Any) -> Any:
    """``fn(device)`` on "cpu" and "openreg": same exception type and message, or equal results."""
    cpu_kind, cpu = outcome(fn, "cpu")
    dev_kind, dev = outcome(fn, "openreg")
    if cpu_kind == "raise":
        assert dev_kind == "raise", f"CPU raises {cpu!r}, openreg returns {dev}"
        assert type(dev) is type(cpu), f"{dev!r} vs CPU's {cpu!r}"
        first = str(cpu).splitlines()[0]
        assert str(dev).startswith(first[:40]), f"{dev!r} vs CPU's {cpu!r}"
        return cpu
    assert dev_kind == "ok", f"openreg raises {dev!r}, CPU returns {cpu}"
    assert len(dev) == len(cpu)
    for c, d in zip(cpu, dev, strict=True):
        if isinstance(c, torch.Tensor):
            torch.testing.assert_close(d, c, equal_nan=True, **close)
        else:
            assert d == c
    return cpu


def _recorded(fn: Callable[[str], Any], device: str, native: bool) -> tuple[tuple[str, Any], list[str]]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        if device == "cpu" or not native:
            result = outcome(fn, device)
        else:
            with openreg_lab.fallback_policy("error"):
                result = outcome(fn, device)
    # ATen's warnings end with the C++ file and line that raised them, which differ
    return result, [
        f"{w.category.__name__}: {str(w.message).split(' (Triggered internally at')[0]}" for w in seen
    ]


def assert_native_as_cpu(
    fn: Callable[[str], Any], *, strides: bool = True, native: bool = True, **close: Any
) -> Any:
    """``fn(device)`` on "cpu", and on "openreg" under the fallback policy "error" (so natively;
    ``native=False``: other ops of ``fn`` may fall back): the same exception type and first line of
    message, or equal values with the same dtypes, shapes and (``strides``) strides; and the same
    warnings either way. Returns the CPU's outcome."""
    (cpu_kind, cpu), cpu_warned = _recorded(fn, "cpu", native)
    (dev_kind, dev), dev_warned = _recorded(fn, "openreg", native)
    assert dev_warned == cpu_warned, f"openreg warned {dev_warned}, CPU {cpu_warned}"
    if cpu_kind == "raise":
        assert dev_kind == "raise", f"CPU raises {cpu!r}, openreg returns {dev}"
        assert type(dev) is type(cpu), f"{dev!r} vs CPU's {cpu!r}"
        assert str(dev).splitlines()[0] == str(cpu).splitlines()[0], f"{dev!r} vs CPU's {cpu!r}"
        return cpu
    assert dev_kind == "ok", f"openreg raises {dev!r}, CPU returns {cpu}"
    assert len(dev) == len(cpu)
    for c, d in zip(cpu, dev, strict=True):
        if isinstance(c, torch.Tensor):
            torch.testing.assert_close(d, c, equal_nan=True, **close)
            if strides and c.numel() > 1:
                assert d.stride() == c.stride(), f"strides {d.stride()} vs CPU's {c.stride()}"
        else:
            assert d == c
    return cpu
