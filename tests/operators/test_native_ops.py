"""native_ops.yaml and the dispatcher agree exactly on what openreg implements natively."""

import pytest
import torch

import openreg_lab


def _registered_for_privateuse1() -> set[str]:
    return {
        name
        for name in torch._C._dispatch_get_all_op_names()
        if name.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1")
    }


def test_every_listed_op_is_registered():
    registered = _registered_for_privateuse1()
    missing = [op for op in openreg_lab.native_ops() if op not in registered]
    assert missing == []


def test_every_registered_op_is_listed():
    listed = set(openreg_lab.native_ops()) | set(openreg_lab.via_cpu_ops())
    unlisted = sorted(_registered_for_privateuse1() - listed)
    assert unlisted == []


def test_no_op_is_listed_twice():
    seen: dict[str, str] = {}
    for family, ops in openreg_lab.native_ops_by_family().items():
        for op in ops:
            assert op not in seen, f"{op} is listed under {seen[op]} and {family}"
            seen[op] = family


def test_via_cpu_ops_are_not_native_and_obey_the_policy():
    assert set(openreg_lab.via_cpu_ops()) == {"aten::mode.values", "aten::smooth_l1_loss"}
    assert not set(openreg_lab.via_cpu_ops()) & set(openreg_lab.native_ops())
    x, y = torch.randn(3, device="openreg"), torch.randn(3, device="openreg")
    with openreg_lab.fallback_policy("error"), pytest.raises(NotImplementedError, match="smooth_l1_loss"):
        torch.nn.functional.smooth_l1_loss(x, y)


def test_convolution_forward_and_backward_match_cpu():
    x = torch.randn(2, 2, 6, 6, requires_grad=True)
    w = torch.randn(4, 2, 3, 3, requires_grad=True)
    b = torch.randn(4, requires_grad=True)
    xd, wd, bd = (t.detach().openreg().requires_grad_() for t in (x, w, b))
    torch.nn.functional.conv2d(x, w, b, padding=1).square().sum().backward()
    out = torch.nn.functional.conv2d(xd, wd, bd, padding=1)
    assert out.device.type == "openreg"
    out.square().sum().backward()
    for cpu_t, dev_t in ((x, xd), (w, wd), (b, bd)):
        torch.testing.assert_close(dev_t.grad.cpu(), cpu_t.grad)
    t = torch.nn.functional.conv_transpose2d(xd.detach(), wd.detach().transpose(0, 1), stride=2)
    torch.testing.assert_close(
        t.cpu(), torch.nn.functional.conv_transpose2d(x.detach(), w.detach().transpose(0, 1), stride=2)
    )
