"""Run one function on CPU and on openreg: both raise the same error, or both give the same values."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten


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
