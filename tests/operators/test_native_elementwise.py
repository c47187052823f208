"""Native elementwise kernels (csrc/aten/native/: Binary, Unary, Activation, Ternary, Factory) against CPU.

Every openreg call below runs under the fallback policy "error": a kernel that moved its data through
the CPU fallback would raise instead of passing.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close, make_tensor

import openreg_lab

DEV = "openreg"
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]


def dev(x):
    """A CPU tensor's copy on openreg; 0-dim tensors stay on the CPU (CPU scalars), others pass through."""
    if isinstance(x, torch.Tensor) and x.dim() > 0:
        return x.to(DEV)
    return x


def compare(fn, *args, exact=False, rtol=None, atol=None):
    """fn on CPU tensors vs fn on their openreg copies: values, dtype, shape; no fallback allowed."""
    expected = fn(*args)
    with openreg_lab.fallback_policy("error"):
        actual = fn(*[dev(a) for a in args])
    assert actual.device.type == DEV
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    if exact:
        assert_close(actual.cpu(), expected, rtol=0, atol=0, equal_nan=True)
    else:
        assert_close(actual.cpu(), expected, rtol=rtol, atol=atol, equal_nan=True)
    return actual


def values(shape, dtype, *, low=None, high=None, nonzero=False, seed=0):
    torch.manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype.is_floating_point:
        low = -8 if low is None else low
        high = 8 if high is None else high
    return make_tensor(shape, dtype=dtype, device="cpu", low=low, high=high, exclude_zero=nonzero)


def native(op):
    return torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{op}", "PrivateUse1")


# --- binary arithmetic -------------------------------------------------------------------

BINARY = {
    "add": (lambda a, b: torch.add(a, b), ["add.Tensor", "add_.Tensor", "add.out"]),
    "add_alpha": (lambda a, b: torch.add(a, b, alpha=3), ["add.Tensor"]),
    "sub": (lambda a, b: torch.sub(a, b, alpha=2), ["sub.Tensor", "sub_.Tensor", "sub.out"]),
    "rsub": (lambda a, b: torch.rsub(a, b, alpha=2), ["rsub.Tensor"]),
    "mul": (torch.mul, ["mul.Tensor", "mul_.Tensor", "mul.out"]),
    "div": (torch.div, ["div.Tensor", "div_.Tensor", "div.out"]),
    "div_trunc": (
        lambda a, b: torch.div(a, b, rounding_mode="trunc"),
        ["div.Tensor_mode", "div_.Tensor_mode", "div.out_mode"],
    ),
    "div_floor": (lambda a, b: torch.div(a, b, rounding_mode="floor"), ["div.Tensor_mode"]),
    "maximum": (torch.maximum, ["maximum", "maximum.out"]),
    "minimum": (torch.minimum, ["minimum", "minimum.out"]),
    "pow": (torch.pow, ["pow.Tensor_Tensor", "pow_.Tensor", "pow.Tensor_Tensor_out"]),
}
DIVIDES = {"div", "div_trunc", "div_floor"}


def binary_inputs(name, dtype, shape_a=(6, 7), shape_b=(6, 7)):
    if name == "pow":
        if dtype.is_floating_point:
            return values(shape_a, dtype, low=0.5, high=3), values(shape_b, dtype, low=-2, high=2, seed=1)
        return values(shape_a, dtype, low=-3, high=4), values(shape_b, dtype, low=0, high=4, seed=1)
    return values(shape_a, dtype), values(shape_b, dtype, nonzero=name in DIVIDES, seed=1)


def binary_dtypes(name):
    if name in ("add", "add_alpha", "mul", "maximum", "minimum"):
        return [*FLOATS, *INTS, torch.bool]
    return FLOATS + INTS


@pytest.mark.parametrize("name", BINARY)
def test_binary_registered_natively(name):
    for op in BINARY[name][1]:
        assert native(op), op


@pytest.mark.parametrize(("name", "dtype"), [(n, d) for n in BINARY for d in binary_dtypes(n)], ids=str)
def test_binary_matches_cpu(name, dtype):
    fn = BINARY[name][0]
    tol = {}
    if name == "add_alpha" and dtype in (torch.float16, torch.bfloat16):
        # CPU rounds alpha * b (up to 24 here) to 16 bits in its scalar loop but not in its vector
        # loop (fma), so its own results depend on the layout by one ulp of alpha * b.
        tol = {"rtol": 0, "atol": 2e-2 if dtype == torch.float16 else 0.13}
    a, b = binary_inputs(name, dtype)
    compare(fn, a, b, **tol)  # same shape, contiguous: the fast path
    a, b = binary_inputs(name, dtype, (6, 7), (7,))
    compare(fn, a, b, **tol)  # broadcasting
    a, b = binary_inputs(name, dtype, (6, 1), (1, 7))
    compare(fn, a, b, **tol)  # both sides broadcast
    a, b = binary_inputs(name, dtype, (7, 12), (12, 7))
    compare(lambda x, y: fn(x[:, ::2], y.t()[:, 1::2]), a, b, **tol)  # non-contiguous operands


