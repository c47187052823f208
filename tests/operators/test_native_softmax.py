"""Native openreg kernels: softmax / log_softmax and their backward (csrc/aten/native/Softmax.cpp),
compared with the CPU.

Every native call runs under the "error" fallback policy, so a test fails if the op (or anything it
calls) falls back to the CPU.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.support.native_nn import (
    DEV,
    FLOATS,
    aten,
    check,
    check_registration,
    dev,
    native,
    randn,
    same_error,
    tol,
)


def test_registered_and_listed():
    check_registration("softmax")


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
