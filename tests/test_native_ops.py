"""native_ops.yaml and the dispatcher agree exactly on what openreg implements natively."""

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
    listed = set(openreg_lab.native_ops())
    unlisted = sorted(_registered_for_privateuse1() - listed)
    assert unlisted == []


def test_no_op_is_listed_twice():
    seen: dict[str, str] = {}
    for family, ops in openreg_lab.native_ops_by_family().items():
        for op in ops:
            assert op not in seen, f"{op} is listed under {seen[op]} and {family}"
            seen[op] = family