@pytest.mark.parametrize("dtype", [*FLOATS, torch.int64, torch.int8], ids=str)
@pytest.mark.parametrize("name", BINARY)
def test_binary_with_cpu_scalar(name, dtype):
    fn = BINARY[name][0]
    a, _ = binary_inputs(name, dtype)
    scalar = torch.tensor(3 if name == "pow" or not dtype.is_floating_point else 2.5)
    compare(lambda x: fn(x, scalar), a)  # scalar folded into the kernel
    compare(lambda x: fn(scalar, x), a.abs() + 1 if name in DIVIDES else a)  # scalar first
    if name not in ("maximum", "minimum"):  # they take no number
        compare(lambda x: fn(x, 2), a)  # Python number


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_scalar_precision_matches_cpu_bit_for_bit(dtype):
    # ATen's CPU kernels round a scalar to the tensor's dtype for add/sub/comparisons, and keep
    # it in float (opmath) for mul/div; the results differ in the last bit for many elements.
    x = values((4096,), dtype, seed=3)
    for fn in (
        lambda t: t + 0.1,
        lambda t: t - 0.1,
        lambda t: t * 0.1,
        lambda t: t / 0.1,
        lambda t: 1.3 - t,
        lambda t: t > 0.1,
        lambda t: t * torch.tensor(0.1),
        lambda t: torch.tensor(0.1) * t,
    ):
        compare(fn, x, exact=True)


def test_in_place_keeps_storage_and_matches_cpu():
    x, y = values((6, 7), torch.float32), values((7,), torch.float32, seed=1)
    for method in ("add_", "sub_", "mul_", "div_", "pow_"):
        expected = getattr(x.abs().clone(), method)(y)
        d = x.abs().to(DEV)
        ptr = d.data_ptr()
        with openreg_lab.fallback_policy("error"):
            r = getattr(d, method)(y.to(DEV))
        assert r is d and d.data_ptr() == ptr
        assert_close(d.cpu(), expected)
    # in-place on a non-contiguous view writes through to the base
    base = values((6, 8), torch.float32)
    expected = base.clone()
    expected[:, ::2].mul_(2).add_(1, alpha=3)
    d = base.to(DEV)
    with openreg_lab.fallback_policy("error"):
        d[:, ::2].mul_(2).add_(1, alpha=3)
    assert_close(d.cpu(), expected)


def test_in_place_type_rules():
    i = torch.arange(6, device=DEV)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        i.add_(torch.ones(6, device=DEV))
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        i.div_(2)
    with pytest.raises(
        RuntimeError, match=r"output with shape \[3\] doesn't match the broadcast shape \[2, 3\]"
    ):
        torch.zeros(3, device=DEV).add_(torch.zeros(2, 3, device=DEV))
    # a wider dtype is computed, then cast into self, as on CPU
    f32 = values((5,), torch.float32)
    f64 = values((5,), torch.float64, seed=1)
    expected = f32.clone().add_(f64)
    d = f32.to(DEV)
    with openreg_lab.fallback_policy("error"):
        d.add_(f64.to(DEV))
    assert d.dtype == torch.float32
    assert_close(d.cpu(), expected)


def test_out_variants_resize_and_cast():
    a, b = values((4, 5), torch.float32), values((5,), torch.float32, seed=1)
    for fn in (torch.add, torch.sub, torch.mul, torch.div, torch.maximum, torch.minimum, torch.pow, torch.lt):
        expected = fn(a.abs(), b)
        out = torch.empty(0, device=DEV, dtype=expected.dtype)
        with openreg_lab.fallback_policy("error"):
            r = fn(a.abs().to(DEV), b.to(DEV), out=out)
        assert r is out and out.shape == (4, 5)
        assert_close(out.cpu(), expected)
    # an out= of another dtype gets the result cast, like on CPU
    out = torch.empty(4, 5, device=DEV, dtype=torch.float64)
    with openreg_lab.fallback_policy("error"):
        torch.add(a.to(DEV), b.to(DEV), out=out)
    assert out.dtype == torch.float64
    assert_close(out.cpu(), (a + b).double())
    out = torch.empty(4, 5, device=DEV, dtype=torch.float32)
    with openreg_lab.fallback_policy("error"):
        torch.lt(a.to(DEV), b.to(DEV), out=out)
    assert_close(out.cpu(), (a < b).float())
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        torch.add(a.to(DEV), b.to(DEV), out=torch.empty(0, device=DEV, dtype=torch.long))
    # resizing a non-empty out= warns, as on CPU
    out = torch.empty(3, device=DEV)
    with pytest.warns(UserWarning, match="An output with one or more elements was resized"):
        torch.mul(a.to(DEV), b.to(DEV), out=out)
    assert out.shape == (4, 5)


