"""Nested tensors on openreg.

A strided nested tensor on openreg keeps its elements in one openreg buffer; copying and describing
it runs natively (csrc/aten/NestedTensor.cpp), computing on it runs on the CPU through the fallback
of the nested key (csrc/aten/fallback/LayoutFallback.cpp), with the same results as on CPU. Jagged nested
tensors are a Python subclass over ordinary openreg tensors.
"""

from __future__ import annotations

import pytest
import torch

import openreg_lab

pytestmark = pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")

A = torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -3.0]])
B = torch.tensor([[4.0, -0.5, 1.0]])


def _nested(device: str, requires_grad: bool = False) -> torch.Tensor:
    return torch.nested.nested_tensor([A.to(device), B.to(device)], requires_grad=requires_grad)


def _padded(t: torch.Tensor) -> torch.Tensor:
    return torch.nested.to_padded_tensor(t, 0.0).cpu() if t.is_nested else t.cpu()


def test_nested_tensor_lives_in_one_device_buffer():
    nt = _nested("openreg")
    assert nt.is_nested and nt.device.type == "openreg"
    assert torch.equal(nt._nested_tensor_size(), torch.tensor([[2, 3], [1, 3]]))
    assert torch.equal(nt.values().cpu(), torch.cat([A.flatten(), B.flatten()]))
    back = nt.to("cpu")
    assert back.is_nested and torch.equal(_padded(back), _padded(_nested("cpu")))


@pytest.mark.parametrize(
    "op",
    [
        pytest.param(lambda t: t * 2, id="mul"),
        pytest.param(lambda t: t + t, id="add"),
        pytest.param(torch.relu, id="relu"),
        pytest.param(lambda t: t.softmax(-1), id="softmax"),
        pytest.param(lambda t: t.clone(), id="clone"),
        pytest.param(lambda t: t.unbind()[0], id="unbind"),
        pytest.param(lambda t: torch.nested.to_padded_tensor(t, -1.0), id="to_padded_tensor"),
        pytest.param(lambda t: torch.nn.functional.linear(t, torch.ones(2, 3, device=t.device)), id="linear"),
        pytest.param(lambda t: torch.bmm(t, t.transpose(1, 2)), id="bmm"),
    ],
)
def test_nested_ops_match_cpu(op):
    actual, expected = op(_nested("openreg")), op(_nested("cpu"))
    assert actual.device.type == "openreg" and actual.is_nested == expected.is_nested
    torch.testing.assert_close(_padded(actual), _padded(expected))


def test_nested_backward_matches_cpu():
    grads = {}
    for device in ("cpu", "openreg"):
        nt = _nested(device, requires_grad=True)
        w = torch.arange(6.0, device=device).reshape(2, 3).requires_grad_()
        loss = torch.nested.to_padded_tensor(torch.nn.functional.linear(nt, w), 0.0).pow(2).sum()
        grads[device] = torch.autograd.grad(loss, [w, nt])
    torch.testing.assert_close(grads["openreg"][0].cpu(), grads["cpu"][0])
    torch.testing.assert_close(_padded(grads["openreg"][1]), _padded(grads["cpu"][1]))


def test_nested_op_shows_in_a_trace_as_a_fallback_with_its_copies():
    nt = _nested("openreg")
    with openreg_lab.trace() as t:
        nt * 2
    fallbacks = t.fallbacks()
    assert list(fallbacks["name"]) == ["aten::mul.Tensor"]
    assert int(fallbacks["bytes_to_cpu"].iloc[0]) == 9 * 4  # the buffer: 9 float32 elements
    assert int(fallbacks["bytes_back"].iloc[0]) == 9 * 4


def test_jagged_layout_works_too():
    nt = torch.nested.nested_tensor([A.openreg(), B.openreg()], layout=torch.jagged)
    assert nt.device.type == "openreg"
    torch.testing.assert_close((nt * 2).unbind()[1].cpu(), B * 2)
