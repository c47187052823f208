"""Native openreg kernels of the neural-network family, compared with the CPU.

Covers softmax / log_softmax, layer norm, embedding, nll_loss and cat / index_select. Every native call
runs under the "error" fallback policy, so a test fails if the op (or anything it calls) falls back
to the CPU.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest
import torch
import torch.nn.functional as F

import openreg_lab
from openreg_lab.examples.models import mlp, transformer_block

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


# --- registration --------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ALL_NATIVE)
def test_registered_for_privateuse1(op):
    assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1")


@pytest.mark.parametrize("family", sorted(NATIVE))
def test_native_ops_yaml_lists_the_family(family):
    assert sorted(openreg_lab.native_ops_by_family()[family]) == sorted(NATIVE[family])


# --- softmax ---------------------------------------------------------------------------------------

SOFTMAX_CASES = [
    ((5, 7), -1),
    ((5, 7), 0),
    ((2, 3, 4), 1),
    ((2, 3, 100), 1),  # more columns than one block of the inner loop
    ((3, 1000), 1),
    ((7,), 0),
    ((), 0),
    ((), -1),
    ((2, 0, 3), 1),
    ((2, 0, 3), 2),
]
FORWARD = [torch._softmax, torch._log_softmax]


@pytest.mark.parametrize("fn", FORWARD, ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("shape", "dim"), SOFTMAX_CASES)
def test_softmax_forward(fn, dtype, shape, dim):
    x = randn(*shape, dtype=dtype) * 3
    with native():
        out = fn(dev(x), dim, False)
    check(out, fn(x, dim, False), **tol(dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_log_softmax_16bit_accuracy(dtype):
    # CPU rounds a row's sum of exponentials to the 16-bit type before its log; openreg keeps it in
    # float, which is closer to the exact result.
    x = randn(64, 33, dtype=dtype) * 3
    exact = torch._log_softmax(x.double(), 1, False)
    with native():
        ours = torch._log_softmax(dev(x), 1, False).cpu().double()
    cpu = torch._log_softmax(x, 1, False).double()
    assert (ours - exact).abs().max() <= (cpu - exact).abs().max()


@pytest.mark.parametrize("fn", FORWARD, ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_non_contiguous_input(fn, dim):
    x = randn(6, 8, 5)[:, ::2].transpose(0, 2)
    assert not x.is_contiguous()
    with native():
        out = fn(dev(x), dim, False)
    check(out, fn(x, dim, False))


@pytest.mark.parametrize("fn", FORWARD, ids=["softmax", "log_softmax"])
def test_softmax_extreme_values(fn):
    x = torch.tensor(
        [
            [1e4, 0.0, -1e4, 3.0],
            [-float("inf"), 1.0, 2.0, -float("inf")],
            [-float("inf")] * 4,
            [float("nan"), 1.0, 2.0, 3.0],
            [88.0, 89.0, 90.0, 91.0],
        ]
    )
    with native():
        out = fn(dev(x), 1, False)
    check(out, fn(x, 1, False))


@pytest.mark.parametrize("scale", [1.0, 10.0, 100.0])
@pytest.mark.parametrize("n", [1, 5, 15, 16, 17, 100, 1000])
def test_softmax_float32_accuracy(scale, n):
    # openreg computes exp and log itself: within a few ulps of the exact (float64) result, plus
    # the rounding of x - max in float32 (relative 2^-24 * |x - max| after exp).
    x = randn(37, n, seed=n) * scale
    rtol = 3e-6 + 2**-24 * 8 * scale
    with native():
        sm = torch._softmax(dev(x), 1, False).cpu()
        lsm = torch._log_softmax(dev(x), 1, False).cpu()
        g = randn(37, n, seed=1)
        lsm_bwd = torch._log_softmax_backward_data(dev(g), dev(lsm), 1, torch.float32).cpu()
    exact = torch._softmax(x.double(), 1, False)
    torch.testing.assert_close(sm.double(), exact, rtol=rtol, atol=1e-38)
    exact_log = torch._log_softmax(x.double(), 1, False)
    torch.testing.assert_close(lsm.double(), exact_log, rtol=3e-6, atol=3e-7 * max(1.0, scale))
    exact_bwd = torch._log_softmax_backward_data(g.double(), lsm.double(), 1, torch.float64)
    cpu_bwd = torch._log_softmax_backward_data(g, lsm, 1, torch.float32)
    cpu_error = (cpu_bwd.double() - exact_bwd).abs().max()
    assert (lsm_bwd.double() - exact_bwd).abs().max() <= 1.5 * cpu_error + 1e-6


def test_softmax_tiny_and_masked_probabilities():
    # Denormal probabilities, and exact zeros for -inf (masked) and very negative scores.
    row = [0.0, -50.0, -87.0, -90.0, -100.0, -103.0, -104.0, -110.0, -200.0, -float("inf")]
    x = torch.tensor([row, [r + 7.5 for r in row]])
    with native():
        out = torch._softmax(dev(x), 1, False).cpu()
    exact = torch._softmax(x.double(), 1, False).float()
    torch.testing.assert_close(out, exact, rtol=3e-6, atol=3e-45)
    assert (out[:, 7:] == 0).all() and (out[:, :6] > 0).all()
    check(dev(out), torch._softmax(x, 1, False), atol=3e-45, rtol=3e-6)


@pytest.mark.parametrize("fn", FORWARD, ids=["softmax", "log_softmax"])
def test_softmax_out(fn):
    x = randn(4, 6)
    expected = fn(x, 1, False)
    for out in (
        torch.empty(4, 6, device=DEV),  # right shape
        torch.empty(0, device=DEV),  # resized
        torch.empty(6, 4, device=DEV).t(),  # right shape, transposed: written through its strides
    ):
        with native():
            r = fn(dev(x), 1, False, out=out)
        assert r is out
        check(out, expected, strides=False)
    with pytest.warns(UserWarning, match="resized"), native():
        fn(dev(x), 1, False, out=torch.empty(3, device=DEV))
    same_error(
        lambda x, o: fn(x, 1, False, out=o),
        (x, torch.empty(4, 6, dtype=torch.float64)),
        (dev(x), torch.empty(4, 6, dtype=torch.float64, device=DEV)),
        match="Expected out tensor to have dtype float, but got double",
    )


@pytest.mark.parametrize("fn", FORWARD, ids=["softmax", "log_softmax"])
def test_softmax_errors(fn):
    x = randn(3, 4)
    same_error(fn, (x, 2, False), (dev(x), 2, False), match="Dimension out of range")
    same_error(fn, (x.half(), 1, True), (dev(x.half()), 1, True), match="half to float")
    same_error(fn, (x.int(), 1, False), (dev(x.int()), 1, False), match="Int")  # through the fallback


def test_softmax_integer_input_goes_to_the_fallback():
    with pytest.raises(NotImplementedError, match="has no openreg kernel"), native():
        torch._softmax(dev(torch.ones(3, dtype=torch.int32)), 0, False)


BACKWARD = [
    (
        torch._softmax,
        torch._softmax_backward_data,
        lambda *a, out: aten._softmax_backward_data.out(*a, grad_input=out),
    ),
    (
        torch._log_softmax,
        torch._log_softmax_backward_data,
        lambda *a, out: aten._log_softmax_backward_data.out(*a, out=out),
    ),
]


@pytest.mark.parametrize(("fwd", "bwd", "bwd_out"), BACKWARD, ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("shape", "dim"), SOFTMAX_CASES)
def test_softmax_backward_data(fwd, bwd, bwd_out, dtype, shape, dim):
    y = fwd(randn(*shape, dtype=dtype), dim, False)
    g = randn(*shape, dtype=dtype, seed=1)
    expected = bwd(g, y, dim, dtype)
    with native():
        check(bwd(dev(g), dev(y), dim, dtype), expected)
        out = torch.empty(0, dtype=dtype, device=DEV)
        assert bwd_out(dev(g), dev(y), dim, dtype, out=out) is out
    check(out, expected)


@pytest.mark.parametrize(("fwd", "bwd", "bwd_out"), BACKWARD, ids=["softmax", "log_softmax"])
def test_softmax_backward_data_non_contiguous_and_errors(fwd, bwd, bwd_out):
    y = fwd(randn(5, 6), 0, False).t()
    g = randn(6, 5, seed=1)
    with native():
        check(bwd(dev(g), dev(y), 1, torch.float32), bwd(g, y, 1, torch.float32))
        out = torch.empty(5, 6, device=DEV).t()
        bwd_out(dev(g), dev(y), 1, torch.float32, out=out)
    check(out, bwd(g, y, 1, torch.float32), strides=False)
    with native(), pytest.raises(RuntimeError, match="same size"):
        bwd(dev(g), dev(y[:3]), 1, torch.float32)
    # Mixed dtypes are CPU's business (it raises): they go through the fallback.
    same_error(bwd, (g, y.double(), 1, torch.float32), (dev(g), dev(y.double()), 1, torch.float32))


@pytest.mark.parametrize("fn", [F.softmax, F.log_softmax])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_softmax_autograd(fn, dtype, dim):
    x = randn(3, 4, 5, dtype=dtype).requires_grad_()
    xd = dev(x.detach()).requires_grad_()
    g = randn(3, 4, 5, dtype=dtype, seed=2)
    with native():
        yd = fn(xd, dim=dim)
        yd.backward(dev(g))
    y = fn(x, dim=dim)
    y.backward(g)
    check(yd.detach(), y.detach(), **tol(dtype))
    check(xd.grad, x.grad, **tol(dtype))


# --- layer norm -------------------------------------------------------------------------------------


def layer_norm_args(shape, norm, dtype, weight, bias, param_dtype=None):
    x = randn(*shape, dtype=dtype) * 2 + 0.5
    p = param_dtype or dtype
    w = randn(*norm, dtype=p, seed=1) if weight else None
    b = randn(*norm, dtype=p, seed=2) if bias else None
    return x, w, b


def on_dev(*ts):
    return tuple(None if t is None else dev(t) for t in ts)


LN_SHAPES = [
    ((4, 8), (8,)),
    ((2, 3, 5), (3, 5)),
    ((2, 3, 33), (33,)),
    ((7,), (7,)),
    ((0, 4), (4,)),
    ((3, 0), (0,)),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("shape", "norm"), LN_SHAPES)
@pytest.mark.parametrize(("weight", "bias"), [(True, True), (True, False), (False, True), (False, False)])
def test_layer_norm_forward(dtype, shape, norm, weight, bias):
    x, w, b = layer_norm_args(shape, norm, dtype, weight, bias)
    expected = torch.native_layer_norm(x, norm, w, b, 1e-5)
    with native():
        out = torch.native_layer_norm(*on_dev(x), norm, *on_dev(w, b), 1e-5)
    for a, e in zip(out, expected, strict=True):
        check(a, e, **tol(dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_layer_norm_mixed_dtypes(dtype):
    # 16-bit input with float weight and bias: float mean and rstd, as on CPU.
    x, w, b = layer_norm_args((6, 16), (16,), dtype, True, True, param_dtype=torch.float32)
    expected = torch.native_layer_norm(x, (16,), w, b, 1e-5)
    with native():
        xd, wd, bd = on_dev(x, w, b)
        out = torch.native_layer_norm(xd, (16,), wd, bd, 1e-5)
    assert out[1].dtype == torch.float32
    for a, e in zip(out, expected, strict=True):
        check(a, e, **tol(dtype))


def test_layer_norm_numerics():
    # A large common offset: float32 statistics lose digits (CPU's output is off by ~1e-3 here);
    # openreg computes float32 rows in double and stays exact to float precision.
    x = 1e4 + randn(8, 256, dtype=torch.float32)
    exact = torch.native_layer_norm(x.double(), (256,), None, None, 1e-5)
    cpu = torch.native_layer_norm(x, (256,), None, None, 1e-5)
    with native():
        out = torch.native_layer_norm(dev(x), (256,), None, None, 1e-5)
    for a, c in zip(out, cpu, strict=True):
        check(a, c, rtol=1e-3, atol=3e-3)
    assert (out[0].cpu().double() - exact[0]).abs().max() < 1e-6
    for a, c, e in zip(out, cpu, exact, strict=True):
        assert (a.cpu().double() - e).abs().max() <= (c.double() - e).abs().max()


def test_layer_norm_non_contiguous():
    x = randn(6, 10)[:, ::2]
    w, b = randn(10, seed=1)[::2], randn(5, seed=2)
    assert not x.is_contiguous() and not w.is_contiguous()
    with native():
        out = torch.native_layer_norm(*on_dev(x), (5,), *on_dev(w, b), 1e-5)
    for a, e in zip(out, torch.native_layer_norm(x, (5,), w, b, 1e-5), strict=True):
        check(a, e)


def test_layer_norm_errors():
    x = randn(3, 4)
    ln = torch.native_layer_norm
    same_error(
        ln,
        (x, (3,), None, None, 1e-5),
        (dev(x), (3,), None, None, 1e-5),
        match=r"expected input with shape \[\*, 3\]",
    )
    same_error(ln, (x, (), None, None, 1e-5), (dev(x), (), None, None, 1e-5), match="at least 1-dimensional")
    w = torch.ones(3)
    same_error(ln, (x, (4,), w, None, 1e-5), (dev(x), (4,), dev(w), None, 1e-5), match="weight of shape")
    same_error(ln, (x, (4,), None, w, 1e-5), (dev(x), (4,), None, dev(w), 1e-5), match="bias of shape")
    # float input with half weight: CPU rejects it; the call goes through the fallback.
    w16 = torch.ones(4, dtype=torch.float16)
    same_error(ln, (x, (4,), w16, None, 1e-5), (dev(x), (4,), dev(w16), None, 1e-5), match="mixed dtype")


MASKS = [[a, b, c] for a in (True, False) for b in (True, False) for c in (True, False)]


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("shape", "norm"), LN_SHAPES)
def test_layer_norm_backward(mask, dtype, shape, norm):
    x, w, b = layer_norm_args(shape, norm, dtype, True, True)
    _, mean, rstd = torch.native_layer_norm(x, norm, w, b, 1e-5)
    g = randn(*shape, dtype=dtype, seed=3)
    expected = aten.native_layer_norm_backward(g, x, norm, mean, rstd, w, b, mask)
    with native():
        out = aten.native_layer_norm_backward(*on_dev(g, x), norm, *on_dev(mean, rstd, w, b), mask)
    for a, e in zip(out, expected, strict=True):
        check(a, e, **tol(dtype))


def test_layer_norm_backward_without_parameters_and_mixed():
    x = randn(5, 12)
    _, mean, rstd = torch.native_layer_norm(x, (12,), None, None, 1e-5)
    g = randn(5, 12, seed=1)
    expected = aten.native_layer_norm_backward(g, x, (12,), mean, rstd, None, None, [True, False, False])
    with native():
        out = aten.native_layer_norm_backward(
            *on_dev(g, x), (12,), *on_dev(mean, rstd), None, None, [True, False, False]
        )
    check(out[0], expected[0])
    assert out[1] is None and out[2] is None
    # The weight gradient needs a weight (CPU fails obscurely; openreg says so).
    with native(), pytest.raises(RuntimeError, match="needs a weight"):
        aten.native_layer_norm_backward(
            *on_dev(g, x), (12,), *on_dev(mean, rstd), None, None, [True, True, False]
        )
    xh, w, b = layer_norm_args((5, 12), (12,), torch.bfloat16, True, True, param_dtype=torch.float32)
    _, mean, rstd = torch.native_layer_norm(xh, (12,), w, b, 1e-5)
    gh = g.bfloat16()
    expected = aten.native_layer_norm_backward(gh, xh, (12,), mean, rstd, w, b, [True, True, True])
    with native():
        out = aten.native_layer_norm_backward(
            *on_dev(gh, xh), (12,), *on_dev(mean, rstd, w, b), [True, True, True]
        )
    assert out[1].dtype == torch.float32
    for a, e in zip(out, expected, strict=True):
        check(a, e, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_autograd(dtype, affine):
    torch.manual_seed(0)
    ln = torch.nn.LayerNorm((3, 8), elementwise_affine=affine).to(dtype)
    if affine:
        with torch.no_grad():
            ln.weight.normal_()
            ln.bias.normal_()
    ln_dev = torch.nn.LayerNorm((3, 8), elementwise_affine=affine).to(dtype).to(DEV)
    ln_dev.load_state_dict(ln.state_dict())
    x = (randn(4, 3, 8, dtype=dtype) * 3).requires_grad_()
    xd = dev(x.detach()).requires_grad_()
    g = randn(4, 3, 8, dtype=dtype, seed=5)
    with native():
        yd = ln_dev(xd)
        yd.backward(dev(g))
    y = ln(x)
    y.backward(g)
    check(yd.detach(), y.detach(), **tol(dtype))
    check(xd.grad, x.grad, **tol(dtype))
    for p, pd in zip(ln.parameters(), ln_dev.parameters(), strict=True):
        check(pd.grad, p.grad, **tol(dtype))


# --- embedding -------------------------------------------------------------------------------------


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("padding_idx", [None, 3, -2])
@pytest.mark.parametrize("scale", [False, True])
def test_embedding_forward_backward(index_dtype, dtype, padding_idx, scale):
    w = randn(10, 6, dtype=dtype).requires_grad_()
    wd = dev(w.detach()).requires_grad_()
    idx = torch.tensor([[1, 3, 3, 9], [0, 3, 8, 1], [2, 2, 2, 3]], dtype=index_dtype)
    g = randn(3, 4, 6, dtype=dtype, seed=1)
    with native():
        yd = F.embedding(dev(idx), wd, padding_idx=padding_idx, scale_grad_by_freq=scale)
        yd.backward(dev(g))
    y = F.embedding(idx, w, padding_idx=padding_idx, scale_grad_by_freq=scale)
    y.backward(g)
    check(yd.detach(), y.detach())
    check(wd.grad, w.grad, **tol(dtype))


def test_embedding_dense_backward_direct():
    g = randn(2, 3, 4)
    idx = torch.tensor([[0, 1, 2], [3, 4, 5]])
    expected = aten.embedding_dense_backward(g, idx, 6, 2, True)
    with native():
        check(aten.embedding_dense_backward(dev(g), dev(idx), 6, 2, True), expected)
        # Indices may stay on the CPU, as in the fallback.
        check(aten.embedding_dense_backward(dev(g), idx, 6, 2, True), expected)
        check(aten.embedding_dense_backward(dev(g), dev(idx.int()), 6, 2, True), expected)
        # Empty: zeros.
        empty = aten.embedding_dense_backward(
            dev(torch.empty(0, 4)), dev(torch.empty(0, dtype=torch.long)), 5, -1, False
        )
    check(empty, torch.zeros(5, 4))


def test_embedding_errors():
    w = randn(4, 3)
    same_error(
        F.embedding,
        (torch.tensor([4]), w),
        (dev(torch.tensor([4])), dev(w)),
        match="index out of range in self",
    )
    same_error(
        F.embedding,
        (torch.tensor([-1]), w),
        (dev(torch.tensor([-1])), dev(w)),
        match="index out of range in self",
    )
    g = randn(2, 3)
    byte_idx = torch.tensor([0, 1], dtype=torch.uint8)
    same_error(
        aten.embedding_dense_backward,
        (g, byte_idx, 4, -1, False),
        (dev(g), dev(byte_idx), 4, -1, False),
        match="Long, Int",
    )
    same_error(
        aten.embedding_dense_backward,
        (randn(3, 3), torch.tensor([0, 1]), 4, -1, False),
        (dev(randn(3, 3)), dev(torch.tensor([0, 1])), 4, -1, False),
        match="invalid for input of size",
    )
    # CPU does not check the range here (it would write out of bounds); openreg raises.
    with native(), pytest.raises(IndexError, match="out of range"):
        aten.embedding_dense_backward(dev(g), dev(torch.tensor([0, 4])), 4, -1, False)


# --- nll_loss ---------------------------------------------------------------------------------------

NLL_CASES = [
    # input shape, target
    ((5, 4), [0, 3, 1, -100, 2]),
    ((5, 4), [-100] * 5),
    ((0, 4), []),
    ((4,), 2),
    ((4,), [1]),
    ((4,), -100),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("shape", "target"), NLL_CASES)
@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_forward_backward(dtype, shape, target, reduction, weighted):
    x = randn(*shape, dtype=dtype)
    t = torch.tensor(target, dtype=torch.long)
    w = randn(shape[-1], dtype=dtype, seed=1).abs() + 0.5 if weighted else None
    out, total = aten.nll_loss_forward(x, t, w, reduction, -100)
    with native():
        out_d, total_d = aten.nll_loss_forward(*on_dev(x, t, w), reduction, -100)
        o2, t2 = torch.empty(0, dtype=dtype, device=DEV), torch.empty(0, dtype=dtype, device=DEV)
        r = aten.nll_loss_forward.output(*on_dev(x, t, w), reduction, -100, output=o2, total_weight=t2)
        assert r[0] is o2 and r[1] is t2
    for a in (out_d, o2):
        check(a, out)
    for a in (total_d, t2):
        check(a, total)

    if x.dim() == 1 and t.dim() == 1:
        return  # CPU's backward wants a 0-dim target for a 1-D input
    go = randn(*out.shape, dtype=dtype, seed=2)
    expected = aten.nll_loss_backward(go, x, t, w, reduction, -100, total)
    with native():
        check(aten.nll_loss_backward(*on_dev(go, x, t, w), reduction, -100, dev(total)), expected)
        gi = torch.empty(0, dtype=dtype, device=DEV)
        aten.nll_loss_backward.grad_input(*on_dev(go, x, t, w), reduction, -100, dev(total), grad_input=gi)
    check(gi, expected)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_and_cross_entropy_autograd(dtype, reduction, weighted):
    x = randn(6, 5, dtype=dtype).requires_grad_()
    xd = dev(x.detach()).requires_grad_()
    t = torch.tensor([0, 4, 1, 1, 7, 2])
    w = torch.linspace(0.5, 2.0, 5).to(dtype) if weighted else None
    kw = {"reduction": reduction, "ignore_index": 7}
    for fn in (F.nll_loss, F.cross_entropy):
        x.grad = xd.grad = None
        loss = fn(x, t, w, **kw)
        g = randn(*loss.shape, dtype=dtype, seed=3)
        loss.backward(g)
        with native():
            ld = fn(xd, dev(t), None if w is None else dev(w), **kw)
            ld.backward(dev(g))
        check(ld.detach(), loss.detach(), **tol(dtype))
        check(xd.grad, x.grad, **tol(dtype))


def test_nll_loss_non_contiguous_and_noncontiguous_out():
    x = randn(4, 6)[:, ::2]
    t = torch.tensor([0, 2, 1, 1])
    out, total = aten.nll_loss_forward(x, t, None, 0, -100)
    with native():
        o = torch.empty(8, device=DEV)[::2]
        aten.nll_loss_forward.output(
            dev(x), dev(t), None, 0, -100, output=o, total_weight=torch.empty((), device=DEV)
        )
    check(o, out, strides=False)
    go = randn(4, seed=1)
    expected = aten.nll_loss_backward(go, x, t, None, 0, -100, total)
    with native():
        gi = torch.empty(3, 4, device=DEV).t()
        aten.nll_loss_backward.grad_input(dev(go), dev(x), dev(t), None, 0, -100, dev(total), grad_input=gi)
    check(gi, expected, strides=False)


def test_nll_loss_errors():
    x = randn(3, 4)
    fwd = aten.nll_loss_forward
    bwd = aten.nll_loss_backward
    t = torch.tensor([0, 1, 7])
    same_error(fwd, (x, t, None, 1, -100), on_dev(x, t) + (None, 1, -100), match="Target 7 is out of bounds")
    same_error(fwd, (x, t, None, 0, -100), on_dev(x, t) + (None, 0, -100), match="Target 7 is out of bounds")
    t_ok = torch.tensor([0, 1, 2])
    x3 = randn(2, 3, 4)
    same_error(fwd, (x3, t_ok, None, 1, -100), on_dev(x3, t_ok) + (None, 1, -100), match="1D or 2D")
    t2 = torch.zeros(3, 1, dtype=torch.long)
    same_error(fwd, (x, t2, None, 1, -100), on_dev(x, t2) + (None, 1, -100), match="multi-target")
    t_short = t_ok[:2]
    same_error(fwd, (x, t_short, None, 1, -100), on_dev(x, t_short) + (None, 1, -100), match="size mismatch")
    w3 = torch.ones(3)
    same_error(fwd, (x, t_ok, w3, 1, -100), on_dev(x, t_ok, w3) + (1, -100), match="for all 4 classes")
    x1, t12 = randn(4), torch.tensor([1, 2])
    same_error(fwd, (x1, t12, None, 1, -100), on_dev(x1, t12) + (None, 1, -100), match="must have size 1")
    # int32 targets and mismatched weights: CPU's errors, through the fallback.
    t32 = t_ok.int()
    same_error(fwd, (x, t32, None, 1, -100), on_dev(x, t32) + (None, 1, -100), match="Long or Byte")
    wd = torch.ones(4, dtype=torch.float64)
    same_error(fwd, (x, t_ok, wd, 1, -100), on_dev(x, t_ok, wd) + (1, -100), match="expected scalar type")
    one = torch.tensor(1.0)
    two = torch.ones(2)
    same_error(
        bwd,
        (one, x, t_ok, None, 1, -100, two),
        on_dev(one, x, t_ok) + (None, 1, -100, dev(two)),
        match="total_weight",
    )
    same_error(
        bwd,
        (two, x, t_ok, None, 1, -100, one),
        on_dev(two, x, t_ok) + (None, 1, -100, dev(one)),
        match="single element",
    )
    same_error(
        bwd,
        (two, x, t_ok, None, 0, -100, one),
        on_dev(two, x, t_ok) + (None, 0, -100, dev(one)),
        match="size",
    )
    # CPU's backward with reduction="none" does not check the targets; openreg does.
    with native(), pytest.raises(IndexError, match="Target 7 is out of bounds"):
        bwd(*on_dev(torch.ones(3), x, t), None, 0, -100, dev(one))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss2d(dtype, reduction, weighted):
    x = randn(2, 3, 4, 5, dtype=dtype)
    t = torch.randint(0, 3, (2, 4, 5), generator=torch.Generator().manual_seed(0))
    t[0, 1, :2] = -100
    w = torch.tensor([0.5, 1.0, 2.0], dtype=dtype) if weighted else None
    out, total = aten.nll_loss2d_forward(x, t, w, reduction, -100)
    go = randn(*out.shape, dtype=dtype, seed=1)
    expected = aten.nll_loss2d_backward(go, x, t, w, reduction, -100, total)
    with native():
        out_d, total_d = aten.nll_loss2d_forward(*on_dev(x, t, w), reduction, -100)
        o2, t2 = torch.empty(0, dtype=dtype, device=DEV), torch.empty(0, dtype=dtype, device=DEV)
        aten.nll_loss2d_forward.output(*on_dev(x, t, w), reduction, -100, output=o2, total_weight=t2)
        gi = aten.nll_loss2d_backward(*on_dev(go, x, t, w), reduction, -100, dev(total))
        gi2 = torch.empty(0, dtype=dtype, device=DEV)
        aten.nll_loss2d_backward.grad_input(*on_dev(go, x, t, w), reduction, -100, dev(total), grad_input=gi2)
    for a in (out_d, o2):
        check(a, out, **tol(dtype))
    for a in (total_d, t2):
        check(a, total, **tol(dtype))
    for a in (gi, gi2):
        check(a, expected, **tol(dtype))


@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_nll_loss2d_empty_batch(reduction):
    # No positions: empty results and gradients, a NaN mean, and no access to the (absent) data of
    # the empty gradient (make test-asan caught a memset on its null pointer).
    x = randn(0, 3, 4, 5)
    t = torch.zeros(0, 4, 5, dtype=torch.long)
    out, total = aten.nll_loss2d_forward(x, t, None, reduction, -100)
    go = randn(*out.shape, seed=1)
    expected = aten.nll_loss2d_backward(go, x, t, None, reduction, -100, total)
    with native():
        out_d, total_d = aten.nll_loss2d_forward(dev(x), dev(t), None, reduction, -100)
        gi = aten.nll_loss2d_backward(dev(go), dev(x), dev(t), None, reduction, -100, dev(total))
    check(out_d, out)
    check(total_d, total)
    check(gi, expected)


def test_nll_loss2d_autograd_and_errors():
    x = randn(2, 3, 4, 5).requires_grad_()
    xd = dev(x.detach()).requires_grad_()
    t = torch.randint(0, 3, (2, 4, 5), generator=torch.Generator().manual_seed(1))
    with native():
        ld = F.nll_loss(xd, dev(t))
        ld.backward()
    loss = F.nll_loss(x, t)
    loss.backward()
    check(ld.detach(), loss.detach())
    check(xd.grad, x.grad)
    fwd = aten.nll_loss2d_forward
    bad = t + 5
    same_error(
        fwd,
        (x.detach(), bad, None, 1, -100),
        on_dev(x.detach(), bad) + (None, 1, -100),
        match="out of bounds",
    )
    same_error(
        fwd, (x.detach(), t[0], None, 1, -100), on_dev(x.detach(), t[0]) + (None, 1, -100), match="3D tensors"
    )
    t_small = t[:, :3]
    same_error(
        fwd,
        (x.detach(), t_small, None, 1, -100),
        on_dev(x.detach(), t_small) + (None, 1, -100),
        match="size mismatch",
    )
    # CPU would write out of bounds here; openreg raises.
    with native(), pytest.raises(IndexError, match="out of bounds"):
        aten.nll_loss2d_backward(
            *on_dev(torch.ones(2, 4, 5), x.detach(), bad), None, 0, -100, dev(torch.tensor(1.0))
        )


# --- cat --------------------------------------------------------------------------------------------

ALL_DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.complex64,
    torch.complex128,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
]


def make(shape, dtype, seed=0):
    x = randn(*shape, seed=seed) * 50
    if dtype.is_complex:
        return torch.complex(x, x.flip(-1) if x.dim() else x).to(dtype)
    if dtype == torch.bool:
        return x > 0
    if dtype == torch.uint8:
        return x.abs().to(dtype)
    return x.to(dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_cat(dtype, dim):
    shapes = {0: [(1, 3, 4), (2, 3, 4)], 1: [(2, 1, 4), (2, 5, 4)], 2: [(2, 3, 1), (2, 3, 2)]}
    parts = [make(s, dtype, seed=i) for i, s in enumerate(shapes[dim % 3])]
    parts.append(make(shapes[dim % 3][0], dtype, seed=9))
    expected = torch.cat(parts, dim)
    with native():
        out = torch.cat([dev(p) for p in parts], dim)
        o = torch.empty(0, dtype=dtype, device=DEV)
        assert torch.cat([dev(p) for p in parts], dim, out=o) is o
    check(out, expected)
    check(o, expected)


def test_cat_type_promotion():
    parts = [
        make((2, 3), torch.int64),
        make((1, 3), torch.float16),
        make((2, 3), torch.bool),
        make((1, 3), torch.int8),
    ]
    expected = torch.cat(parts)
    with native():
        out = torch.cat([dev(p) for p in parts])
    assert out.dtype == torch.float16
    check(out, expected)
    ints = [make((2,), torch.bool), make((3,), torch.int8), make((1,), torch.uint8)]
    with native():
        check(torch.cat([dev(p) for p in ints]), torch.cat(ints))
        # out= may be any dtype the inputs can be cast to
        o = torch.empty(0, dtype=torch.complex128, device=DEV)
        torch.cat([dev(p) for p in parts], out=o)
    check(o, torch.cat(parts).to(torch.complex128))
    same_error(
        lambda ps, o: torch.cat(ps, out=o),
        (parts, torch.empty(0, dtype=torch.int64)),
        ([dev(p) for p in parts], torch.empty(0, dtype=torch.int64, device=DEV)),
        match="can't be cast to the desired output type Long",
    )


def test_cat_legacy_empty_and_edge_cases():
    a, b = randn(2, 3), randn(1, 3, seed=1)
    empty = torch.empty(0)
    cases = [
        ([a, empty, b], 0),
        ([a, empty, randn(2, 1)], -1),  # wrapped with the first non-skipped tensor's dims
        ([empty, a], 1),
        ([empty, empty.double()], 0),  # all skipped: shape [0], promoted dtype
        ([empty, empty], 5),  # all skipped: dim is not checked
        ([torch.empty(0, 3), a], 0),
        ([torch.empty(2, 0), a], 1),
        ([a], 0),
    ]
    for parts, dim in cases:
        expected = torch.cat(parts, dim)
        with native():
            out = torch.cat([dev(p) for p in parts], dim)
        check(out, expected)


def test_cat_layouts():
    x = randn(2, 3, 4, 5)
    cl = x.to(memory_format=torch.channels_last)
    cl2 = randn(2, 2, 4, 5, seed=1).to(memory_format=torch.channels_last)
    for parts, dim in [([cl, cl2], 1), ([cl, cl], 0), ([cl, cl], 3), ([cl, x], 1), ([x, cl], 2)]:
        expected = torch.cat(parts, dim)
        with native():
            out = torch.cat([dev(p) for p in parts], dim)
        check(out, expected)  # channels-last in, channels-last out, as on CPU
    cl3d = randn(2, 3, 2, 4, 5).to(memory_format=torch.channels_last_3d)
    with native():
        check(torch.cat([dev(cl3d), dev(cl3d)], 2), torch.cat([cl3d, cl3d], 2))
    # Non-contiguous inputs, and a conjugated one.
    t = randn(4, 6)[:, ::2]
    c = make((3, 3), torch.complex64).conj()
    with native():
        check(torch.cat([dev(t), dev(t.t().t())], 0), torch.cat([t, t], 0))
        check(torch.cat([dev(c), dev(c)], 1), torch.cat([c, c], 1))
    # An out= tensor of the right shape keeps its strides.
    o = torch.empty(3, 4, device=DEV).t()
    parts = [randn(2, 3), randn(2, 3, seed=1)]
    with native():
        torch.cat([dev(p) for p in parts], out=o)
    assert o.stride() == (1, 4)
    check(o, torch.cat(parts), strides=False)


def test_cat_errors():
    a = randn(2, 3)
    for parts, dim, match in [
        ([a, randn(2, 4)], 0, "Sizes of tensors must match except in dimension 0"),
        ([a, randn(2, 3, 1)], 0, "same number of dimensions"),
        ([a, torch.tensor(1.0)], 0, r"zero-dimensional tensor \(at position 1\)"),
        ([a], 2, "Dimension out of range"),
    ]:
        same_error(torch.cat, (parts, dim), ([dev(p) for p in parts], dim), match=match)
    with pytest.raises(ValueError, match="non-empty list"):
        torch.cat([], 0)
    with pytest.raises(RuntimeError, match="same device"):
        torch.cat([dev(a), a])
    with pytest.raises(RuntimeError, match="same device"):
        torch.cat([dev(a), a.to("openreg:1")])
    o = dev(randn(4, 3))
    with pytest.raises(RuntimeError, match="single memory location"):
        torch.cat([o[:2], o[2:]], out=o)


def test_cat_autograd():
    a = randn(2, 3).requires_grad_()
    b = randn(4, 3, seed=1).requires_grad_()
    ad, bd = dev(a.detach()).requires_grad_(), dev(b.detach()).requires_grad_()
    g = randn(6, 3, seed=2)
    torch.cat([a, b]).backward(g)
    torch.cat([ad, bd]).backward(dev(g))
    check(ad.grad, a.grad)
    check(bd.grad, b.grad)


# --- index_select --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_index_select(dtype, dim, index_dtype):
    x = make((4, 5, 3), dtype)
    idx = torch.tensor([2, 0, 2, 1], dtype=index_dtype)
    expected = torch.index_select(x, dim, idx)
    with native():
        out = torch.index_select(dev(x), dim, dev(idx))
        o = torch.empty(0, dtype=dtype, device=DEV)
        assert torch.index_select(dev(x), dim, dev(idx), out=o) is o
    check(out, expected)
    check(o, expected)


def test_index_select_edge_cases():
    x = randn(4, 5)
    cases = [
        (x, 0, torch.tensor(3)),  # 0-dim index
        (x, 1, torch.tensor([], dtype=torch.long)),  # empty index
        (torch.tensor(2.5), 0, torch.tensor([0])),  # 0-dim self
        (torch.tensor(2.5), -1, torch.tensor(0)),
        (randn(7), 0, torch.tensor([6, 0, 6])),
        (torch.empty(2, 0), 0, torch.tensor([1, 0])),  # empty self
        (x[:, ::2], 1, torch.tensor([2, 0])),  # non-contiguous self
        (x.t(), 0, torch.tensor([4, 1])),
        (randn(2, 3, 4, 5).to(memory_format=torch.channels_last), 1, torch.tensor([2, 0])),
        (make((3, 4), torch.complex64).conj(), 1, torch.tensor([3, 1])),
    ]
    for self_, dim, idx in cases:
        expected = torch.index_select(self_, dim, idx)
        with native():
            out = torch.index_select(dev(self_), dim, dev(idx))
        check(out, expected)
    # A 0-dim index may stay on the CPU (as in the fallback); a 1-D one may not.
    with native():
        check(torch.index_select(dev(x), 0, torch.tensor(2)), torch.index_select(x, 0, torch.tensor(2)))
    with pytest.raises(RuntimeError, match="same device"):
        torch.index_select(dev(x), 0, torch.tensor([2]))
    with pytest.raises(RuntimeError, match="same device"):
        torch.index_select(dev(x), 0, torch.tensor([2], device="openreg:1"))


def test_index_select_out_layouts():
    x = randn(4, 5)
    idx = torch.tensor([3, 1, 0])
    expected = torch.index_select(x, 0, idx)
    o = torch.empty(5, 3, device=DEV).t()  # right shape, transposed
    with native():
        assert torch.index_select(dev(x), 0, dev(idx), out=o) is o
    assert o.stride() == (1, 3)
    check(o, expected, strides=False)
    with pytest.warns(UserWarning, match="resized"), native():
        torch.index_select(dev(x), 0, dev(idx), out=torch.empty(2, device=DEV))


def test_index_select_errors():
    x = randn(4, 5)
    cases = [
        (x, 0, torch.tensor([4]), "index out of range in self"),
        (x, 0, torch.tensor([-1]), "index out of range in self"),
        (randn(3), 0, torch.tensor([3]), "index out of range in self"),
        (torch.tensor(1.0), 0, torch.tensor([1]), "index out of range in self"),
        (torch.tensor(1.0), 0, torch.tensor([0, 0]), "can have only 1 value"),
        (x, 0, torch.tensor([[0]]), "supposed to be a vector"),
        (x, 0, torch.tensor([0.0]), "int32 or int64"),
        (x, 2, torch.tensor([0]), "Dimension out of range"),
        (torch.empty(0, 3), 0, torch.tensor([0]), "should be positive"),
    ]
    for self_, dim, idx, match in cases:
        same_error(torch.index_select, (self_, dim, idx), (dev(self_), dim, dev(idx)), match=match)
    # CPU's fast path for this one raises a RuntimeError of its own; openreg raises PyTorch's usual
    # IndexError.
    with native(), pytest.raises(IndexError, match="index out of range in self"):
        torch.index_select(dev(x), 1, dev(torch.tensor([0, 5])))
    same_error(
        lambda s, i, o: torch.index_select(s, 0, i, out=o),
        (x, torch.tensor([0]), torch.empty(1, 5, dtype=torch.float64)),
        (dev(x), dev(torch.tensor([0])), torch.empty(1, 5, dtype=torch.float64, device=DEV)),
        match="same scalar type",
    )
    i = torch.tensor([0, 1, 2, 3, 4])
    same_error(
        lambda s, i: torch.index_select(s, 1, i, out=s),
        (x, i),
        (dev(x), dev(i)),
        match="single memory location",
    )


def test_index_select_autograd():
    x = randn(5, 3).requires_grad_()
    xd = dev(x.detach()).requires_grad_()
    idx = torch.tensor([4, 0, 4])
    g = randn(3, 3, seed=1)
    torch.index_select(x, 0, idx).backward(g)
    torch.index_select(xd, 0, dev(idx)).backward(dev(g))
    check(xd.grad, x.grad)


# --- second device, composite out= variants ------------------------------------------------------


def test_second_device_and_composite_out_variants():
    # Results stay on the inputs' device; the out= overloads without an openreg kernel are
    # CompositeExplicitAutograd wrappers around the native functional kernels, so they do not fall back.
    d1 = torch.device("openreg", 1)
    x, w, b = randn(4, 8), randn(8, seed=1), randn(8, seed=2)
    xd, wd, bd = x.to(d1), w.to(d1), b.to(d1)
    i = torch.tensor([0, 1, 2, 1, 0])
    g = randn(5, 3, seed=3)
    with native():
        outs = [torch.empty(0, device=d1) for _ in range(3)]
        aten.native_layer_norm.out(xd, [8], wd, bd, 1e-5, out0=outs[0], out1=outs[1], out2=outs[2])
        grads = [torch.empty(0, device=d1) for _ in range(3)]
        aten.native_layer_norm_backward.out(
            xd,
            xd,
            [8],
            outs[1],
            outs[2],
            wd,
            bd,
            [True, True, True],
            out0=grads[0],
            out1=grads[1],
            out2=grads[2],
        )
        emb = aten.embedding_dense_backward.out(
            g.to(d1), i.to(d1), 4, -1, False, out=torch.empty(0, device=d1)
        )
        sm = torch.softmax(xd, 1)
        cat = torch.cat([xd, xd])
        sel = torch.index_select(xd, 0, i[:2].to(d1))
        loss = F.nll_loss(torch.log_softmax(xd, 1), torch.tensor([1, 2, 3, 0], device=d1))
    expected = torch.native_layer_norm(x, [8], w, b, 1e-5)
    for a, e in zip(outs, expected, strict=True):
        assert a.device == d1
        torch.testing.assert_close(a.cpu(), e)
    for a, e in zip(
        grads, aten.native_layer_norm_backward(x, x, [8], *expected[1:], w, b, [True] * 3), strict=True
    ):
        assert a.device == d1
        torch.testing.assert_close(a.cpu(), e)
    for a, e in [
        (emb, aten.embedding_dense_backward(g, i, 4, -1, False)),
        (sm, torch.softmax(x, 1)),
        (cat, torch.cat([x, x])),
        (sel, torch.index_select(x, 0, i[:2])),
        (loss, F.nll_loss(torch.log_softmax(x, 1), torch.tensor([1, 2, 3, 0]))),
    ]:
        assert a.device == d1
        torch.testing.assert_close(a.cpu(), e)
    with pytest.raises(RuntimeError, match="same device"):
        torch.cat([xd, dev(x)])


# --- the example models ------------------------------------------------------------------------------

FAMILY_OPS = {op.split("::")[1].split(".")[0] for op in ALL_NATIVE}


def _fallback_ops(fn: Callable[[], None]) -> set[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with openreg_lab.fallback_policy("warn"):
            fn()
    found = set()
    for w in caught:
        m = re.match(r"(aten::[\w.]+) has no openreg kernel", str(w.message))
        if m:
            found.add(m.group(1))
    return found


def _train_step(model, inputs, targets, loss_fn):
    model.zero_grad()
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


@pytest.mark.parametrize("name", ["mlp", "transformer_block"])
def test_training_step_matches_cpu_and_family_ops_are_native(name):
    torch.manual_seed(0)
    if name == "mlp":
        model = mlp()
        inputs, targets = torch.randn(32, 64), torch.randint(0, 10, (32,))

        def loss_fn(out, t):
            return F.nll_loss(out, t)
    else:
        model = transformer_block()
        tokens = torch.randint(0, 100, (4, 17))
        inputs, targets = tokens[:, :-1], tokens[:, 1:]

        def loss_fn(out, t):
            return F.cross_entropy(out.reshape(-1, out.shape[-1]), t.reshape(-1))

    model_dev = type(model)() if name == "transformer_block" else mlp()
    model_dev.load_state_dict(model.state_dict())
    model_dev.to(DEV)
    loss, grads = _train_step(model, inputs, targets, loss_fn)
    result = {}

    def step():
        result["out"] = _train_step(model_dev, dev(inputs), dev(targets), loss_fn)

    fell_back = _fallback_ops(step)
    loss_d, grads_d = result["out"]
    check(loss_d, loss, rtol=1e-4, atol=1e-5)
    for n, g in grads.items():
        check(grads_d[n], g, rtol=1e-4, atol=1e-5)
    ours = {op for op in fell_back if op.split("::")[1].split(".")[0] in FAMILY_OPS}
    assert ours == set()