def test_type_promotion():
    i = torch.arange(6, dtype=torch.int32)
    f = values((6,), torch.float16)
    for fn in (
        lambda x, y: x + y,
        lambda x, y: x * 2.5,
        lambda x, y: x / 2,
        lambda x, y: x + torch.tensor(2.5, dtype=torch.float64),
        lambda x, y: y + torch.tensor(2.5, dtype=torch.float64),
        lambda x, y: y * x,
        lambda x, y: x**2.5,
        lambda x, y: torch.maximum(x, y),
        lambda x, y: x > y,
        lambda x, y: x == 3.0,
    ):
        compare(fn, i, f)
    u = torch.tensor([1, 2, 200], dtype=torch.uint8)
    b = torch.tensor([True, False, True])
    compare(lambda x, y: x + y, u, b)
    compare(lambda x, y: y + y, u, b)
    compare(lambda x, y: y * 3, u, b)


def test_narrow_integers_wrap_like_cpu():
    # uint8/int8/int16 are computed in int64 and narrowed; out-of-range scalars must still wrap first.
    i8 = torch.tensor([-128, -7, 5, 100, 127], dtype=torch.int8)
    u8 = torch.tensor([0, 3, 200, 255, 17], dtype=torch.uint8)
    for x in (i8, u8):
        for fn in (
            lambda t: t + 100,
            lambda t: t * 3,
            lambda t: t - 300,
            lambda t: torch.div(t, 300, rounding_mode="floor"),
            lambda t: torch.div(t, torch.tensor(-3), rounding_mode="trunc"),
            lambda t: t < 300,
            lambda t: torch.maximum(t, torch.tensor(300)),
            lambda t: t**3,
            lambda t: torch.clamp(t, -3, 50),
            lambda t: -t,
            lambda t: t.abs(),
        ):
            compare(fn, x, exact=True)


def test_integer_division_rules():
    a = torch.tensor([7, -7, 7, -7, 0], dtype=torch.int64)
    b = torch.tensor([2, 2, -2, -2, 3], dtype=torch.int64)
    for mode in ("trunc", "floor"):
        compare(lambda x, y: torch.div(x, y, rounding_mode=mode), a, b, exact=True)  # noqa: B023
    compare(lambda x, y: x / y, a, b)  # true division promotes to float
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.div(a.to(DEV), torch.zeros(5, dtype=torch.int64, device=DEV), rounding_mode="floor")
    with pytest.raises(
        RuntimeError, match="div expected rounding_mode to be one of None, 'trunc', or 'floor'"
    ):
        torch.div(a.to(DEV), b.to(DEV), rounding_mode="round")
    f = torch.tensor([5.0, -5.0, 0.0, -7.5])
    z = torch.tensor([0.0, 0.0, 0.0, 2.0])
    for mode in ("trunc", "floor"):
        compare(lambda x, y: torch.div(x, y, rounding_mode=mode), f, z)  # noqa: B023


def test_bool_rules():
    b = torch.tensor([True, False, True])
    with pytest.raises(
        RuntimeError, match="Subtraction, the `-` operator, with two bool tensors is not supported"
    ):
        b.to(DEV) - b.to(DEV)
    with pytest.raises(RuntimeError, match="Boolean alpha only supported for Boolean results"):
        torch.add(torch.ones(3, device=DEV), torch.ones(3, device=DEV), alpha=True)
    with pytest.raises(
        RuntimeError, match="For integral input tensors, argument alpha must not be a floating"
    ):
        torch.add(torch.ones(3, device=DEV, dtype=torch.long), 1, alpha=0.5)
    with pytest.raises(RuntimeError, match="Negation, the `-` operator, on a bool tensor is not supported"):
        -b.to(DEV)


def test_pow_scalar_exponents():
    x = values((64,), torch.float32, low=0.1, high=4)
    for e in (0, 1, 2, 3, 0.5, -0.5, -1, -2, 2.5, -1.7):
        compare(lambda t: t**e, x)  # noqa: B023
        compare(lambda t: t.clone().pow_(e), x)  # noqa: B023
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        compare(lambda t: t**0.5, x.to(dtype))
        compare(lambda t: t**-1.3, x.to(dtype))
    i = torch.arange(-3, 4)
    compare(lambda t: t**3, i, exact=True)
    compare(lambda t: t**0, i, exact=True)
    compare(lambda t: t**0.5, i.abs())  # float exponent promotes
    with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
        i.to(DEV) ** -1
    compare(lambda t, e: t.pow(e), i, torch.tensor([-1, -2, 0, 1, 2, 3, 1]), exact=True)


