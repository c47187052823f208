"""Comparisons of native openreg kernels against CPU, shared by the test_native_* files.

Each runs the openreg side under the fallback policy "error": the CPU fallback raises
NotImplementedError there, so a passing comparison also proves that the op ran natively and that
no data moved.
"""

from __future__ import annotations

import pytest
import torch

import openreg_lab


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
