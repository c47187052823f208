"""Run PyTorch's OpInfo sample inputs on openreg and on CPU and compare.

float32 by default; :func:`check` takes any dtype the OpInfo supports on CPU, and can make every
tensor argument non-contiguous first.

Used by tests/operators/test_opinfo.py and scripts/opinfo_report.py.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_map

import openreg_lab  # noqa: F401

DTYPE = torch.float32

# The dtypes of the sweep beyond float32: the other float widths, a complex, an integer and bool.
EXTRA_DTYPES = (torch.float64, torch.float16, torch.bfloat16, torch.complex64, torch.int32, torch.bool)

# Wider tolerances (atol, rtol), each for a stated numerical reason; everything else uses
# torch.testing.assert_close's float32 defaults (atol 1e-5, rtol 1.3e-6).
TOLERANCE = {
    # The sample whose mask requires grad: CPU takes the math path, openreg's fused kernel its
    # explicit path (Note [Fused attention on openreg]): the same function, summed in another order.
    "nn.functional.scaled_dot_product_attention": (1e-4, 1e-4),
    # The backward of least squares on ill-conditioned, underdetermined samples: differences of up
    # to 1.6e-5 between runs that differ only in memory layout.
    "linalg.lstsq": (1e-4, 1e-4),
    "linalg.lstsq.grad_oriented": (1e-4, 1e-4),
    # Samples that normalise one element: x - mean is 0 in exact arithmetic. openreg computes the
    # statistics in double and gets 0; CPU's float mean leaves ~1e-7, which rstd = 1/sqrt(eps) ~ 316
    # amplifies into gradients of up to 1e-4 that should be 0. Other samples agree to 2e-6.
    "nn.functional.layer_norm": (2e-4, 1e-4),
    "native_layer_norm": (2e-4, 1e-4),
    # The gradient of `other` where it was broadcast sums x * 2**other * ln 2 over the broadcast
    # dim: terms of up to ~1.6e3 that cancel to ~50, so summation order alone moves the float32
    # result by an ulp of the terms (1.2e-4). openreg's order lands nearer the float64 sum than CPU's.
    "ldexp": (5e-4, 1.3e-6),
}

# The same, for the other dtypes of the sweep, by (OpInfo id, dtype); assert_close's defaults for
# each dtype otherwise.
DTYPE_TOLERANCE = {
    # The loss sums softmax's outputs, whose gradient is 0 in exact arithmetic: both backends return
    # rounding noise of the output's ulp. Over dim 0 openreg's kernel sums in another order than
    # CPU's (forward results one ulp apart), so the noise differs by up to 3.6e-5 (float16) and
    # 5.6e-4 (bfloat16), against assert_close's atol of 1e-5.
    ("softmax", torch.float16): (1e-4, 1e-3),
    ("softmax", torch.bfloat16): (1e-3, 1.6e-2),
    # The sample with a mask that requires grad: CPU takes the math path for it, rounding scores and
    # probabilities to 16 bits at each step; openreg's fused kernel accumulates in float (Note [Fused
    # attention on openreg]). Results up to 52 differ by an ulp or two of the 16-bit type.
    ("nn.functional.scaled_dot_product_attention", torch.float16): (1e-3, 1e-3),
    ("nn.functional.scaled_dot_product_attention", torch.bfloat16): (5e-2, 1.6e-2),
}

# Ops whose outputs are uninitialised memory: only their metadata is comparable.
UNINITIALIZED = {"empty", "empty_like", "empty_permuted", "empty_strided", "new_empty", "new_empty_strided"}


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


def case_id(key: tuple[str, torch.dtype, bool]) -> str:
    """A pytest id for an OpInfo case key (name, dtype, non-contiguous): ``addmm-float32-noncontiguous``."""
    name, dtype, noncontiguous = key
    return f"{name}-{str(dtype).removeprefix('torch.')}" + ("-noncontiguous" if noncontiguous else "")


def all_cases(dtype: torch.dtype = DTYPE) -> list[Case]:
    """Every OpInfo that supports ``dtype`` (float32 by default) on CPU."""
    return [Case(op) for op in op_db if dtype in op.supported_dtypes("cpu")]


def _to_cpu(x: Any) -> Any:
    """A CPU copy of an openreg sample argument that keeps views as views of a copied base.

    Samples such as as_strided's partial views read storage outside the view itself, so the whole
    base moves, and the view is rebuilt on it with the same sizes, strides and offset.
    """
    if not isinstance(x, torch.Tensor) or x.device.type != "openreg":
        return x
    if x._is_view() and x._base is not None:
        base = x._base.detach().cpu()
        y = base.as_strided(x.size(), x.stride(), x.storage_offset())
        # A lazy conjugate or negative view (x.conj(), torch._neg_view) is a view whose bit its
        # base does not have: rebuilt on the base alone, it would read unconjugated values.
        if y.is_conj() != x.is_conj():
            y = y.conj()
        if y.is_neg() != x.is_neg():
            y = torch._neg_view(y)
    else:
        y = x.detach().cpu()
    return y.requires_grad_(x.requires_grad) if x.is_leaf and x.requires_grad else y


def _leaves(x: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor) and t.requires_grad and t.is_leaf]


def _compare(
    cause: str, actual: Any, expected: Any, values: bool = True, tol: tuple[float, float] | None = None
) -> None:
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
            if not values:
                if a.shape != e.shape:
                    raise Mismatch(cause, f"shape {tuple(a.shape)} vs {tuple(e.shape)}")
                continue
            try:
                atol, rtol = tol if tol else (None, None)
                torch.testing.assert_close(
                    a.cpu(), e, atol=atol, rtol=rtol, equal_nan=True, check_device=False, check_stride=False
                )
            except AssertionError as err:
                raise Mismatch(cause, str(err).splitlines()[0]) from None
        elif isinstance(e, float) and e != e:  # NaN
            continue
        elif a != e:
            raise Mismatch(cause, f"{a!r} vs {e!r}")


def _samples(case: Case, dtype: torch.dtype, requires_grad: bool, noncontiguous: bool) -> Iterator[Any]:
    # Built on openreg by the OpInfo's own code, as PyTorch's device tests do; arguments an op needs
    # on the CPU (tensor_split's sections, say) are created there by that code.
    for sample in case.op.sample_inputs("openreg", dtype, requires_grad=requires_grad):
        # noncontiguous() interleaves each tensor with poison values (NaN, True or 12) and keeps
        # the odd elements: a view with stride 2 of a twice larger base.
        yield sample.noncontiguous() if noncontiguous else sample


def _differentiable(outputs: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(outputs)[0] if isinstance(t, torch.Tensor) and t.grad_fn is not None]


def _loss(outputs: list[torch.Tensor]) -> torch.Tensor:
    return sum((torch.view_as_real(t) if t.is_complex() else t).sum() for t in outputs)


def check(case: Case, max_samples: int = 20, dtype: torch.dtype = DTYPE, noncontiguous: bool = False) -> int:
    """Compare forward (and backward when supported) for up to ``max_samples`` samples.

    ``dtype`` is the samples' dtype (float32 by default); with ``noncontiguous`` every tensor
    argument is first made non-contiguous. Returns the number of samples compared; raises
    :class:`Mismatch` on the first difference and lets an exception raised only on openreg propagate.
    """
    with warnings.catch_warnings():
        # PyTorch's notice on building its first CSR tensor, on CPU or openreg alike.
        warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta state")
        return _check(case, max_samples, dtype, noncontiguous)


def _check(case: Case, max_samples: int, dtype: torch.dtype, noncontiguous: bool) -> int:
    op = case.op
    grad = op.supports_autograd and (dtype.is_floating_point or dtype.is_complex)
    compared = 0
    for sample in _samples(case, dtype, requires_grad=grad, noncontiguous=noncontiguous):
        if compared >= max_samples:
            break
        cpu_input = tree_map(_to_cpu, sample.input)
        cpu_args = tree_map(_to_cpu, sample.args)
        cpu_kwargs = tree_map(_to_cpu, sample.kwargs)
        torch.manual_seed(0)
        try:
            expected = op(cpu_input, *cpu_args, **cpu_kwargs)
        except Exception:  # a sample CPU itself rejects says nothing about openreg
            continue
        torch.manual_seed(0)
        actual = op(sample.input, *sample.args, **sample.kwargs)
        tol = TOLERANCE.get(case.id) if dtype == DTYPE else DTYPE_TOLERANCE.get((case.id, dtype))
        # Random ops draw alike: openreg's generator is seeded with the CPU's and draws as it does,
        # attention's dropout included (Note [Attention dropout as the CPU draws it]).
        values = op.name not in UNINITIALIZED
        _compare("forward", actual, expected, values=values, tol=tol)
        compared += 1
        if not grad:
            continue
        cpu_leaves = _leaves((cpu_input, cpu_args, cpu_kwargs))
        dev_leaves = _leaves((sample.input, sample.args, sample.kwargs))
        e_out = _differentiable(expected)
        a_out = _differentiable(actual)
        if not cpu_leaves or not e_out or len(a_out) != len(e_out):
            continue
        try:
            e_grads = torch.autograd.grad(_loss(e_out), cpu_leaves, allow_unused=True)
        except Exception:  # no CPU reference for this backward
            continue
        a_grads = torch.autograd.grad(_loss(a_out), dev_leaves, allow_unused=True)
        _compare("backward", list(a_grads), list(e_grads), values=values, tol=tol)
    return compared