COMPARISONS = [torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge]


@pytest.mark.parametrize("fn", COMPARISONS, ids=lambda f: f.__name__)
def test_comparisons(fn):
    name = fn.__name__
    for overload in ("Tensor", "Scalar", "Tensor_out", "Scalar_out"):
        assert native(f"{name}.{overload}")
    nan = float("nan")
    a = torch.tensor([1.0, 2.0, nan, -0.0, 3.0, nan])
    b = torch.tensor([1.0, 3.0, 1.0, 0.0, 2.0, nan])
    compare(fn, a, b, exact=True)
    compare(lambda x: fn(x, 2.0), a, exact=True)
    compare(lambda x: fn(x, nan), a, exact=True)
    for dtype in [*FLOATS, *INTS, torch.bool]:
        x, y = values((5, 6), dtype), values((6,), dtype, seed=1)
        r = compare(fn, x, y, exact=True)
        assert r.dtype == torch.bool
        compare(lambda t: fn(t.t(), 1), x, exact=True)
    out = torch.empty(0, dtype=torch.bool, device=DEV)
    with openreg_lab.fallback_policy("error"):
        fn(a.to(DEV), 2.0, out=out)
    assert torch.equal(out.cpu(), fn(a, 2.0))


def test_maximum_minimum_propagate_nan():
    nan = float("nan")
    a = torch.tensor([1.0, nan, 3.0, nan, -1.0])
    b = torch.tensor([nan, 2.0, 1.0, nan, -2.0])
    compare(torch.maximum, a, b, exact=True)
    compare(torch.minimum, a, b, exact=True)


def test_large_tensors_split_over_threads():
    # above at::internal::GRAIN_SIZE (32768), loops run through at::parallel_for
    a, b = values((300, 1000), torch.float32), values((300, 1000), torch.float32, seed=1)
    compare(torch.add, a, b, exact=True)
    compare(lambda x, y: x.t() * y.t(), a, b, exact=True)
    compare(lambda x: x * 0.5 + 1, a, exact=True)
    compare(torch.exp, a)
    compare(lambda x, y: torch.where(x > 0, x, y), a, b, exact=True)


def test_unsupported_dtype_falls_back_with_the_right_answer():
    z = torch.randn(4, 3, dtype=torch.complex64)
    w = torch.randn(4, 3, dtype=torch.complex64)
    for fn in (torch.add, torch.mul, torch.sub, torch.div, torch.eq):
        expected = fn(z, w)
        actual = fn(z.to(DEV), w.to(DEV))  # policy "allow": the CPU fallback
        assert actual.device.type == DEV
        assert_close(actual.cpu(), expected)
        with openreg_lab.fallback_policy("error"), pytest.raises(NotImplementedError, match="fallback"):
            fn(z.to(DEV), w.to(DEV))
    for fn in (torch.exp, torch.sqrt, torch.neg, torch.sigmoid, torch.tanh):
        assert_close(fn(z.to(DEV)).cpu(), fn(z))
    # complex128 has 16-byte elements: where falls back; complex64 (8 bytes) stays native
    c = torch.randn(5, dtype=torch.complex128)
    cond = torch.tensor([True, False, True, False, True])
    assert_close(torch.where(cond.to(DEV), c.to(DEV), 0).cpu(), torch.where(cond, c, 0))
    compare(lambda m, x, y: torch.where(m, x, y), cond, z[0].repeat(2)[:5], w[0].repeat(2)[:5], exact=True)


def test_devices_must_match():
    x = torch.ones(3, device=DEV)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        x + torch.ones(3)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        x + torch.ones(3, device="openreg:1")
    # a 0-dim CPU tensor is a scalar, as on CUDA
    compare(lambda t: t + torch.tensor(1.5), torch.ones(3))
    y = torch.ones(3, device="openreg:1")
    with openreg_lab.fallback_policy("error"):
        r = y * 2
    assert r.device == torch.device("openreg", 1)


# --- unary ---------------------------------------------------------------------------------

FLOATING_UNARY = {
    "exp": (torch.exp, {}),
    "log": (torch.log, {"low": 0.01}),
    "sqrt": (torch.sqrt, {"low": 0}),
    "rsqrt": (torch.rsqrt, {"low": 0.01}),
    "sin": (torch.sin, {}),
    "cos": (torch.cos, {}),
    "reciprocal": (torch.reciprocal, {"nonzero": True}),
}
KEEP_UNARY = {"neg": torch.neg, "abs": torch.abs, "sign": torch.sign}


@pytest.mark.parametrize("name", [*FLOATING_UNARY, *KEEP_UNARY])
def test_unary_registered_natively(name):
    for op in (name, f"{name}_", f"{name}.out"):
        assert native(op), op


