"""The native group norm (csrc/aten/native/GroupNorm.cpp) matches CPU on every layout, forward and
backward (channels_last input once raised "view size is not compatible"): the CPU's own
kernels on device memory, so the same values bit for bit, the same layouts, dtypes, warnings and
errors (tests.support.parity.assert_native_as_cpu), natively with no copy. Its OpInfo samples run in
tests/operators/test_native_vision_ops.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import openreg_lab
from tests.support.parity import assert_native_as_cpu, assert_same_as_cpu

Fn = Callable[[str], Any]


def _x(
    *shape: int, seed: int = 0, dtype: torch.dtype = torch.float32, layout: str = "contiguous", device="cpu"
):
    # made on the device, so that a view stays a view (a copy to the device would make it dense)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype).to(device)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    elif layout == "strided":  # column-major in the last two dims, and sliced: no dense layout
        x = x.transpose(-1, -2).contiguous().transpose(-1, -2)[..., : x.shape[-1] - 1]
    return x


@pytest.mark.parametrize(
    "make",
    [
        lambda x: x.to(memory_format=torch.channels_last),
        lambda x: x.transpose(2, 3),
        lambda x: x,
    ],
    ids=["channels_last", "transposed", "contiguous"],
)
@pytest.mark.parametrize("affine", [False, True])
def test_group_norm_any_layout_matches_cpu(make, affine):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 6, 3, 4, generator=g)
    w = torch.randn(6, generator=g)
    b = torch.randn(6, generator=g)

    def run(device):
        args = (w.to(device), b.to(device)) if affine else (None, None)
        y = F.group_norm(make(x.to(device)), 3, *args)
        return y, y.is_contiguous(), y.is_contiguous(memory_format=torch.channels_last)

    assert_same_as_cpu(run)


def test_group_norm_channels_last_backward_matches_cpu():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 4, 3, 3, generator=g).to(memory_format=torch.channels_last)
    norm = torch.nn.GroupNorm(2, 4)

    def run(device):
        m = torch.nn.GroupNorm(2, 4).to(device)
        m.load_state_dict(norm.state_dict())
        xi = x.detach().to(device).requires_grad_()
        (m(xi) * torch.arange(72.0, device=device).reshape(2, 4, 3, 3)).sum().backward()
        return xi.grad, m.weight.grad, m.bias.grad

    assert_same_as_cpu(run)


def test_native_group_norm_channels_last_5d_returns_cpu_stats():
    x = torch.randn(2, 4, 2, 3, 2).to(memory_format=torch.channels_last_3d)
    assert_same_as_cpu(lambda d: torch.native_group_norm(x.to(d), None, None, 2, 4, 12, 2, 1e-5))


def _group_norm(shape, groups, layout="contiguous", affine=True, dtype=torch.float32, params=None) -> Fn:
    def run(d: str) -> Any:
        x = _x(*shape, layout=layout, dtype=dtype, device=d).requires_grad_()
        pdtype = params or dtype
        w = _x(shape[1], seed=1, dtype=pdtype, device=d).requires_grad_() if affine else None
        b = _x(shape[1], seed=2, dtype=pdtype, device=d).requires_grad_() if affine else None
        y = F.group_norm(x, groups, w, b, eps=1e-5)
        (y.float() * _x(*shape, seed=5, device=d)).sum().backward()
        return [y, x.grad, w.grad if affine else None, b.grad if affine else None]

    return run


GN_CASES = {
    "groups-2": _group_norm((2, 4, 5, 6), 2),
    "groups-1": _group_norm((2, 4, 5, 6), 1),
    "groups-per-channel": _group_norm((2, 4, 5, 6), 4),
    "channels-last": _group_norm((2, 4, 5, 6), 2, "channels_last"),
    "strided": _group_norm((2, 4, 5, 7), 2, "strided"),
    "no-affine": _group_norm((2, 4, 5, 6), 2, affine=False),
    "3d": _group_norm((2, 6, 3, 4, 5), 3),
    "1d": _group_norm((3, 6, 10), 3),
    "bfloat16-float-params": _group_norm((2, 4, 5, 6), 2, dtype=torch.bfloat16, params=torch.float32),
    "float64": _group_norm((2, 4, 5, 6), 2, dtype=torch.float64),
    "empty-batch": _group_norm((0, 4, 5, 6), 2),
    "groups-do-not-divide": _group_norm((2, 4, 5, 6), 3),
    "wrong-weight": lambda d: F.group_norm(_x(2, 4, 3, device=d), 2, _x(3, device=d)),
}


# Bit for bit, but the channels-last backward: PyTorch's autograd formula for native_group_norm hands the
# CPU's kernel the gradient and input in the input's (channels-last) layout and any other device's in
# NCHW, whose kernel sums in another order (float32 ulps: 1.9e-6 in a bias gradient of 20).
CLOSE = {"channels-last": {"rtol": 1.3e-6, "atol": 1e-5}}


@pytest.mark.parametrize("case", list(GN_CASES))
def test_group_norm_as_on_cpu(case):
    assert_native_as_cpu(GN_CASES[case], **CLOSE.get(case, {"rtol": 0, "atol": 0}))


def test_group_norm_in_a_diffusers_resnet_block_runs_natively_without_a_copy():
    x = _x(2, 8, 6, 6, device="openreg").requires_grad_()
    norm = torch.nn.GroupNorm(4, 8).to("openreg")
    with openreg_lab.fallback_policy("error"), openreg_lab.trace() as t:
        F.silu(norm(x)).sum().backward()
    ops = t.events[t.events.kind == "op"]
    assert {"aten::native_group_norm", "aten::native_group_norm_backward"} <= set(ops["name"])
    assert set(ops[ops["name"].str.startswith("aten::native_group_norm")]["kernel"]) == {"native"}
    assert t.fallbacks().empty and t.copies().empty
    names = set(t.events[t.events.kind == "op"]["name"])
    assert "aten::var_mean.correction" not in names  # PyTorch's composite group norm no longer runs
