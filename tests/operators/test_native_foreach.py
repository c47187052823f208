"""Native _foreach_* kernels (csrc/aten/native/Foreach.cpp) and optimizers that use them, against CPU.

ATen's CPU foreach kernels call the per-tensor operator on each tensor; openreg runs contiguous float
and double tuples in its own loops and hands any other tuple to the per-tensor operator. Both paths are
compared with the CPU here, under the fallback policy "error" unless a test says otherwise.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import openreg_lab

DEV = "openreg"
SHAPES = [(5, 3), (7,), (2, 3, 4), (0,), (300, 200)]  # the last one is split over threads


def tensors(dtype=torch.float32, seed=0, low=-4.0, high=4.0, shapes=SHAPES):
    g = torch.Generator().manual_seed(seed)
    out = []
    for s in shapes:
        t = torch.rand(s, generator=g, dtype=torch.float64) * (high - low) + low
        out.append(t.to(dtype))
    return out


def dev(ts):
    return [t.to(DEV) for t in ts]


def native(op):
    return torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{op}", "PrivateUse1")


def assert_lists(actual, expected, exact=False):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert a.device.type == DEV and a.dtype == e.dtype and a.shape == e.shape
        if exact:
            assert_close(a.cpu(), e, rtol=0, atol=0, equal_nan=True)
        else:
            assert_close(a.cpu(), e, equal_nan=True)


def check(name, inputs, *args, exact=False, **kwargs):
    """torch._foreach_<name> and its in-place form on CPU lists vs openreg lists (inputs[0] is self)."""
    functional = getattr(torch, f"_foreach_{name}")
    in_place = getattr(torch, f"_foreach_{name}_")
    expected = functional(*inputs, *args, **kwargs)
    dev_inputs = [dev(ts) for ts in inputs]
    with openreg_lab.fallback_policy("error"):
        actual = functional(*dev_inputs, *args, **kwargs)
    assert_lists(actual, expected, exact)
    ptrs = [t.data_ptr() for t in dev_inputs[0]]
    with openreg_lab.fallback_policy("error"):
        in_place(*dev_inputs, *args, **kwargs)
    assert [t.data_ptr() for t in dev_inputs[0]] == ptrs
    assert_lists(dev_inputs[0], expected, exact)


FOREACH = [
    *[
        f"_foreach_{op}{sfx}.{ov}"
        for op in ("add", "sub", "mul", "div")
        for sfx in ("", "_")
        for ov in ("Scalar", "ScalarList", "List")
    ],
    *[f"_foreach_{op}{sfx}.List" for op in ("maximum", "minimum") for sfx in ("", "_")],
    *[f"_foreach_lerp{sfx}.{ov}" for sfx in ("", "_") for ov in ("Scalar", "List")],
    *[
        f"_foreach_{op}{sfx}.{ov}"
        for op in ("addcmul", "addcdiv")
        for sfx in ("", "_")
        for ov in ("Scalar", "ScalarList")
    ],
    "_foreach_sqrt",
    "_foreach_sqrt_",
    "_foreach_neg",
    "_foreach_neg_",
    "_foreach_zero_",
]


@pytest.mark.parametrize("op", FOREACH)
def test_registered_natively(op):
    assert native(op)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_scalar_ops(dtype):
    xs = tensors(dtype)
    for name in ("add", "sub", "mul", "div"):
        check(name, [xs], 0.3, exact=True)
        check(name, [xs], 2, exact=True)
        check(name, [xs], [0.5, -2.0, 3, 1.5, 0.25], exact=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_list_ops(dtype):
    xs, ys = tensors(dtype), tensors(dtype, seed=1, low=0.5, high=3.0)
    check("add", [xs, ys], exact=True)
    check("sub", [xs, ys], exact=True)
    check("add", [xs, ys], alpha=-0.75)
    check("sub", [xs, ys], alpha=3)
    check("mul", [xs, ys], exact=True)
    check("div", [xs, ys], exact=True)
    check("maximum", [xs, ys], exact=True)
    check("minimum", [xs, ys], exact=True)


def test_maximum_minimum_propagate_nan():
    # ATen's foreach maximum/minimum are clamp_min/clamp_max with a tensor bound: NaN wins.
    nan = float("nan")
    xs = [torch.tensor([1.0, nan, 3.0, nan, -1.0]), torch.tensor([1.0, nan, 3.0, nan, -1.0] * 9)]
    ys = [torch.tensor([nan, 2.0, 1.0, nan, -2.0]), torch.tensor([nan, 2.0, 1.0, nan, -2.0] * 9)]
    check("maximum", [xs, ys], exact=True)
    check("minimum", [xs, ys], exact=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_unary_ops(dtype):
    xs = tensors(dtype, low=0.0)
    check("sqrt", [xs])  # ATen's vectorised sqrt (Sleef, 0.5001 ulp) is not always correctly rounded
    check("neg", [tensors(dtype)], exact=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_lerp(dtype):
    xs, ys, ws = tensors(dtype), tensors(dtype, seed=1), tensors(dtype, seed=2, low=0.0, high=1.0)
    check("lerp", [xs, ys], 0.1)
    check("lerp", [xs, ys], 0.9)
    check("lerp", [xs, ys, ws])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_addcmul_addcdiv(dtype):
    xs, ys, zs = tensors(dtype), tensors(dtype, seed=1), tensors(dtype, seed=2, low=0.5, high=2.0)
    for name in ("addcmul", "addcdiv"):
        check(name, [xs, ys, zs])
        check(name, [xs, ys, zs], value=-0.25)
        check(name, [xs, ys, zs], [0.5, -2.0, 3, 1.5, 0.25])


def test_zero_():
    xs = dev(tensors())
    xs.append(torch.ones(4, 6, device=DEV)[:, ::2])  # non-contiguous: the per-tensor zero_
    with openreg_lab.fallback_policy("error"):
        torch._foreach_zero_(xs)
    for t in xs:
        assert torch.equal(t.cpu(), torch.zeros(t.shape))


def test_tuples_off_the_fast_path_use_the_per_tensor_operators():
    # float16/bfloat16, non-contiguous views and integer tensors take the per-tensor path, which is
    # native too (under policy "error")
    for dtype in (torch.float16, torch.bfloat16):
        xs, ys = tensors(dtype, shapes=SHAPES[:3]), tensors(dtype, seed=1, low=0.5, shapes=SHAPES[:3])
        check("mul", [xs], 0.1)
        check("add", [xs, ys], alpha=2)
        check("lerp", [xs, ys], 0.3)
        check("addcdiv", [xs, ys, ys], value=-0.5)
        check("sqrt", [[y.abs() for y in ys]])
    xs = [torch.randn(6, 4).t(), torch.randn(8)[::2]]
    ys = [torch.randn(4, 6), torch.randn(4)]
    functional = torch._foreach_add(xs, ys, alpha=2)
    with openreg_lab.fallback_policy("error"):
        dev_xs = [x.to(DEV).t().contiguous().t() if x.dim() == 2 else x.to(DEV) for x in xs]
        actual = torch._foreach_add(dev_xs, dev(ys), alpha=2)
    assert_lists(actual, functional)
    ints = [torch.arange(6), torch.arange(3)]
    check("add", [ints], 2, exact=True)
    with openreg_lab.fallback_policy("error"):
        promoted = torch._foreach_mul(dev(ints), 1.5)  # integer * float promotes, per tensor
    assert_lists(promoted, torch._foreach_mul(ints, 1.5), exact=True)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        torch._foreach_mul_(dev(ints), 1.5)
    hs = tensors(torch.float16, shapes=[(3,), (40,)])
    check("maximum", [hs, tensors(torch.float16, seed=1, shapes=[(3,), (40,)])], exact=True)
    check("minimum", [hs, tensors(torch.float16, seed=1, shapes=[(3,), (40,)])], exact=True)


def test_list_checks():
    xs = dev(tensors(shapes=[(2,), (3,)]))
    with pytest.raises(RuntimeError, match="Tensor list must have at least one tensor"):
        torch._foreach_add_([], 1)
    with pytest.raises(RuntimeError, match="Tensor lists must have the same number of tensors, got 2 and 1"):
        torch._foreach_add_(xs, xs[:1])
    with pytest.raises(RuntimeError, match="Tensor list must have same number of elements as scalar list"):
        torch._foreach_mul_(xs, [1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch._foreach_add_(xs, [torch.ones(2), torch.ones(3)])


# --- optimizers ---------------------------------------------------------------------------


def run_optimizer(make, steps=5, **kwargs):
    """`steps` optimizer steps with the same gradients on CPU and openreg; returns both parameter lists."""
    g = torch.Generator().manual_seed(0)
    shapes = [(16, 8), (8,), (3, 4, 5), (40000,)]
    init = [torch.randn(s, generator=g) for s in shapes]
    grads = [[torch.randn(s, generator=g) for s in shapes] for _ in range(steps)]
    cpu = [p.clone().requires_grad_() for p in init]
    ondev = [p.to(DEV).requires_grad_() for p in init]
    opt_cpu, opt_dev = make(cpu, **kwargs), make(ondev, **kwargs)
    for step_grads in grads:
        for p, gr in zip(cpu, step_grads, strict=True):
            p.grad = gr.clone()
        opt_cpu.step()
        with openreg_lab.fallback_policy("error"):
            for p, gr in zip(ondev, step_grads, strict=True):
                p.grad = gr.to(DEV)
            opt_dev.step()
    return cpu, ondev


@pytest.mark.parametrize("amsgrad", [False, True], ids=["adamw", "amsgrad"])
@pytest.mark.parametrize("foreach", [False, True], ids=["for-loop", "foreach"])
def test_adamw_matches_cpu_without_fallback(foreach, amsgrad):
    cpu, ondev = run_optimizer(torch.optim.AdamW, lr=1e-2, foreach=foreach, amsgrad=amsgrad)
    for a, b in zip(cpu, ondev, strict=True):
        assert b.device.type == DEV
        assert_close(b.detach().cpu(), a.detach(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("foreach", [False, True], ids=["for-loop", "foreach"])
def test_adamw_maximize_and_coupled_weight_decay(foreach):
    cpu, ondev = run_optimizer(torch.optim.AdamW, lr=1e-2, foreach=foreach, maximize=True, weight_decay=0.1)
    for a, b in zip(cpu, ondev, strict=True):
        assert_close(b.detach().cpu(), a.detach(), rtol=1e-6, atol=1e-7)
    cpu, ondev = run_optimizer(torch.optim.Adam, lr=1e-2, foreach=foreach, weight_decay=0.1)
    for a, b in zip(cpu, ondev, strict=True):
        assert_close(b.detach().cpu(), a.detach(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("foreach", [False, True], ids=["for-loop", "foreach"])
def test_sgd_momentum_matches_cpu_without_fallback(foreach):
    cpu, ondev = run_optimizer(
        torch.optim.SGD, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2, foreach=foreach
    )
    for a, b in zip(cpu, ondev, strict=True):
        # ATen fuses p + alpha * g into one fma on CPUs that have it; openreg rounds twice. After
        # five steps that shows as ~1e-7 absolute where parameters pass close to zero.
        assert_close(b.detach().cpu(), a.detach(), rtol=1e-6, atol=1e-6)
