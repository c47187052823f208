"""Comparisons of native openreg kernels against CPU, shared by the test_native_* files.

Each runs the openreg side under the fallback policy "error": the CPU fallback raises
NotImplementedError there, so a passing comparison also proves that the op ran natively and that
no data moved.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import openreg_lab

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, *FLOATS]


def make(
    shape: tuple[int, ...] | list[int],
    device: str,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    low: float = -9,
    high: float = 9,
) -> torch.Tensor:
    """The same values on every device (drawn on the CPU)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        t = torch.rand(shape, generator=g) > 0.5
    elif dtype.is_floating_point:
        t = (torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)
    else:
        t = torch.randint(
            max(int(low), 0 if dtype == torch.uint8 else -100), int(high) + 1, shape, generator=g
        )
        t = t.to(dtype)
    return t.to(device)


def to_dev(x):
    return x.to("openreg") if isinstance(x, torch.Tensor) else x


def assert_matches(actual, expected, **tol):
    """actual (on openreg) equals expected (on CPU); tuples and lists element by element."""
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_matches(a, e, **tol)
        return
    assert actual.device.type == "openreg"
    torch.testing.assert_close(actual.cpu(), expected, **tol)


def check(fn, *args, **tol):
    """fn on CPU tensors vs on their openreg copies, natively (policy "error")."""
    expected = fn(*args)
    dev_args = [to_dev(a) for a in args]
    with openreg_lab.fallback_policy("error"):
        actual = fn(*dev_args)
    assert_matches(actual, expected, **tol)
    return actual


def check_error(fn, *args):
    """fn raises the same exception type and message on openreg (natively) as on CPU."""
    with pytest.raises(Exception) as cpu_err:
        fn(*args)
    dev_args = [to_dev(a) for a in args]
    with openreg_lab.fallback_policy("error"), pytest.raises(cpu_err.type) as dev_err:
        fn(*dev_args)
    assert str(dev_err.value).splitlines()[0] == str(cpu_err.value).splitlines()[0]


def integer_upcast(fn: Callable[..., Any], has_out: bool) -> Callable[[str], list[Any]]:
    """test_reductions.py's _test_reduce_integer_upcast as a case for
    ``tests.support.parity.assert_native_as_cpu``: ``fn(x)``'s dtype for integer and floating
    inputs, with ``dtype=``, and (``has_out``) with an out= tensor, which is favoured over
    ``dtype=``: a mismatch raises. Complex dtypes are left out (they run through the fallback)."""

    def run(d: str) -> list[Any]:
        results: list[Any] = []
        for dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bfloat16,
                      torch.float32, torch.float64):  # fmt: skip
            x = torch.ones(3, 4, 5, dtype=dtype, device=d)
            if dtype.is_floating_point:
                other = torch.float32 if dtype == torch.float64 else torch.float64
            else:
                other = torch.int16 if dtype == torch.int32 else torch.int32
            mixed = torch.int32 if dtype.is_floating_point else torch.float32
            results += [fn(x), fn(x, dtype=other), fn(x, dtype=mixed)]
            if not has_out:
                continue
            for out_dtype in (other, mixed):
                out = torch.ones_like(fn(x), dtype=out_dtype)
                results += [fn(x, out=out), fn(x, out=out, dtype=out_dtype)]
                try:
                    fn(x, out=out, dtype=dtype)  # dtype is not out's
                except RuntimeError as e:
                    results.append(str(e).splitlines()[0])
        return results

    return run