@pytest.mark.parametrize("dtype", [*FLOATS, *INTS], ids=str)
@pytest.mark.parametrize("name", FLOATING_UNARY)
def test_floating_unary(name, dtype):
    fn, kwargs = FLOATING_UNARY[name]
    x = values(
        (6, 9),
        dtype,
        low=kwargs.get("low", -4 if dtype.is_floating_point else None),
        high=5,
        nonzero=kwargs.get("nonzero", False),
    )
    if not dtype.is_floating_point and kwargs.get("low") is not None:
        x = x.abs() + 1
    r = compare(fn, x)
    assert r.dtype == (dtype if dtype.is_floating_point else torch.float32)  # integers promote
    compare(lambda t: fn(t.t()[::2]), x)
    if dtype.is_floating_point:
        expected = fn(x)
        d = x.to(DEV)
        ptr = d.data_ptr()
        with openreg_lab.fallback_policy("error"):
            getattr(d, f"{name}_")()
        assert d.data_ptr() == ptr
        assert_close(d.cpu(), expected, equal_nan=True)
        out = torch.empty(0, dtype=dtype, device=DEV)
        with openreg_lab.fallback_policy("error"):
            fn(x.to(DEV), out=out)
        assert_close(out.cpu(), expected, equal_nan=True)
    else:
        with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
            getattr(x.to(DEV), f"{name}_")()


@pytest.mark.parametrize("dtype", [*FLOATS, *INTS], ids=str)
@pytest.mark.parametrize("name", KEEP_UNARY)
def test_dtype_keeping_unary(name, dtype):
    fn = KEEP_UNARY[name]
    x = values((6, 9), dtype)
    if dtype.is_floating_point:
        x[0, :3] = torch.tensor([float("nan"), -0.0, 0.0])
    r = compare(fn, x, exact=True)
    assert r.dtype == dtype
    compare(lambda t: fn(t.t()), x, exact=True)
    compare(lambda t: getattr(t.clone(), f"{name}_")(), x, exact=True)
    compare(lambda t: fn(t, out=torch.empty(0, dtype=dtype, device=t.device)), x, exact=True)


def test_sign_of_bool_and_abs_of_bool():
    b = torch.tensor([True, False])
    compare(torch.sign, b, exact=True)
    with pytest.raises(NotImplementedError):
        torch.abs(b)  # not defined on CPU either
    with openreg_lab.fallback_policy("error"), pytest.raises(NotImplementedError):
        torch.abs(b.to(DEV))  # goes to the fallback, which would raise the CPU's error


@pytest.mark.parametrize("dtype", [*FLOATS, *INTS], ids=str)
def test_clamp(dtype):
    for op in ("clamp", "clamp_", "clamp.out", "clamp_min", "clamp_min_", "clamp_min.out", "clamp_max"):
        assert native(op), op
    x = values((7, 8), dtype, low=-20 if dtype != torch.uint8 else 0, high=20)
    compare(lambda t: torch.clamp(t, -3, 4), x, exact=True)
    compare(lambda t: torch.clamp(t, min=2), x, exact=True)
    compare(lambda t: torch.clamp(t, max=5), x, exact=True)
    compare(lambda t: torch.clamp(t.t(), 5, 2), x, exact=True)  # min > max: max wins
    compare(lambda t: torch.clamp_min(t, 1), x, exact=True)
    compare(lambda t: torch.clamp_max(t, 1), x, exact=True)
    compare(lambda t: t.clone().clamp_(0, 3), x, exact=True)
    compare(lambda t: torch.clamp(t, -2.5, 3.5), x)  # float bounds promote integer tensors
    if not dtype.is_floating_point:
        with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
            x.to(DEV).clamp_(0.5)


def test_clamp_nan():
    nan = float("nan")
    x = torch.tensor([1.0, nan, 5.0, -3.0])
    compare(lambda t: torch.clamp(t, 0, 2), x, exact=True)
    compare(lambda t: torch.clamp(t, nan, 2), x, exact=True)
    compare(lambda t: torch.clamp(t, 0, nan), x, exact=True)
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max' must not be None"):
        torch.clamp(x.to(DEV))


# --- activations ---------------------------------------------------------------------------

ACTIVATIONS = {
    "relu": (torch.relu, None),
    "gelu": (torch.nn.functional.gelu, "gelu_backward"),
    "gelu_tanh": (lambda t: torch.nn.functional.gelu(t, approximate="tanh"), "gelu_backward"),
    "silu": (torch.nn.functional.silu, "silu_backward"),
    "sigmoid": (torch.sigmoid, "sigmoid_backward"),
    "tanh": (torch.tanh, "tanh_backward"),
}


