"""Native openreg kernels: nll_loss and nll_loss2d forward and backward (csrc/aten/native/Loss.cpp),
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
    on_dev,
    randn,
    same_error,
    tol,
)


def test_registered_and_listed():
    check_registration("loss")


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
