"""Native openreg kernels: layer norm forward and backward (csrc/aten/native/LayerNorm.cpp), compared
with the CPU.

Every native call runs under the "error" fallback policy, so a test fails if the op (or anything it
calls) falls back to the CPU.
"""

from __future__ import annotations

import pytest
import torch

from tests.support.native_nn import (
    DEV,
    FLOATS,
    aten,
    check,
    check_registration,
    dev,
    native,
    on_dev,
    randn,
    same_error,
    tol,
)


def test_registered_and_listed():
    check_registration("normalization")


# --- layer norm -------------------------------------------------------------------------------------


def layer_norm_args(shape, norm, dtype, weight, bias, param_dtype=None):
    x = randn(*shape, dtype=dtype) * 2 + 0.5
    p = param_dtype or dtype
    w = randn(*norm, dtype=p, seed=1) if weight else None
    b = randn(*norm, dtype=p, seed=2) if bias else None
    return x, w, b


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