@pytest.mark.parametrize("name", ["relu", "gelu", "silu", "sigmoid", "tanh"])
def test_activations_registered_natively(name):
    for op in (name, f"{name}_", f"{name}.out"):
        assert native(op), op
    if name != "relu":
        assert native(f"{name}_backward") and native(f"{name}_backward.grad_input")
    else:
        assert native("threshold_backward") and native("threshold_backward.grad_input")


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_forward_and_backward(name, dtype):
    fn, _ = ACTIVATIONS[name]
    x = values((8, 33), dtype, low=-6, high=6)
    if name == "relu":
        x[0, :2] = torch.tensor([float("nan"), 0.0])
    compare(fn, x)
    compare(lambda t: fn(t.t()), x)
    g = values((8, 33), dtype, seed=5)
    # the backward formula through autograd, with g as the output's gradient
    x_cpu = x.clone().requires_grad_()
    fn(x_cpu).backward(g)
    x_dev = x.to(DEV).requires_grad_()
    with openreg_lab.fallback_policy("error"):
        fn(x_dev).backward(g.to(DEV))
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype in (torch.float16, torch.bfloat16) else {}
    assert_close(x_dev.grad.cpu(), x_cpu.grad, equal_nan=True, **tol)


def test_activation_in_place_and_out():
    x = values((5, 6), torch.float32)
    for name in ("relu", "sigmoid", "tanh", "silu"):
        fn = getattr(torch, name, None) or getattr(torch.nn.functional, name)
        expected = fn(x)
        d = x.to(DEV)
        ptr = d.data_ptr()
        with openreg_lab.fallback_policy("error"):
            r = getattr(torch.ops.aten, f"{name}_")(d)
        assert r.data_ptr() == ptr and d.data_ptr() == ptr
        assert_close(d.cpu(), expected)
        out = torch.empty(0, device=DEV)
        with openreg_lab.fallback_policy("error"):
            getattr(torch.ops.aten, name).out(x.to(DEV), out=out)
        assert_close(out.cpu(), expected)
    with pytest.raises(RuntimeError, match="approximate argument must be either none or tanh"):
        torch.nn.functional.gelu(x.to(DEV), approximate="fast")


def test_backward_ops_directly():
    g, x = values((4, 9), torch.float32), values((4, 9), torch.float32, seed=1)
    for fn in (
        lambda a, b: torch.ops.aten.threshold_backward(a, b, 0.5),
        lambda a, b: torch.ops.aten.gelu_backward(a, b),
        lambda a, b: torch.ops.aten.gelu_backward(a, b, approximate="tanh"),
        lambda a, b: torch.ops.aten.silu_backward(a, b),
        lambda a, b: torch.ops.aten.sigmoid_backward(a, b.sigmoid()),
        lambda a, b: torch.ops.aten.tanh_backward(a, b.tanh()),
    ):
        compare(fn, g, x)
        compare(lambda a, b: fn(a.t(), b.t()), g, x)  # noqa: B023
    out = torch.empty(0, device=DEV)
    with openreg_lab.fallback_policy("error"):
        torch.ops.aten.threshold_backward.grad_input(g.to(DEV), x.to(DEV), 0.0, grad_input=out)
    assert_close(out.cpu(), torch.ops.aten.threshold_backward(g, x, 0.0))
    i = torch.arange(-3, 5)
    compare(torch.relu, i, exact=True)
    compare(lambda t: torch.ops.aten.threshold_backward(t, t, 1), i, exact=True)
    compare(torch.sigmoid, i)  # integers promote to float
    with pytest.raises(RuntimeError, match="Boolean inputs not supported for relu"):
        torch.relu(torch.tensor([True], device=DEV))


# --- ternary -------------------------------------------------------------------------------


def test_ternary_registered_natively():
    for op in (
        "where.self",
        "where.self_out",
        "masked_fill_.Scalar",
        "masked_fill_.Tensor",
        "lerp.Scalar",
        "lerp_.Scalar",
        "lerp.Scalar_out",
        "lerp.Tensor",
        "lerp_.Tensor",
        "lerp.Tensor_out",
        "addcmul",
        "addcmul_",
        "addcmul.out",
        "addcdiv",
        "addcdiv_",
        "addcdiv.out",
    ):
        assert native(op), op


@pytest.mark.parametrize("dtype", [*FLOATS, *INTS, torch.bool], ids=str)
def test_where(dtype):
    cond = values((6, 7), torch.bool, seed=9)
    a, b = values((6, 7), dtype), values((7,), dtype, seed=1)
    compare(torch.where, cond, a, b, exact=True)
    compare(lambda c, x, y: torch.where(c.t(), x.t(), y), cond, a, values((7, 6), dtype), exact=True)
    compare(lambda c, x: torch.where(c, x, 0), cond, a, exact=True)
    compare(lambda c, x: torch.where(c, 2, x), cond, a, exact=True)
    out = torch.empty(0, dtype=dtype, device=DEV)
    with openreg_lab.fallback_policy("error"):
        torch.where(cond.to(DEV), a.to(DEV), b.to(DEV), out=out)
    assert torch.equal(out.cpu(), torch.where(cond, a, b))


