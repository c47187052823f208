"""The native group norm (csrc/aten/native/GroupNorm.cpp) matches CPU on every layout, forward and
backward (channels_last input once raised "view size is not compatible", issue 13).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.support.parity import assert_same_as_cpu


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
