"""A ResNet-18-shaped model (openreg_lab.examples.models.resnet: 20 convolutions, batch norm, max
and average pooling, residuals) compiles with Inductor and trains on openreg as on the CPU, with
Inductor's layout optimisation on: wide enough that Inductor turns the graph channels-last, which
openreg's fake convolution must predict (Note [Fake convolution on openreg]); before it did, the
first compiled forward failed its first convolution's stride assertion."""

from __future__ import annotations

import copy

import pytest
import torch
from torch._inductor import config as inductor_config
from torch._inductor.graph import GraphLowering

import openreg_lab
from openreg_lab.examples.models import resnet

#: The last stage wider than 64 channels: Inductor's layout optimisation turns such a graph channels-last.
WIDTHS = (8, 16, 32, 96)
STEPS = 2


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _train(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, compiled: bool) -> list[torch.Tensor]:
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    forward = torch.compile(model) if compiled else model
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(forward(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return losses


@pytest.mark.slow  # 66 s in CI, most of it Inductor building the C++ of 20 convolutions' graphs; the
# cause it guards, the fake convolution's layouts, is checked in the default tier (test_compile_layouts.py)
def test_a_compiled_resnet_trains_channels_last_on_openreg_as_on_the_cpu(monkeypatch):
    assert inductor_config.layout_optimization  # Inductor's default, kept
    decided: list[bool] = []
    decide = GraphLowering.decide_layout_opt

    def recording(gm, *, is_inference):
        decided.append(decide(gm, is_inference=is_inference))
        return decided[-1]

    monkeypatch.setattr(GraphLowering, "decide_layout_opt", staticmethod(recording))
    torch.manual_seed(0)
    cpu_model = resnet(WIDTHS)
    assert sum(isinstance(m, torch.nn.Conv2d) for m in cpu_model.modules()) == 20
    model = copy.deepcopy(cpu_model).to("openreg")
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(4, 3, 32, 32, generator=g), torch.randint(0, 10, (4,), generator=g)
    expected = _train(cpu_model, x, y, compiled=False)
    with openreg_lab.trace() as t:
        actual = _train(model, x.to("openreg"), y.to("openreg"), compiled=True)
    assert decided[0]  # the forward graph went channels-last (the backward's is Inductor's own choice)
    assert len(t.fallbacks()) == 0
    for a, e in zip(actual, expected, strict=True):
        torch.testing.assert_close(a.cpu(), e, rtol=1e-4, atol=1e-4)
    for (name, p), pc in zip(model.named_parameters(), cpu_model.parameters(), strict=True):
        torch.testing.assert_close(p.detach().cpu(), pc.detach(), rtol=1e-4, atol=1e-4, msg=name)
    for b, bc in zip(model.buffers(), cpu_model.buffers(), strict=True):  # running statistics
        torch.testing.assert_close(b.cpu(), bc, rtol=1e-4, atol=1e-4)