def test_where_type_rules():
    cond = torch.tensor([True, False, True])
    i, f = torch.tensor([1, 2, 3]), torch.tensor([0.5, 1.5, 2.5], dtype=torch.float64)
    compare(torch.where, cond, i, f, exact=True)  # promotes
    with pytest.raises(RuntimeError, match="where expected condition to be a boolean tensor"):
        torch.where(i.to(DEV), i.to(DEV), i.to(DEV))
    with pytest.raises(RuntimeError, match="Expected out type to be Double but got Long"):
        torch.where(cond.to(DEV), i.to(DEV), f.to(DEV), out=torch.empty(3, dtype=torch.long, device=DEV))


@pytest.mark.parametrize("dtype", [*FLOATS, *INTS, torch.bool, torch.complex64], ids=str)
def test_masked_fill(dtype):
    x = values((6, 7), dtype) if dtype != torch.complex64 else torch.randn(6, 7, dtype=dtype)
    mask = values((6, 7), torch.bool, seed=4)
    value = True if dtype == torch.bool else 3
    compare(lambda t, m: t.clone().masked_fill_(m, value), x, mask, exact=True)
    compare(lambda t, m: t.clone().masked_fill_(m[0], value), x, mask, exact=True)  # broadcast mask
    compare(lambda t, m: t.clone().masked_fill_(m, torch.tensor(value)), x, mask, exact=True)
    compare(lambda t, m: t.t().clone().t().masked_fill_(m, value), x, mask, exact=True)
    d = x.to(DEV)
    ptr = d.data_ptr()
    with openreg_lab.fallback_policy("error"):
        d.masked_fill_(mask.to(DEV), value)
    assert d.data_ptr() == ptr
    assert torch.equal(d.cpu(), x.masked_fill(mask, value))


def test_masked_fill_rules():
    x = torch.zeros(2, 3, device=DEV)
    with pytest.raises(RuntimeError, match="masked_fill_ only supports boolean masks"):
        x.masked_fill_(torch.ones(2, 3, device=DEV), 1)
    with pytest.raises(RuntimeError, match="masked_fill_ only supports a 0-dimensional value tensor"):
        x.masked_fill_(torch.ones(2, 3, device=DEV, dtype=torch.bool), torch.ones(2))
    with pytest.raises(RuntimeError, match="The expanded size of the tensor"):
        x.masked_fill_(torch.ones(4, 3, device=DEV, dtype=torch.bool), 1)
    compare(lambda t: t.masked_fill(t > 0, 2.5), values((3, 4), torch.float32))  # int value cast into float


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_lerp(dtype):
    a, b = values((6, 7), dtype), values((6, 7), dtype, seed=1)
    w = values((6, 7), dtype, low=0, high=1, seed=2)
    for weight in (0.3, 0.7, -0.5, 1.5):
        compare(lambda x, y: torch.lerp(x, y, weight), a, b)  # noqa: B023
        compare(lambda x, y: x.clone().lerp_(y, weight), a, b)  # noqa: B023
    compare(torch.lerp, a, b, w)
    compare(lambda x, y, z: x.clone().lerp_(y.t().t(), z), a, b, w)
    compare(lambda x, y: torch.lerp(x, y[0], 0.25), a, b)  # broadcasting
    compare(lambda x, y, z: torch.lerp(x.t(), y.t(), z.t()), a, b, w)
    out = torch.empty(0, dtype=dtype, device=DEV)
    with openreg_lab.fallback_policy("error"):
        torch.lerp(a.to(DEV), b.to(DEV), 0.5, out=out)
    assert_close(out.cpu(), torch.lerp(a, b, 0.5))
    with pytest.raises(RuntimeError, match="expected dtype"):
        other = torch.float32 if dtype == torch.float64 else torch.float64
        torch.lerp(a.to(DEV), b.to(other).to(DEV), 0.5)


