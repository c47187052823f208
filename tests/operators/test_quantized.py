"""Quantized tensors on openreg.

A quantized openreg tensor keeps its integer representation in device memory and its quantizer
(scale and zero point) beside it; creating one and reading its quantizer or viewing it runs natively
(csrc/aten/Quantized.cpp), computing on it runs on the CPU through the fallback of the quantized key
(csrc/aten/fallback/LayoutFallback.cpp), with the same results as on CPU.
"""

from __future__ import annotations

import pytest
import torch

import openreg_lab

pytestmark = pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor, torch.quantize_per_channel")

X = torch.tensor([[0.0, 1.13, -0.52], [2.0, 0.41, -3.3]])


def _q(device: str, dtype: torch.dtype = torch.quint8) -> torch.Tensor:
    return torch.quantize_per_tensor(X.to(device), 0.05, 70, dtype)


def _same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.device.type == "openreg"
    assert actual.dtype == expected.dtype
    if expected.is_quantized:
        assert (actual.q_scale(), actual.q_zero_point()) == (expected.q_scale(), expected.q_zero_point())
        assert torch.equal(actual.int_repr().cpu(), expected.int_repr())
    else:
        torch.testing.assert_close(actual.cpu(), expected)


@pytest.mark.parametrize("dtype", [torch.quint8, torch.qint8, torch.qint32])
def test_quantize_per_tensor_matches_cpu(dtype):
    q = _q("openreg", dtype)
    assert q.is_quantized and q.device.type == "openreg" and q.qscheme() == torch.per_tensor_affine
    _same(q, _q("cpu", dtype))
    _same(q.dequantize(), _q("cpu", dtype).dequantize())


@pytest.mark.parametrize("device", ["openreg:0", "openreg:1"])
def test_round_trips_between_cpu_and_openreg(device):
    cpu = _q("cpu")
    dev = cpu.to(device)
    assert dev.device == torch.device(device) and dev.is_quantized
    back = dev.cpu()
    assert (back.q_scale(), back.q_zero_point()) == (cpu.q_scale(), cpu.q_zero_point())
    assert torch.equal(back.int_repr(), cpu.int_repr())


def test_quantize_per_channel_matches_cpu():
    def run(device):
        scales = torch.tensor([0.1, 0.02], dtype=torch.float64, device=device)
        zero_points = torch.tensor([3, 100], device=device)
        return torch.quantize_per_channel(X.to(device), scales, zero_points, 0, torch.quint8)

    q, expected = run("openreg"), run("cpu")
    assert q.qscheme() == torch.per_channel_affine and q.q_per_channel_axis() == 0
    assert torch.equal(q.q_per_channel_scales().cpu(), expected.q_per_channel_scales())
    assert torch.equal(q.int_repr().cpu(), expected.int_repr())
    _same(q.dequantize(), expected.dequantize())


@pytest.mark.parametrize(
    "op",
    [
        pytest.param(lambda q: torch.ops.quantized.add(q, q, 0.1, 64), id="quantized.add"),
        pytest.param(lambda q: torch.ops.quantized.mul(q, q, 0.2, 10), id="quantized.mul"),
        pytest.param(torch.relu, id="relu"),
        pytest.param(lambda q: q.clone(), id="clone"),
        pytest.param(lambda q: q.t().contiguous(), id="contiguous"),
        pytest.param(lambda q: q.mean(1), id="mean"),
        pytest.param(lambda q: torch.cat([q, q]), id="cat"),
        pytest.param(lambda q: torch.sort(q, 1)[0], id="sort"),
        pytest.param(lambda q: q == q.flip(0), id="eq"),
        pytest.param(lambda q: torch.nn.functional.avg_pool2d(q[None, None], (1, 2)), id="avg_pool2d"),
    ],
)
def test_quantized_ops_match_cpu(op):
    _same(op(_q("openreg")), op(_q("cpu")))


def test_views_share_device_memory_and_quantizer():
    q = _q("openreg")
    for view in (q.view(3, 2), q.t(), q[1], q.unsqueeze(0), q.reshape(6)):
        assert view.untyped_storage().data_ptr() == q.untyped_storage().data_ptr()
        assert view.q_scale() == q.q_scale() and view.is_quantized


def test_quantized_op_shows_in_a_trace_as_a_fallback_with_its_copies():
    q = _q("openreg")
    with openreg_lab.trace() as t:
        q.int_repr()
    fallbacks = t.fallbacks()
    assert list(fallbacks["name"]) == ["aten::int_repr"]
    assert int(fallbacks["bytes_to_cpu"].iloc[0]) == 6  # six quint8 elements
    assert int(fallbacks["bytes_back"].iloc[0]) == 6  # six uint8 elements
    assert list(t.copies()["direction"]) == ["D2H", "H2D"]


def test_a_quantized_dtype_without_a_quantizer_raises_as_on_cpu():
    for device in ("cpu", "openreg"):
        with pytest.raises(RuntimeError, match="empty_strided not supported on quantized tensors yet"):
            torch.empty_strided((3,), (1,), dtype=torch.qint8, device=device)


def test_quantize_under_a_profile_that_runs_it_generically():
    # The generic native path returns the CPU kernel's quantized result through the copy path.
    with openreg_lab.use_profile("cpu"):
        q = _q("openreg")
    _same(q, _q("cpu"))
