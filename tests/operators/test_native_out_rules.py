"""The `out=` rules of the native kernels match CPU's: dtype, device, overlap (found by PyTorch's
device-generic suites).

Each case runs on CPU and on openreg: the same error, or the same values.
"""

from __future__ import annotations

import pytest
import torch

from tests.support.parity import assert_same_as_cpu

U8A = [1, 2, 3, 0, 255]
U8B = [3, 1, 0, 255, 1]


@pytest.mark.parametrize("out_dtype", [torch.float64, torch.float32, torch.int64, torch.int16, torch.float16])
@pytest.mark.parametrize("op", [torch.sub, torch.add, torch.mul, torch.pow, torch.maximum])
def test_narrow_integer_result_wraps_before_a_wider_out(op, out_dtype):
    # uint8 1 - 3 is 254 on CPU: the result wraps to uint8, then widens into out.
    def run(device):
        a = torch.tensor(U8A, dtype=torch.uint8, device=device)
        b = torch.tensor(U8B, dtype=torch.uint8, device=device)
        out = torch.empty(5, dtype=out_dtype, device=device)
        return op(a, b, out=out)

    assert_same_as_cpu(run, rtol=0, atol=0)


def test_issue_example_sub_uint8_into_float64():
    a = torch.tensor([1, 2, 3], dtype=torch.uint8, device="openreg")
    b = torch.tensor([3, 1, 0], dtype=torch.uint8, device="openreg")
    out = torch.empty(3, dtype=torch.float64, device="openreg")
    torch.sub(a, b, out=out)
    assert out.cpu().tolist() == [254.0, 1.0, 3.0]


SAME_DTYPE_OPS = {
    "neg": torch.neg,
    "abs": torch.abs,
    "sign": torch.sign,
    "gelu": torch._C._nn.gelu,
    "silu": lambda x, out: torch._C._nn.silu(x, out=out),
}


_DTYPE_PAIRS = [
    (torch.float32, torch.float64),
    (torch.float32, torch.float16),
    (torch.int64, torch.float32),
    (torch.uint8, torch.int64),
    (torch.float32, torch.float32),
]


@pytest.mark.parametrize(
    ("name", "in_dtype", "out_dtype"),
    [
        (name, i, o)
        for name in SAME_DTYPE_OPS
        for i, o in _DTYPE_PAIRS
        if i.is_floating_point or name not in ("gelu", "silu")  # they take floating inputs only
    ],
)
def test_unary_ops_refuse_an_out_of_another_dtype(name, in_dtype, out_dtype):

    def run(device):
        x = (torch.arange(-3, 3) * 3).to(device=device, dtype=in_dtype)
        return SAME_DTYPE_OPS[name](x, out=torch.empty(6, dtype=out_dtype, device=device))

    assert_same_as_cpu(run)


def test_issue_example_neg_out_of_another_dtype_raises():
    t = torch.ones(3, device="openreg")
    with pytest.raises(RuntimeError, match="Found dtype Double but expected Float"):
        torch.neg(t, out=torch.empty(3, dtype=torch.float64, device="openreg"))


@pytest.mark.parametrize(
    "call",
    [
        lambda x, out: torch.clamp_min(x, 0.5, out=out),
        lambda x, out: torch.clamp_max(x, 0.5, out=out),
        lambda x, out: torch.neg(x, out=out),
        lambda x, out: torch.add(x, 1, out=out),
        lambda x, out: torch.mul(x, x, out=out),
        lambda x, out: torch.sigmoid(x, out=out),
    ],
    ids=["clamp_min", "clamp_max", "neg", "add_scalar", "mul", "sigmoid"],
)
@pytest.mark.parametrize("shape", [(), (4,)])
@pytest.mark.parametrize("out_device", ["cpu", "openreg:1"])
def test_out_on_another_device_raises(call, shape, out_device):
    x = torch.rand(shape, device="openreg")
    out = torch.empty(shape, device=out_device)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        call(x, out)


OVERLAP_OPS = {
    "add": lambda a, out: torch.add(a, a, out=out),
    "sub_scalar": lambda a, out: torch.sub(a, 2, out=out),
    "mul": lambda a, out: torch.mul(a, 3, out=out),
    "maximum": lambda a, out: torch.maximum(a, a.flip(0), out=out),
    "neg": lambda a, out: torch.neg(a, out=out),
    "abs": lambda a, out: torch.abs(a, out=out),
    "clamp": lambda a, out: torch.clamp(a, 1, 3, out=out),
    "exp": lambda a, out: torch.exp(a, out=out),
    "where": lambda a, out: torch.where(a > 2, a, a.flip(0), out=out),
    "addcmul": lambda a, out: torch.addcmul(a, a, a, out=out),
    "atan2_fallback": lambda a, out: torch.atan2(a, a, out=out),
    "clamp_tensor_fallback": lambda a, out: torch.clamp(a, a.flip(0), out=out),
}


@pytest.mark.parametrize("kind", ["partial", "same", "internal"])
@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        (name, dtype)
        for name in OVERLAP_OPS
        for dtype in (torch.float32, torch.uint8, torch.int64)
        if dtype.is_floating_point or name not in ("exp", "atan2_fallback")  # floating results
    ],
)
def test_out_overlap_rules_match_cpu(name, kind, dtype):

    def run(device):
        buf = torch.arange(1, 8, device=device).to(dtype)
        a = buf[1:]
        out = {"partial": buf[:-1], "same": a, "internal": buf[:1].expand(6)}[kind]
        OVERLAP_OPS[name](a, out)
        return buf

    assert_same_as_cpu(run)


def test_in_place_on_an_expanded_tensor_matches_cpu():
    # threshold_ writes an expanded tensor on CPU (it is idempotent); add_ refuses it.
    def threshold(device):
        x = torch.tensor([[-1.0, 2.0]], device=device).expand(3, 2)
        return torch.threshold_(x, 0.0, 5.0)

    def add(device):
        x = torch.tensor([[-1.0, 2.0]], device=device).expand(3, 2)
        return x.add_(1)

    assert assert_same_as_cpu(threshold, rtol=0, atol=0)[0].tolist() == [[5.0, 2.0]] * 3
    assert isinstance(assert_same_as_cpu(add), RuntimeError)