@pytest.mark.parametrize("dtype", [*FLOATS, torch.int64, torch.int32, torch.int8], ids=str)
@pytest.mark.parametrize("op", ["addcmul", "addcdiv"])
def test_addcmul_addcdiv(op, dtype):
    if op == "addcdiv" and not dtype.is_floating_point:
        with pytest.raises(RuntimeError, match="Integer division with addcdiv is no longer supported"):
            torch.addcdiv(*(torch.ones(3, dtype=dtype, device=DEV),) * 3)
        return
    fn = getattr(torch, op)
    s, t1 = values((6, 7), dtype), values((6, 7), dtype, seed=1)
    t2 = values((7,), dtype, seed=2, nonzero=True)
    value = 0.25 if dtype.is_floating_point else 3
    compare(lambda a, b, c: fn(a, b, c, value=value), s, t1, t2)
    compare(lambda a, b, c: getattr(a.clone(), f"{op}_")(b, c, value=value), s, t1, t2)
    compare(lambda a, b, c: fn(a.t(), b.t(), c[:6], value=value), s, t1, t2)
    out = torch.empty(0, dtype=dtype, device=DEV)
    with openreg_lab.fallback_policy("error"):
        fn(s.to(DEV), t1.to(DEV), t2.to(DEV), value=value, out=out)
    assert_close(out.cpu(), fn(s, t1, t2, value=value))
    d = s.to(DEV)
    ptr = d.data_ptr()
    with openreg_lab.fallback_policy("error"):
        getattr(d, f"{op}_")(t1.to(DEV), t2.to(DEV), value=value)
    assert d.data_ptr() == ptr
    assert_close(d.cpu(), fn(s, t1, t2, value=value))


def test_addcmul_promotes():
    f, i = values((4,), torch.float32), torch.tensor([1, 2, 3, 4])
    compare(lambda a, b: torch.addcmul(b, a, b, value=2), f, i)
    compare(lambda a, b: torch.addcdiv(a, b, a.abs() + 1, value=2), f, i)


# --- arange --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [None, *FLOATS, *INTS], ids=str)
def test_arange(dtype):
    assert native("arange.start_out")
    cases = [(10,), (-3, 5), (2, 20, 3), (5, -4, -2)]
    if dtype is None or dtype.is_floating_point:
        cases += [(0, 1, 0.1), (1.5, 7.25, 0.25), (5, 0, -1.5)]
    if dtype == torch.uint8:
        cases = [(10,), (2, 20, 3)]
    for args in cases:
        expected = torch.arange(*args, dtype=dtype)
        with openreg_lab.fallback_policy("error"):
            actual = torch.arange(*args, dtype=dtype, device=DEV)
        assert actual.device.type == DEV and actual.dtype == expected.dtype
        assert_close(actual.cpu(), expected)


def test_arange_out_and_errors():
    out = torch.empty(0, device=DEV, dtype=torch.int64)
    with openreg_lab.fallback_policy("error"):
        torch.arange(3, 9, out=out)
    assert torch.equal(out.cpu(), torch.arange(3, 9))
    out = torch.empty(2, 3, device=DEV)  # the right number of elements: keeps its shape
    with openreg_lab.fallback_policy("error"):
        torch.arange(6, out=out)
    assert torch.equal(out.cpu(), torch.arange(6.0).view(2, 3))
    out = torch.empty(4, device=DEV)
    with pytest.warns(UserWarning, match="The out tensor will be resized"):
        torch.arange(6, out=out)
    assert out.shape == (6,)
    with pytest.raises(RuntimeError, match="step must be nonzero"):
        torch.arange(0, 5, 0, device=DEV)
    with pytest.raises(RuntimeError, match="upper bound and lower bound inconsistent with step sign"):
        torch.arange(0, 5, -1, device=DEV)
    # the CPU has no complex arange either: the fallback reports its error
    with pytest.raises(NotImplementedError, match="not implemented for 'ComplexFloat'"):
        torch.arange(3, dtype=torch.complex64, device=DEV)


def test_vectorised_math_over_its_whole_range():
    # float32 exp, sigmoid, silu and gelu run in SIMD clones with openreg's own exp and erf (Loops.h,
    # Note [Vectorisable math]): check them where they overflow, underflow to denormals and to 0,
    # and at the special values.
    special = [float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 88.72, 88.73, -87.33, -103.9, -104.5]
    x = torch.cat([torch.linspace(-110, 95, 20011), torch.tensor(special)])
    r = compare(torch.exp, x)
    assert torch.isinf(r[-10]) and r[-9] == 0 and torch.isnan(r[-8]) and r[-7] == 1
    compare(torch.sigmoid, x)
    compare(torch.nn.functional.silu, x)
    y = torch.cat([torch.linspace(-20, 20, 40007), torch.tensor(special[1:5])])
    g = torch.linspace(-3, 3, y.numel())
    for approximate in ("none", "tanh"):
        compare(lambda t: torch.nn.functional.gelu(t, approximate=approximate), y)  # noqa: B023
        compare(lambda a, b: torch.ops.aten.gelu_backward(a, b, approximate=approximate), g, y)  # noqa: B023
    compare(lambda a, b: torch.ops.aten.silu_backward(a, b), g, y)
    # gelu(inf) is inf; ATen's CPU kernel says inf in its scalar loop but NaN in its vector loop
    with openreg_lab.fallback_policy("error"):
        r = torch.nn.functional.gelu(torch.full((40,), float("inf"), device=DEV))
    assert torch.equal(r.cpu(), torch.full((40,), float("inf")))
