"""torch.autocast("openreg", ...) follows PyTorch's CUDA policy, and every cast is observable."""

import pytest
import torch

import openreg_lab
import openreg_lab.examples.models
from openreg_lab import _C

CUDA_ONLY = {"aten::cudnn_convolution", "aten::cudnn_convolution_transpose"}


def _cast_counts() -> tuple[int, int]:
    return _C.cast_counts()


def test_rules_are_exactly_pytorchs_cuda_lists():
    cuda = {
        name
        for name in torch._C._dispatch_get_all_op_names()
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutocastCUDA")
    }
    ours = set(openreg_lab.autocast_rules())
    assert ours == cuda - CUDA_ONLY
    for op in ours:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "AutocastPrivateUse1"), op


def test_policy_names():
    rules = openreg_lab.autocast_rules()
    assert rules["aten::mm"] == "lower_precision_fp"
    assert rules["aten::linear"] == "lower_precision_fp"
    assert rules["aten::exp"] == "fp32"
    assert rules["aten::pow.Tensor_Scalar"] == "fp32"
    assert rules["aten::sum.dim_IntList"] == "fp32_set_opt_dtype"
    assert rules["aten::addcmul"] == "promote"
    assert rules["aten::binary_cross_entropy"] == "banned"
    assert rules["aten::norm.Scalar"] == "fp32"


def test_amp_supported_dtypes():
    assert torch.openreg.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.amp.is_autocast_available("openreg")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_lower_precision_ops_match_cpu_with_manual_casts(dtype):
    a, b = torch.randn(8, 5), torch.randn(5, 3)
    with torch.autocast("openreg", dtype=dtype):
        out = torch.mm(a.openreg(), b.openreg())
    assert out.dtype == dtype
    expected = torch.mm(a.to(dtype), b.to(dtype))
    torch.testing.assert_close(out.cpu(), expected)


def test_fp32_ops_upcast_lower_precision_inputs():
    x = torch.rand(6).to(torch.bfloat16)
    with torch.autocast("openreg", dtype=torch.bfloat16):
        y = torch.exp(x.openreg())
        z = torch.log(x.openreg())
    assert y.dtype == torch.float32 and z.dtype == torch.float32
    torch.testing.assert_close(y.cpu(), torch.exp(x.float()))


def test_set_opt_dtype_computes_in_float32_without_casting():
    x = torch.randn(10).to(torch.float16).openreg()
    before = _cast_counts()
    with torch.autocast("openreg", dtype=torch.float16):
        s = torch.sum(x)
        sm = torch.softmax(x, 0)
        explicit = torch.sum(x, dtype=torch.float64)
    assert s.dtype == torch.float32 and sm.dtype == torch.float32
    assert explicit.dtype == torch.float64
    assert _cast_counts() == before  # dtype=float32 is passed; nothing is cast


def test_promote_to_widest():
    a = torch.randn(4)
    b = torch.randn(4).to(torch.bfloat16)
    with torch.autocast("openreg", dtype=torch.bfloat16):
        out = torch.addcmul(a.openreg(), b.openreg(), b.openreg())
        low = torch.addcmul(b.openreg(), b.openreg(), b.openreg())
    assert out.dtype == torch.float32
    assert low.dtype == torch.bfloat16
    torch.testing.assert_close(out.cpu(), torch.addcmul(a, b.float(), b.float()))


def test_banned_op_raises_with_advice():
    p = torch.rand(4, device="openreg")
    t = torch.rand(4, device="openreg")
    with torch.autocast("openreg", dtype=torch.float16):
        with pytest.raises(
            RuntimeError,
            # PyTorch's own first sentence, then our advice
            match=r"^torch\.nn\.functional\.binary_cross_entropy and torch\.nn\.BCELoss are unsafe to "
            r"autocast\. .*binary_cross_entropy_with_logits.*aten::binary_cross_entropy outside the autocast",
        ):
            torch.nn.functional.binary_cross_entropy(p, t)


def test_outside_autocast_nothing_is_cast():
    a = torch.randn(3, 3, device="openreg")
    before = _cast_counts()
    assert torch.mm(a, a).dtype == torch.float32
    assert _cast_counts() == before


def test_each_cast_is_counted_and_weight_cache_hits_are_told_apart():
    lin = torch.nn.Linear(4, 4).openreg()
    x = torch.randn(2, 4, device="openreg")
    casts0, hits0 = _cast_counts()
    with torch.autocast("openreg", dtype=torch.bfloat16):
        for _ in range(3):
            lin(x)
    casts, hits = _cast_counts()
    # First call: input, weight, bias are cast (weight and bias enter the cache).
    # Two more calls: the input is cast again, weight and bias come from the cache.
    assert casts - casts0 == 9
    assert hits - hits0 == 4


def test_cache_is_dropped_when_autocast_exits():
    lin = torch.nn.Linear(4, 4).openreg()
    x = torch.randn(2, 4, device="openreg")
    for _ in range(2):
        _, hits0 = _cast_counts()
        with torch.autocast("openreg", dtype=torch.bfloat16):
            lin(x)
        assert _cast_counts()[1] == hits0  # a new region starts with an empty cache


def test_cache_disabled():
    lin = torch.nn.Linear(4, 4).openreg()
    x = torch.randn(2, 4, device="openreg")
    _, hits0 = _cast_counts()
    with torch.autocast("openreg", dtype=torch.bfloat16, cache_enabled=False):
        lin(x)
        lin(x)
    assert _cast_counts()[1] == hits0


def test_mixed_precision_training_step_keeps_fp32_master_weights():
    torch.manual_seed(0)
    model = openreg_lab.examples.models.mlp().openreg()
    x = torch.randn(16, 64, device="openreg")
    y = torch.randint(0, 10, (16,), device="openreg")
    with torch.autocast("openreg", dtype=torch.bfloat16):
        logits = model(x)
        loss = torch.nn.functional.nll_loss(logits, y)
    assert loss.dtype == torch.float32  # nll_loss is on the fp32 list
    loss.backward()
    for p in model.parameters():
        assert p.dtype == torch.float32 and p.grad.dtype == torch.float32


def test_autocast_disabled_for_unsupported_dtype_warns():
    with pytest.warns(UserWarning, match="openreg"):
        with torch.autocast("openreg", dtype=torch.float64):
            pass
