"""What the test_native_* files of the neural-network kernels share (softmax, layer norm, embedding,
loss, indexing): the native ops of each family, CPU comparisons, and the "error" fallback policy."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest
import torch

import openreg_lab

aten = torch.ops.aten
DEV = torch.device("openreg", 0)
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]

NATIVE = {
    "softmax": [
        "aten::_softmax",
        "aten::_softmax.out",
        "aten::_log_softmax",
        "aten::_log_softmax.out",
        "aten::_softmax_backward_data",
        "aten::_softmax_backward_data.out",
        "aten::_log_softmax_backward_data",
        "aten::_log_softmax_backward_data.out",
    ],
    "normalization": ["aten::native_layer_norm", "aten::native_layer_norm_backward"],
    "embedding": ["aten::embedding_dense_backward"],
    "loss": [
        "aten::nll_loss_forward",
        "aten::nll_loss_forward.output",
        "aten::nll_loss_backward",
        "aten::nll_loss_backward.grad_input",
        "aten::nll_loss2d_forward",
        "aten::nll_loss2d_forward.output",
        "aten::nll_loss2d_backward",
        "aten::nll_loss2d_backward.grad_input",
    ],
    "indexing": ["aten::cat", "aten::cat.out", "aten::index_select", "aten::index_select.out"],
}
ALL_NATIVE = [op for ops in NATIVE.values() for op in ops]


# 16-bit results: openreg accumulates in float and rounds once; CPU rounds some intermediates to the
# 16-bit type. Both are within a few 16-bit ulps of the exact result, not of each other.
TOL16 = {torch.float16: {"rtol": 1e-2, "atol": 2e-3}, torch.bfloat16: {"rtol": 5e-2, "atol": 1.6e-2}}


def tol(dtype: torch.dtype) -> dict[str, float]:
    return TOL16.get(dtype, {})


def dev(t: torch.Tensor) -> torch.Tensor:
    return t.to(DEV)


def native() -> AbstractContextManager[None]:
    """Inside this block any fallback raises: the ops called must be native."""
    return openreg_lab.fallback_policy("error")


def check(
    actual: torch.Tensor | None, expected: torch.Tensor | None, strides: bool = True, **tolerance: float
):
    """`actual` is on openreg and matches the CPU result `expected` (values, dtype, shape, strides)."""
    if expected is None:
        assert actual is None
        return
    assert actual is not None
    assert actual.device == DEV
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    if strides and expected.numel() > 1:
        assert actual.stride() == expected.stride()
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True, **tolerance)


def same_error(fn: Callable, cpu_args: tuple, dev_args: tuple, match: str | None = None) -> None:
    """fn raises the same exception type on CPU and on openreg (and `match` on openreg)."""
    try:
        fn(*cpu_args)
    except Exception as e:  # the CPU decides the type
        expected = type(e)
    else:
        pytest.fail("the CPU call did not raise")
    with pytest.raises(expected, match=match):
        fn(*dev_args)


def randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


def check_registration(family: str) -> None:
    """Every op of `family` has a PrivateUse1 kernel, and native_ops.yaml lists exactly them."""
    for op in NATIVE[family]:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1"), op
    assert sorted(openreg_lab.native_ops_by_family()[family]) == sorted(NATIVE[family])


def on_dev(*ts):
    return tuple(None if t is None else dev(t) for t in ts)
