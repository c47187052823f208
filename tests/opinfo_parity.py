"""Run PyTorch's OpInfo sample inputs on openreg and on CPU and compare (float32).

Used by tests/test_opinfo.py and scripts/opinfo_report.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_map

import openreg_lab  # noqa: F401

DTYPE = torch.float32


class Mismatch(AssertionError):
    """An OpInfo sample whose openreg result differs from CPU's. ``cause`` names the kind."""

    def __init__(self, cause: str, detail: str) -> None:
        super().__init__(f"{cause}: {detail}")
        self.cause = cause
        self.detail = detail


@dataclass(frozen=True)
class Case:
    """One OpInfo (name and variant) to check."""

    op: Any

    @property
    def id(self) -> str:
        return self.op.name + (f".{self.op.variant_test_name}" if self.op.variant_test_name else "")


def all_cases() -> list[Case]:
    """Every OpInfo that supports float32 on CPU."""
    return [Case(op) for op in op_db if DTYPE in op.supported_dtypes("cpu")]


def _to_device(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        y = x.detach().to("openreg")
        return y.requires_grad_(x.requires_grad) if x.is_leaf and x.requires_grad else y
    return x


def _leaves(x: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor) and t.requires_grad and t.is_leaf]


def _compare(cause: str, actual: Any, expected: Any) -> None:
    a_flat, _ = tree_flatten(actual)
    e_flat, _ = tree_flatten(expected)
    if len(a_flat) != len(e_flat):
        raise Mismatch(cause, f"{len(a_flat)} outputs on openreg, {len(e_flat)} on cpu")
    for a, e in zip(a_flat, e_flat, strict=True):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise Mismatch(cause, f"got {type(a).__name__}, expected a tensor")
            if e.device.type == "cpu" and a.device.type not in ("openreg", "cpu"):
                raise Mismatch("device", f"result on {a.device}")
            if a.dtype != e.dtype:
                raise Mismatch("dtype", f"{a.dtype} vs {e.dtype}")
            try:
                torch.testing.assert_close(a.cpu(), e, equal_nan=True, check_device=False, check_stride=False)
            except AssertionError as err:
                raise Mismatch(cause, str(err).splitlines()[0]) from None
        elif isinstance(e, float) and e != e:  # NaN
            continue
        elif a != e:
            raise Mismatch(cause, f"{a!r} vs {e!r}")


def _samples(case: Case, requires_grad: bool) -> Iterator[Any]:
    yield from case.op.sample_inputs("cpu", DTYPE, requires_grad=requires_grad)


def check(case: Case, max_samples: int = 20) -> int:
    """Compare forward (and backward when supported) for up to ``max_samples`` samples.

    Returns the number of samples compared; raises :class:`Mismatch` on the first difference and
    lets an exception raised only on openreg propagate.
    """
    op = case.op
    grad = op.supports_autograd
    compared = 0
    for sample in _samples(case, requires_grad=grad):
        if compared >= max_samples:
            break
        torch.manual_seed(0)
        try:
            expected = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:  # a sample CPU itself rejects says nothing about openreg
            continue
        dev_input = tree_map(_to_device, sample.input)
        dev_args = tree_map(_to_device, sample.args)
        dev_kwargs = tree_map(_to_device, sample.kwargs)
        torch.manual_seed(0)
        actual = op(dev_input, *dev_args, **dev_kwargs)
        _compare("forward", actual, expected)
        compared += 1
        if not grad:
            continue
        cpu_leaves = _leaves((sample.input, sample.args, sample.kwargs))
        dev_leaves = _leaves((dev_input, dev_args, dev_kwargs))
        e_out = [
            t for t in tree_flatten(expected)[0] if isinstance(t, torch.Tensor) and t.grad_fn is not None
        ]
        a_out = [t for t in tree_flatten(actual)[0] if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        if not cpu_leaves or not e_out or len(a_out) != len(e_out):
            continue
        e_grads = torch.autograd.grad(sum(t.sum() for t in e_out), cpu_leaves, allow_unused=True)
        a_grads = torch.autograd.grad(sum(t.sum() for t in a_out), dev_leaves, allow_unused=True)
        _compare("backward", list(a_grads), list(e_grads))
    return compared
