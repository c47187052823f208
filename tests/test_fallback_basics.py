"""The boxed CPU fallback already runs any op; its full semantics are tested with the operators."""

import pytest
import torch

import openreg_lab


def test_unregistered_op_runs_and_stays_on_device():
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::cumsum", "PrivateUse1")
    x = torch.randn(10)
    y = torch.cumsum(x.to("openreg"), 0)
    assert y.device == torch.device("openreg", 0)
    assert torch.allclose(y.cpu(), torch.cumsum(x, 0))


def test_result_stays_on_the_inputs_device():
    x = torch.randn(4, 4)
    y = torch.linalg.inv(x.to("openreg:1"))
    assert y.device == torch.device("openreg", 1)
    assert torch.allclose(y.cpu(), torch.linalg.inv(x), atol=1e-5)


def test_in_place_and_out_variants_write_the_device_tensor():
    x = torch.randn(8)
    d = x.to("openreg")
    ptr = d.data_ptr()
    d.exp_()
    assert d.data_ptr() == ptr and torch.allclose(d.cpu(), x.exp())
    out = torch.empty(8, device="openreg")
    r = torch.exp(x.to("openreg"), out=out)
    assert r is out and torch.allclose(out.cpu(), x.exp())
    out2 = torch.empty(0, device="openreg")  # resized by the CPU kernel
    torch.exp(x.to("openreg"), out=out2)
    assert out2.shape == (8,) and torch.allclose(out2.cpu(), x.exp())


def test_in_place_on_a_view_writes_the_base():
    x = torch.randn(4, 4)
    d = x.to("openreg")
    d[:, 1].exp_()
    expected = x.clone()
    expected[:, 1] = expected[:, 1].exp()
    assert torch.allclose(d.cpu(), expected)


_lib = torch.library.Library("openreg_test", "DEF")
_lib.define("first_row(Tensor(a) x) -> Tensor(a)")
_lib.impl("first_row", lambda x: x[0], "CPU")


def test_fallback_view_op_aliases_device_memory():
    # Every aten view op with a backend kernel is native on openreg; a user's view op with only
    # a CPU kernel reaches the fallback, whose result must alias the device tensor, not copy it.
    x = torch.randn(3, 4)
    d = x.to("openreg")
    row = torch.ops.openreg_test.first_row(d)
    assert row.device == d.device and row.shape == (4,)
    assert row.untyped_storage().data_ptr() == d.untyped_storage().data_ptr()
    row.fill_(0)
    assert d.cpu()[0].tolist() == [0.0] * 4
    assert torch.equal(d.cpu()[1:], x[1:])


def test_multiple_outputs():
    x = torch.randn(5, 6)
    values, indices = torch.sort(x.to("openreg"), dim=1)
    ev, ei = torch.sort(x, dim=1)
    assert values.device.type == "openreg" and indices.device.type == "openreg"
    assert torch.equal(values.cpu(), ev) and torch.equal(indices.cpu(), ei)


def test_mixed_openreg_devices_are_rejected():
    a = torch.randn(3, device="openreg:0")
    b = torch.randn(3, device="openreg:1")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.atan2(a, b)


def test_cpu_tensor_mixed_with_device_is_rejected_but_scalars_are_fine():
    a = torch.randn(3, device="openreg")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.atan2(a, torch.randn(3))
    r = torch.atan2(a, torch.tensor(2.0))
    assert r.device.type == "openreg"


@pytest.mark.parametrize("policy", ["allow", "warn", "error"])
def test_policy_round_trip(policy):
    openreg_lab.set_fallback_policy(policy)
    assert openreg_lab.get_fallback_policy() == policy


def test_policy_error_raises_before_running():
    d = torch.randn(4, device="openreg")
    before = d.cpu().clone()
    with openreg_lab.fallback_policy("error"):
        with pytest.raises(NotImplementedError, match=r"aten::atan\.out has no openreg kernel.*'error'"):
            d.atan_()
    assert torch.equal(d.cpu(), before)
    assert openreg_lab.get_fallback_policy() == "allow"


def test_bad_policy_is_rejected():
    with pytest.raises(ValueError, match="choose 'allow', 'warn' or 'error'"):
        openreg_lab.set_fallback_policy("sometimes")  # type: ignore[arg-type]
