"""Native matrix products (csrc/aten/native/LinearAlgebra.cpp) give CPU's results and errors.

The comparisons run the openreg side under the fallback policy "error": the CPU fallback raises
NotImplementedError there, so a passing comparison also proves that no data moved.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import openreg_lab
from tests.support.native_checks import assert_matches, check, check_error

NATIVE = ["mm", "mm.out", "addmm", "addmm.out", "addmm_", "bmm", "bmm.out", "dot", "mv", "mv.out"]

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def make(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(
            shape, generator=g, dtype=torch.complex128 if dtype.is_complex else torch.float64
        ).to(dtype)
    return torch.randint(-9, 9, shape, generator=g, dtype=dtype)


def native(op: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1")


@pytest.mark.parametrize("op", NATIVE)
def test_registered_natively_for_privateuse1(op):
    assert native(f"aten::{op}")


# --- mm ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
def test_mm(dtype):
    a, b = make((5, 7), dtype), make((7, 3), dtype, seed=1)
    check(torch.mm, a, b)
    check(lambda x, y: x.t().mm(y.t()), a.t().contiguous(), b.t().contiguous())
    check(lambda x, y: x[:, ::2].mm(y[::2]), a, b)
    check(lambda x, y: x.mm(y[:, :1].expand(7, 4)), a, b)


@pytest.mark.parametrize(("n", "k", "m"), [(0, 3, 4), (3, 0, 4), (3, 4, 0)])
def test_mm_empty(n, k, m):
    out = check(torch.mm, make((n, k)), make((k, m)))
    assert out.shape == (n, m)


def test_mm_out():
    a, b = make((5, 7)), make((7, 3), seed=1)
    with openreg_lab.fallback_policy("error"):
        out = torch.empty(0, device="openreg")
        result = torch.mm(a.to("openreg"), b.to("openreg"), out=out)
        assert result is out
        base = torch.zeros(3, 5, device="openreg")
        torch.mm(a.to("openreg"), b.to("openreg"), out=base.t())  # non-contiguous out
    assert_matches(out, a @ b)
    assert_matches(base.t(), a @ b)
    check_error(lambda x, y: torch.mm(x, y, out=torch.empty(0, dtype=torch.float64, device=x.device)), a, b)


def test_mm_errors():
    check_error(torch.mm, make((3,)), make((3, 3)))
    check_error(torch.mm, make((3, 3)), make((3,)))
    check_error(torch.mm, make((2, 3)), make((4, 5)))
    check_error(torch.mm, make((2, 3)), make((3, 5), torch.float64))


# --- addmm ------------------------------------------------------------------------


@pytest.mark.parametrize("bias_shape", [(4,), (1, 4), (3, 1), (), (3, 4)])
@pytest.mark.parametrize(("beta", "alpha"), [(1, 1), (0.5, 2.0), (0, 1), (2, 0)])
def test_addmm_broadcasts_the_bias(bias_shape, beta, alpha):
    bias, a, b = make(bias_shape, seed=2), make((3, 5)), make((5, 4), seed=1)
    check(lambda s, x, y: torch.addmm(s, x, y, beta=beta, alpha=alpha), bias, a, b)


@pytest.mark.parametrize("dtype", FLOATS)
def test_addmm_dtypes(dtype):
    bias, a, b = make((4,), dtype, seed=2), make((3, 5), dtype), make((5, 4), dtype, seed=1)
    check(torch.addmm, bias, a, b)
    check(lambda s, x, y: torch.addmm(s, x.t().contiguous().t(), y.t().contiguous().t()), bias, a, b)


def test_addmm_with_beta_zero_ignores_nan_in_self():
    bias = torch.full((3, 4), math.nan)
    out = check(lambda s, x, y: torch.addmm(s, x, y, beta=0), bias, make((3, 5)), make((5, 4)))
    assert not out.isnan().any()


def test_addmm_out_and_in_place():
    bias, a, b = make((3, 4), seed=2), make((3, 5)), make((5, 4), seed=1)
    expected = torch.addmm(bias, a, b, beta=0.5, alpha=3)
    with openreg_lab.fallback_policy("error"):
        out = torch.empty(0, device="openreg")
        result = torch.addmm(bias.to("openreg")[0], a.to("openreg"), b.to("openreg"), out=out)
        assert result is out
        self = bias.to("openreg")
        pointer = self.data_ptr()
        result = self.addmm_(a.to("openreg"), b.to("openreg"), beta=0.5, alpha=3)
        assert result is self and self.data_ptr() == pointer
    assert_matches(out, torch.addmm(bias[0], a, b))
    assert_matches(self, expected)
    # In place on a non-contiguous self.
    host = bias.t().contiguous()
    dev = host.to("openreg")
    expected = host.t().addmm_(a, b)
    with openreg_lab.fallback_policy("error"):
        dev.t().addmm_(a.to("openreg"), b.to("openreg"))
    assert_matches(dev.t(), expected)


def test_addmm_errors():
    a, b = make((2, 3)), make((3, 4))
    check_error(torch.addmm, make((3,)), a, b)
    check_error(torch.addmm, make((2, 3, 4)), a, b)
    check_error(torch.addmm, make((4,), torch.float64), a, b)
    check_error(torch.addmm, make((2, 4)), a.double(), b)
    check_error(torch.addmm, make((2, 4)), make((2,)), b)
    check_error(torch.addmm, make((2, 4)), a, make((4, 4)))
    check_error(lambda s, x, y: s.addmm_(x, y), make((4,)), a, b)
    check_error(lambda s, x, y: s.addmm_(x, y), make((1, 4)), a, b)
    check_error(
        lambda s, x, y: torch.addmm(s, x, y, out=torch.empty(0, dtype=torch.float64, device=s.device)),
        make((4,)),
        a,
        b,
    )


# --- bmm --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
def test_bmm(dtype):
    a, b = make((3, 4, 5), dtype), make((3, 5, 2), dtype, seed=1)
    check(torch.bmm, a, b)
    check(
        lambda x, y: x.transpose(1, 2).bmm(y.transpose(1, 2)),
        a.transpose(1, 2).contiguous(),
        b.transpose(1, 2).contiguous(),
    )
    check(lambda x, y: x[::2].bmm(y[::2]), a, b)


def test_bmm_empty_and_out():
    check(torch.bmm, make((0, 4, 5)), make((0, 5, 2)))
    check(torch.bmm, make((2, 4, 0)), make((2, 0, 2)))
    a, b = make((3, 4, 5)), make((3, 5, 2), seed=1)
    with openreg_lab.fallback_policy("error"):
        out = torch.empty(0, device="openreg")
        result = torch.bmm(a.to("openreg"), b.to("openreg"), out=out)
        assert result is out
    assert_matches(out, torch.bmm(a, b))


def test_bmm_errors():
    check_error(torch.bmm, make((2, 3)), make((2, 3, 4)))
    check_error(torch.bmm, make((2, 2, 3)), make((2, 3)))
    check_error(torch.bmm, make((2, 2, 3)), make((3, 3, 4)))
    check_error(torch.bmm, make((2, 2, 3)), make((2, 4, 4)))
    check_error(torch.bmm, make((2, 2, 3)), make((2, 3, 4), torch.float64))
    check_error(
        lambda x, y: torch.bmm(x, y, out=torch.empty(0, dtype=torch.float64, device=x.device)),
        make((2, 2, 3)),
        make((2, 3, 4)),
    )


# --- dot and mv -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
def test_dot_and_mv(dtype):
    v, w, m = make((6,), dtype), make((6,), dtype, seed=1), make((4, 6), dtype, seed=2)
    check(torch.dot, v, w)
    check(lambda x, y: x[::2].dot(y[1::2]), v, w)
    check(torch.mv, m, v)
    check(lambda a, x: a.t().mv(x[:4]), m, v)
    check(torch.dot, make((0,), dtype), make((0,), dtype))


def test_mv_out():
    m, v = make((4, 6)), make((6,))
    with openreg_lab.fallback_policy("error"):
        out = torch.empty(0, device="openreg")
        result = torch.mv(m.to("openreg"), v.to("openreg"), out=out)
        assert result is out
    assert_matches(out, m @ v)


def test_dot_and_mv_errors():
    check_error(torch.dot, make((3,)), make((4,)))
    check_error(torch.dot, make((3,)), make((3,), torch.float64))
    check_error(torch.dot, make((3, 1)), make((3,)))
    check_error(torch.mv, make((3, 2)), make((3,)))
    check_error(torch.mv, make((3, 2)), make((2,), torch.float64))
    check_error(torch.mv, make((3,)), make((3,)))
    check_error(torch.mv, make((3, 3)), make((3, 1)))


# --- devices and dtypes -----------------------------------------------------------


def test_tensors_on_two_devices_are_refused():
    a = make((2, 3)).to("openreg")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.mm(a, make((3, 4)))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.addmm(make((4,)), a, make((3, 4)).to("openreg"))
    if torch.openreg.device_count() > 1:
        with pytest.raises(RuntimeError, match="openreg:0 and openreg:1"):
            torch.bmm(a[None], make((1, 3, 4)).to("openreg:1"))


def test_result_is_on_the_operands_device():
    if torch.openreg.device_count() < 2:
        pytest.skip("needs two openreg devices")
    a, b = make((2, 3)), make((3, 4))
    with openreg_lab.fallback_policy("error"):
        out = torch.mm(a.to("openreg:1"), b.to("openreg:1"))
    assert out.device == torch.device("openreg:1")
    assert_matches(out, a @ b)


@pytest.mark.parametrize(
    ("fn", "shapes"),
    [
        (torch.mm, [(2, 3), (3, 4)]),
        (torch.addmm, [(4,), (2, 3), (3, 4)]),
        (torch.bmm, [(2, 2, 3), (2, 3, 4)]),
        (torch.dot, [(3,), (3,)]),
        (torch.mv, [(2, 3), (3,)]),
    ],
)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.complex64])
def test_other_dtypes_go_through_the_fallback(fn, shapes, dtype):
    args = [make(s, dtype, seed=i) for i, s in enumerate(shapes)]
    expected = fn(*args)
    dev = [a.to("openreg") for a in args]
    with (
        openreg_lab.fallback_policy("error"),
        pytest.raises(NotImplementedError, match="has no openreg kernel"),
    ):
        fn(*dev)
    assert_matches(fn(*dev), expected)


# --- matmul and linear, forward and backward --------------------------------------

# The backward of dot and mv (matmul with a 1-D operand) multiplies by the other operand: it needs a
# native aten::mul, from the elementwise family.
needs_mul = pytest.mark.skipif(
    not native("aten::mul.Tensor"), reason="the backward of dot/mv calls aten::mul (elementwise family)"
)

MATMUL_SHAPES = [
    ((4,), (4, 5)),
    ((3, 4), (4, 5)),
    ((3, 4), (2, 4, 5)),
    ((3, 4), (1, 4, 5)),
    ((2, 3, 4), (4, 5)),
    ((2, 3, 4), (2, 4, 5)),
    ((2, 3, 4), (1, 4, 5)),
    pytest.param((4,), (4,), marks=needs_mul),
    pytest.param((3, 4), (4,), marks=needs_mul),
    pytest.param((2, 3, 4), (4,), marks=needs_mul),
    pytest.param((4,), (2, 4, 5), marks=needs_mul),
]


def forward_backward(fn, *args):
    """fn(*args) and the gradients of its sum with respect to every argument."""
    args = [a.detach().requires_grad_() for a in args]
    out = fn(*args)
    out.sum().backward()
    return (out.detach(), *[a.grad for a in args])


def check_forward_backward(fn, *args):
    expected = forward_backward(fn, *args)
    dev_args = [a.to("openreg") for a in args]
    with openreg_lab.fallback_policy("error"):
        actual = forward_backward(fn, *dev_args)
    assert_matches(actual, expected)


@pytest.mark.parametrize(("a", "b"), MATMUL_SHAPES)
def test_matmul_forward_and_backward_are_native(a, b):
    check_forward_backward(torch.matmul, make(a), make(b, seed=1))


@pytest.mark.parametrize("shape", [(4,), (3, 4), (2, 3, 4)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_forward_and_backward_are_native(shape, bias):
    x, w, b = make(shape), make((5, 4), seed=1), make((5,), seed=2)
    if bias:
        check_forward_backward(F.linear, x, w, b)
    else:
        check_forward_backward(F.linear, x, w)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_linear_in_other_float_dtypes(dtype):
    x, w, b = make((6, 4), dtype), make((5, 4), dtype, seed=1), make((5,), dtype, seed=2)
    check(F.linear, x, w, b)
    check(torch.matmul, make((2, 3, 4), dtype), make((2, 4, 5), dtype, seed=1))
